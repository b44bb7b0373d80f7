"""NCCL's own lines: the collective trace (``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL``), and the
transport set-up lines (``NCCL_DEBUG=INFO``).

The trace is the one format read on whole chunks rather than through the prefix stage
(``llmb.results.lines``): a trace is most of a gigabyte log, its lines are found anywhere in a line
whatever precedes them, and reading it at hundreds of MB/s takes one ``re.split`` per chunk in C.
The transport reader takes NCCL's own ``host:pid:tid [dev] NCCL INFO`` prefix as its data (the host).
"""

from __future__ import annotations

import re
import sys
from collections import Counter

from llmb.results.records import Collective, NcclTransport

# NCCL's ncclDataType_t codes and their sizes in bytes.
NCCL_DATATYPE_BYTES = {0: 1, 1: 1, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 1, 11: 1}


_NCCL_LINE = (
    rb"NCCL INFO (\w{1,64}<+>): opCount <v> sendbuff <v> recvbuff <v> "
    rb"(count \d{1,20}<+> datatype \d{1,9}<+> op <v> root <v> comm <v> \[nranks=\d{1,9}<+>\])"
)


def _nccl_pattern(value: bytes) -> re.Pattern:
    """NCCL's collective line, ``value`` standing for one byte of each value:
    the collective's name, then what makes a call of the same kind (count,
    datatype, op, root, comm, communicator size) as one group, the key it is
    counted by (two groups, not four: a third fewer objects made per line).
    Possessive repeats where Python has them (3.11, a tenth faster): nothing
    is given back, so there is nothing to remember; 3.10 finds the same
    matches a little slower."""
    possessive = b"+" if sys.version_info >= (3, 11) else b""
    return re.compile(
        _NCCL_LINE.replace(b"<v>", value + b"+" + possessive).replace(b"<+>", possessive)
    )


_NCCL = _nccl_pattern(rb"\S")
# The last chunk the nccl parser found no "NCCL INFO" in: the nccl_transport parser, which reads the same
# chunk next, need not look again (a pass over the chunk; bytes are immutable, so "is" is proof).
_WITHOUT_NCCL: list[bytes | None] = [None]


class NcclReader:
    """``NCCL INFO AllReduce: opCount 2 sendbuff .. recvbuff .. count 1 datatype 1
    op 0 root 0 comm 0x.. [nranks=128] stream ..`` per collective call
    (``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL``). Calls are counted per
    distinct (collective, ``count .. [nranks=..]``) in C (``re.split`` and a
    ``Counter`` over its groups); the sums are made once at the end.
    ``count`` is the element count NCCL logs for the call (per rank for
    AllGather and ReduceScatter), bytes are that times the datatype's size.

    It hands on the chunk without the matched part of each collective line,
    so the other parsers scan a trace's remaining quarter, not all of it."""

    def __init__(self) -> None:
        # (name, "count N datatype D op O root R comm C [nranks=K]") -> calls
        self.counter: Counter[tuple[bytes, bytes]] = Counter()

    def feed(self, chunk: bytes) -> bytes | None:
        if b"NCCL INFO" not in chunk:
            _WITHOUT_NCCL[0] = chunk
            return None
        parts = _NCCL.split(chunk)  # [text, name, key, text, name, key, ..., text]
        if len(parts) == 1:
            return None
        self.counter.update(zip(parts[1::3], parts[2::3], strict=True))
        return b"".join(parts[0::3])

    def merge(self, other: NcclReader) -> None:
        """Add what ``other`` read (the text after this one's)."""
        self.counter.update(other.counter)

    def finish(self) -> tuple[Collective, ...]:
        totals: dict[bytes, dict] = {}
        for (name, key), calls in self.counter.items():
            # "count N datatype D op O root R comm C [nranks=K]": no value holds a space
            fields = key.split(b" ")
            count, dtype, nranks = fields[1], fields[3], fields[-1][len(b"[nranks=") : -1]
            entry = totals.setdefault(
                name, {"calls": 0, "elements": 0, "bytes": 0, "sizes": Counter(), "unknown": 0}
            )
            elements = int(count) * calls
            entry["calls"] += calls
            entry["elements"] += elements
            size = NCCL_DATATYPE_BYTES.get(int(dtype))
            if size is None:
                entry["unknown"] += calls
            else:
                entry["bytes"] += elements * size
            entry["sizes"][int(nranks)] += calls
        return tuple(
            Collective(
                name=name.decode("ascii", "replace"),
                calls=e["calls"],
                elements=e["elements"],
                bytes=e["bytes"],
                communicator_sizes=dict(sorted(e["sizes"].items())),
                unknown_datatypes=e["unknown"],
            )
            for name, e in sorted(totals.items(), key=lambda item: -item[1]["bytes"])
        )


