"""Which transports a run's NCCL communicators used, from NCCL_DEBUG=INFO's
set-up lines (formats of NCCL's transport/net.cc, p2p.cc, shm.cc,
coll_net.cc, init.cc and its net plugin loader), and the warning for a
multi-node run whose nodes talked over TCP sockets."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from experiment_dirs import make_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402
from llmb.results.collect import Collector  # noqa: E402
from llmb.results.formats import BUILTIN_PARSERS, NcclTransportReader  # noqa: E402
from llmb.results.records import RunResult  # noqa: E402
from llmb.results.scan import scan  # noqa: E402

MB = "pretrain_llama3_8b_bf16_gpus16_tp1_pp1_cp1_vpNone_ep1_etpNone_mbs2_gbs256"
RECIPE = {
    "workload": "llama31",
    "size": "8b",
    "gpu": "h100",
    "dtype": "bf16",
    "gpus": 16,
    "nodes": 2,
    "gbs": 256,
    "seq_len": 8192,
}

# Two nodes on InfiniBand through the RDMA net plugin, NVLink inside each node (NCCL 2.2x).
IB = [
    "node1:2211:2211 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib0",
    "node1:2211:2211 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>",
    "node1:2211:2211 [0] NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA Plugin v8 (v8)",
    "node1:2211:2211 [0] NCCL INFO Using network IBext_v8",
    "node1:2211:2290 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    "node1:2211:2290 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    "node1:2211:2290 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IBext_v8/0/GDRDMA",
    "node1:2211:2290 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IBext_v8/0(1)/GDRDMA",
    "node2:3302:3302 [0] NCCL INFO Using network IBext_v8",
    "node2:3302:3377 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [receive] via NET/IBext_v8/0/GDRDMA",
    "node2:3302:3377 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [send] via NET/IBext_v8/0/GDRDMA",
    "node2:3302:3377 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
]
# The same two nodes with no usable HCA: NCCL falls back to TCP sockets.
SOCKETS = [
    "node1:4410:4410 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
    "node1:4410:4410 [0] NCCL INFO NET/IB : No device found.",
    "node1:4410:4410 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.0.5<0>",
    "node1:4410:4410 [0] NCCL INFO Using network Socket",
    "node1:4410:4472 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
    "node1:4410:4472 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0",
    "node2:5120:5188 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [receive] via NET/Socket/0",
]
# One node: NCCL names Socket as its network (no HCA) but no channel uses it.
ONE_NODE = [
    "0: ws1:7001:7001 [0] NCCL INFO Using network Socket",
    "0: ws1:7001:7050 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct",
    "1: ws1:7002:7051 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/direct pointer",
    "1: ws1:7002:7051 [1] NCCL INFO Channel 00 : 1[3e000] -> 0[3d000] via P2P/IPC",  # an older NCCL's bus ids
]


def transport_of(tmp_path: Path, lines: list[str]):
    log = tmp_path / "log.out"
    log.write_text("\n".join(lines) + "\n")
    return scan(str(log), list(BUILTIN_PARSERS)).findings["nccl_transport"]


def test_ib_through_a_net_plugin(tmp_path):
    # a collective trace beside them changes nothing
    t = transport_of(tmp_path, [*IB, *loggen.nccl_lines(50)])
    assert t.channels == {"NET/IBext_v8": 4, "P2P/CUMEM": 2}
    assert (t.networks, t.plugins, t.hosts) == (("IBext_v8",), ("NCCL RDMA Plugin v8",), 2)
    assert not t.over_sockets(2)


def test_socket_fallback_between_nodes(tmp_path):
    t = transport_of(tmp_path, SOCKETS)
    assert t.channels == {"NET/Socket": 2, "P2P/IPC": 1}
    assert (t.networks, t.plugins, t.hosts) == (("Socket",), (), 2)
    assert t.over_sockets(None)
    # Only the Socket network named, on two nodes, and no channel lines: still sockets between them.
    assert transport_of(tmp_path, SOCKETS[:4]).over_sockets(2)


def test_one_node_naming_socket_is_not_a_fallback(tmp_path):
    t = transport_of(tmp_path, ONE_NODE)
    assert t.channels == {"P2P/direct pointer": 1, "SHM": 1, "P2P/IPC": 1}
    assert (t.networks, t.hosts) == (("Socket",), 1)
    assert not t.over_sockets(1) and not t.over_sockets(None)
    assert t.over_sockets(2)  # the recipe says two nodes, yet Socket is the only network


def test_a_log_without_nccl_set_up_lines_has_no_finding(tmp_path):
    assert (
        transport_of(tmp_path, [*loggen.megatron_bridge_lines(range(1, 3)), *loggen.nccl_lines(20)])
        is None
    )


def test_lines_split_across_chunks_are_all_counted():
    reader = NcclTransportReader()
    text = ("\n".join(IB) + "\n").encode()
    cut = text.index(b"\n", len(text) // 2) + 1
    reader.feed(text[:cut])
    reader.feed(text[cut:])
    assert reader.finish().channels == {"NET/IBext_v8": 4, "P2P/CUMEM": 2}


def _run(root: Path, nccl: list[str]) -> None:
    make_run(root, MB, [*nccl, *loggen.megatron_bridge_lines(range(1, 51), gbs=256)], recipe=RECIPE)


def test_results_warn_of_a_socket_fallback(cli, host, tmp_path):
    _run(tmp_path / "sockets", SOCKETS)
    (row,) = json.loads(cli("results", str(tmp_path / "sockets"), "--json").out)
    assert row["nccl_transport"] == {
        "channels": {"NET/Socket": 2, "P2P/IPC": 1},
        "networks": ["Socket"],
        "plugins": [],
        "hosts": 2,
        "over_sockets": True,
    }
    (warning,) = [n for n in row["notes"] if n.startswith("warning:")]
    assert "TCP sockets (NET/Socket)" in warning and "NET/Socket (2)" in warning
    table = cli("results", str(tmp_path / "sockets")).out
    assert "NCCL transport: NET/Socket 2, P2P/IPC 1; network Socket" in table
    assert "warning: NCCL connected this run's nodes over TCP sockets" in table
    # Stored and read back, the finding stays.
    (collected,) = Collector(host).collect([str(tmp_path / "sockets")])
    again = RunResult.from_dict(json.loads(json.dumps(collected.result.to_dict())))
    assert again.nccl_transport == collected.result.nccl_transport


def test_results_of_an_ib_run_name_the_transports_without_warning(cli, tmp_path):
    _run(tmp_path / "ib", IB)
    (row,) = json.loads(cli("results", str(tmp_path / "ib"), "--json").out)
    assert row["nccl_transport"]["over_sockets"] is False
    assert row["nccl_transport"]["channels"] == {"NET/IBext_v8": 4, "P2P/CUMEM": 2}
    assert not [n for n in row["notes"] if n.startswith("warning:")]
    table = cli("results", str(tmp_path / "ib")).out
    assert (
        "NCCL transport: NET/IBext_v8 4, P2P/CUMEM 2; network IBext_v8; net plugin NCCL RDMA Plugin v8"
        in table
    )


def test_a_log_without_them_has_a_null_field(cli, tmp_path):
    _run(tmp_path / "none", [])
    (row,) = json.loads(cli("results", str(tmp_path / "none"), "--json").out)
    assert row["nccl_transport"] is None
