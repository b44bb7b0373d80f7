"""Measurements -> per-node figures, flags and the verdict (``preflight.json``).

A node's figure of each kind is its slowest rank's (one slow GPU slows every step of a
data-parallel job); its cross-node figure is ``pairing.node_scores``'. A node is flagged for a
figure below ``expected.FRACTION`` of the expected figure (GPU runs), or below the median of
the other nodes' figures by more than ``expected.PEER_MARGIN``; for what nvidia-smi says
(``gpu_info.problems``); and for NCCL over TCP sockets between nodes (``transport``). The
verdict is ``flagged`` when a node is; ``not_judged`` when no threshold could be applied at all
(CPU ranks have no datasheet figure, one node has no peers, no nvidia-smi or NCCL lines to read):
nothing was held against anything, which is no pass; else ``pass``. ``not_applied`` says which
thresholds could not be applied, and why, in either case. ``exclude`` lists the flagged nodes,
which ``--exclude-from`` reads.
"""

from __future__ import annotations

import statistics

from llmb.preflight import gpu_info, pairing, transport
from llmb.preflight.expected import FRACTION, KINDS, PEER_MARGIN, UNITS, Expected

FORMAT = 1
PASS, FLAGGED, NOT_JUDGED = "pass", "flagged", "not_judged"


def node_figures(data: dict) -> dict[str, dict]:
    """node -> {kind: figure or None}."""
    nodes = data["nodes"]
    ranks = data["ranks"]
    out: dict[str, dict] = {n: {k: None for k in KINDS} for n in nodes}
    for kind in ("gemm", "memory", "intra"):
        for r in ranks:
            value = r.get(kind)
            if value is not None:
                current = out[r["node"]][kind]
                out[r["node"]][kind] = value if current is None else min(current, value)
    pair_figures: dict[tuple[int, int], float] = {}
    for r in ranks:
        for key, value in (r.get("pairs") or {}).items():
            a, b = (int(x) for x in key.split("-"))
            # the pair's slowest member's
            pair_figures[(a, b)] = min(pair_figures.get((a, b), value), value)
    for index, score in enumerate(pairing.node_scores(len(nodes), pair_figures)):
        out[nodes[index]]["inter"] = score
    return out


def _peer_median(figures: dict[str, dict], node: str, kind: str) -> float | None:
    others = [f[kind] for n, f in figures.items() if n != node and f[kind] is not None]
    return statistics.median(others) if others else None


def build(data: dict, expected: Expected, log_text: str = "") -> dict:
    """The report: per-node figures and flags, the job's all-reduce, the verdict and ``exclude``."""
    figures = node_figures(data)
    transports = transport.per_host(log_text) if log_text else {}
    reports = {r["node"]: r["gpu_report"] for r in data["ranks"] if r.get("gpu_report") is not None}
    multi_node = len(data["nodes"]) > 1
    # the figures measured, and those held against a datasheet figure or against peers
    measured: set[str] = set()
    against_datasheet: set[str] = set()
    against_peers: set[str] = set()
    other_checks = False  # nvidia-smi's report or NCCL's transport read for some node
    rows = []
    for node in data["nodes"]:
        reasons = []
        for kind in KINDS:
            value = figures[node][kind]
            if value is None:
                continue
            measured.add(kind)
            want = expected.figure(kind)
            if want is not None:
                against_datasheet.add(kind)
            if want is not None and value < FRACTION[kind] * want:
                reasons.append(
                    f"{kind} {value:.3g} {UNITS[kind]} < {FRACTION[kind]:.0%} of the expected {want:g}"
                )
            peers = _peer_median(figures, node, kind)
            if kind == "inter" and len(data["nodes"]) < 3:
                peers = None  # two nodes share their one pair: it cannot say which end is slow
            if peers is not None:
                against_peers.add(kind)
            if peers is not None and value < (1 - PEER_MARGIN) * peers:
                reasons.append(
                    f"{kind} {value:.3g} {UNITS[kind]} is {1 - value / peers:.0%} below the other nodes' "
                    f"median {peers:.3g}"
                )
        report = reports.get(node)
        if report is not None:
            other_checks = True
            reasons += gpu_info.problems(
                report,
                data["gpu"],
                data["ranks_per_node"].get(node, 0)
                if data.get("gpus_per_node") is None
                else data["gpus_per_node"],
            )
        host = transport.host_of(node, list(transports))
        seen = transports.get(host) if host else None
        if seen is not None and multi_node:
            other_checks = True
        if seen is not None and multi_node and seen["over_sockets"]:
            reasons.append("NCCL connected over TCP sockets (NET/Socket), not InfiniBand/RoCE")
        rows.append(
            {
                "node": node,
                **figures[node],
                "ranks": data["ranks_per_node"].get(node),
                "driver": (report or {}).get("driver"),
                "gpus": [g.get("name") for g in (report or {}).get("gpus", [])] or None,
                "transport": seen,
                "flagged": bool(reasons),
                "reasons": reasons,
            }
        )
    worlds = [r["world"] for r in data["ranks"] if r.get("world") is not None]
    flagged = [row["node"] for row in rows if row["flagged"]]
    if flagged:
        verdict = FLAGGED
    elif against_datasheet or against_peers or other_checks:
        verdict = PASS
    else:
        verdict = NOT_JUDGED
    return {
        "format": FORMAT,
        "job_id": data.get("job_id"),
        "gpu": data.get("gpu"),
        "cluster": data.get("cluster"),  # SLURM_CLUSTER_NAME; None off Slurm
        "device": data.get("device"),
        "backend": data.get("backend"),
        "nodes": data["nodes"],
        "sizes": data.get("sizes"),
        "expected": expected.as_dict(),
        "pairs": data.get("pairs"),
        "world_allreduce_gb_s": min(worlds) if worlds else None,
        "rows": rows,
        "verdict": verdict,
        "not_applied": not_applied(
            data, measured, against_datasheet, against_peers, has_reports=bool(reports)
        ),
        "exclude": flagged,
    }


def _kinds(kinds: set[str]) -> str:
    return ", ".join(k for k in KINDS if k in kinds)


def not_applied(
    data: dict,
    measured: set[str],
    against_datasheet: set[str],
    against_peers: set[str],
    has_reports: bool,
) -> list[str]:
    """Why the thresholds that were not applied were not, one short phrase each: ``CPU ranks: no
    datasheet figure``, ``1 node: no peers``; empty when every measured figure met both."""
    out = []
    nodes = len(data["nodes"])
    no_datasheet = measured - against_datasheet
    if no_datasheet:
        if (data.get("device") or "cpu") != "cuda":
            out.append("CPU ranks: no datasheet figure")
        else:
            out.append(f"no datasheet figure of {data.get('gpu')} for {_kinds(no_datasheet)}")
    no_peers = measured - against_peers
    if no_peers:
        if nodes == 1:
            out.append("1 node: no peers")
        elif no_peers == {"inter"} and nodes == 2:
            out.append("2 nodes: their one pair cannot say which end is slow (inter)")
        else:
            out.append(f"no peers' figures for {_kinds(no_peers)}")
    if (data.get("device") or "cpu") == "cuda" and not has_reports:
        out.append("no nvidia-smi report from any node")
    return out