# NCCL's set-up lines (NCCL_DEBUG=INFO; subsystems INIT, NET, P2P, SHM), after NCCL's prefix
# "host:pid:tid [dev] NCCL INFO ": transport/net.cc, p2p.cc, shm.cc, coll_net.cc, init.cc, plugin/net.
# a literal prefix: found in C
_SETUP = re.compile(rb"NCCL INFO (?:Channel |CollNet |Using network |NET/Plugin)")
# A channel line's transport: the first " via ..." after its "NCCL INFO Channel " that names one, a net's
# name running to its first "/" (each " via " is tried in bounded work: a lazy name up to "/<digit>" once
# rescanned the rest of the line from each of them)
_CHANNEL = re.compile(rb"NCCL INFO (?:Channel|CollNet) ")
_VIA = re.compile(rb" via (?:(NET|COLLNET)/([^/\n]{1,64})/\d|P2P/(\w{1,64}(?: pointer)?)|(SHM)/)")
# "Using network NAME" and "Loaded net plugin NAME (v8)": NAME is the rest of the line, less trailing
# spaces (rstrip) and the plugin's " (vN)"
_NETWORK = b"NCCL INFO Using network "
_PLUGIN = re.compile(rb"NCCL INFO NET/Plugin ?: Loaded net plugin ")
# NCCL's "host:pid:tid [dev] NCCL INFO " just before the set-up line's words (a host starts after a space
# or at the line's start: a look-behind, so that no word is rescanned from each of its letters)
_HOST = re.compile(rb"(?<!\S)([\w.-]{1,256}):\d{1,12}:\d{1,12} \[\d{1,6}\] NCCL INFO ")
_HOST_SPAN = 512  # bytes before the set-up line's "NCCL INFO " its host prefix is looked for in
MAX_HOSTS = 1 << 16


def _network(line: bytes) -> bytes | None:
    at = line.find(_NETWORK)
    if at < 0:
        return None
    return line[at + len(_NETWORK) :].rstrip() or None


def _plugin(line: bytes) -> bytes | None:
    if (m := _PLUGIN.search(line)) is None:
        return None
    name = line[m.end() :].rstrip()
    head, sep, version = name.rpartition(b" (v")
    if sep and head and version.endswith(b")") and version[:-1].isdigit():
        return head
    return name or None


class NcclTransportReader:
    """Which transports the run's NCCL communicators used: ``Channel 00/0 : 0[0]
    -> 8[0] [send] via NET/IB/0/GDRDMA`` (and ``via NET/Socket/0``, ``via
    P2P/IPC``, ``via P2P/CUMEM``, ``via SHM/direct``, ``CollNet 00/0 : 0
    [send] via COLLNET/SHARP/0``), ``Using network IB``, ``NET/Plugin: Loaded
    net plugin NAME (v8)``, and the hosts in NCCL's line prefix. NCCL writes
    them with ``NCCL_DEBUG=INFO`` (its default subsystems include INIT; a
    trace limited to ``NCCL_DEBUG_SUBSYS=COLL`` leaves them out)."""

    def __init__(self) -> None:
        self.channels: Counter[str] = Counter()
        self.networks: dict[str, None] = {}
        self.plugins: dict[str, None] = {}
        self.hosts: set[bytes] = set()

    def feed(self, chunk: bytes) -> None:
        if chunk is _WITHOUT_NCCL[0] or b"NCCL INFO" not in chunk:
            return
        position = 0
        while (found := _SETUP.search(chunk, position)) is not None:
            # each line once, however many set-up lines ran into it: the next search starts after it
            start = chunk.rfind(b"\n", 0, found.start()) + 1
            end = chunk.find(b"\n", found.end())
            end = len(chunk) if end < 0 else end
            position = end + 1
            line = chunk[start:end]
            if (channel := _CHANNEL.search(line)) is not None and (
                m := _VIA.search(line, channel.end())
            ) is not None:
                kind, name, p2p, shm = m.groups()
                label = shm or (b"P2P/" + p2p if p2p else kind + b"/" + name)
                self.channels[label.decode("utf-8", "replace")] += 1
            elif (network := _network(line)) is not None:
                self.networks.setdefault(network.decode("utf-8", "replace"))
            elif (plugin := _plugin(line)) is not None:
                self.plugins.setdefault(plugin.decode("utf-8", "replace"))
            else:
                continue
            if len(self.hosts) < MAX_HOSTS:
                prefix_end = found.start() - start + len(b"NCCL INFO ")
                host = _HOST.search(line, max(0, prefix_end - _HOST_SPAN), prefix_end)
                if host is not None:
                    self.hosts.add(host.group(1))

    def merge(self, other: NcclTransportReader) -> None:
        """Add what ``other`` read (the text after this one's): as if this one had read it."""
        self.channels.update(other.channels)
        for network in other.networks:
            self.networks.setdefault(network)
        for plugin in other.plugins:
            self.plugins.setdefault(plugin)
        self.hosts |= other.hosts
        while (
            len(self.hosts) > MAX_HOSTS
        ):  # one reading stops at MAX_HOSTS (only their number is kept)
            self.hosts.pop()

    def finish(self) -> NcclTransport | None:
        if not (self.channels or self.networks or self.plugins):
            return None
        return NcclTransport(
            channels=dict(self.channels.most_common()),
            networks=tuple(self.networks),
            plugins=tuple(self.plugins),
            hosts=len(self.hosts),
        )
