"""llmb's own log parsers, contributed through ``llmb_log_parsers``.

Formats (field-facts §2): Megatron-Bridge iteration lines, NeMo 2
(Lightning) iteration lines, checkpoint save/load timings in both formats,
NCCL collective traces, NCCL's transport set-up lines, and the lines that
say why a run failed.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from llmb.results.records import CheckpointTimings, Collective, Failure, IterationLog, NcclTransport, Sample
from llmb.results.scan import LogParser

MAX_SAMPLES = 100_000  # distinct iterations kept; a real run logs tens
MAX_MESSAGE = 400


def _float(text: bytes) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _int(text: bytes) -> int | None:
    value = _float(text)
    return int(value) if value is not None and math.isfinite(value) else None


_RANK_KEY = re.compile(rb"\S+/\d+|\[rank\d+\]:|\d+:")


def _line_prefix(chunk: bytes, start: int) -> bytes:
    """What precedes position ``start`` on its line, reduced to a rank key:
    a ``job/3``, ``[rank3]:`` or ``3:`` prefix, else nothing."""
    line_start = chunk.rfind(b"\n", 0, start) + 1
    head = chunk[line_start:start].split(None, 1)
    return head[0] if head and _RANK_KEY.fullmatch(head[0]) else b""


def lines_containing(chunk: bytes, *needles: bytes) -> list[tuple[int, bytes]]:
    """(start, line) of every line of ``chunk`` that contains one of the
    literal ``needles``, in order, each line once. ``bytes.find`` does the
    searching in C, so a few interesting lines in megabytes of noise cost
    next to nothing; run regular expressions on what this returns."""
    found: dict[int, bytes] = {}
    for needle in needles:
        position = chunk.find(needle)
        while position >= 0:
            start = chunk.rfind(b"\n", 0, position) + 1
            end = chunk.find(b"\n", position)
            end = len(chunk) if end < 0 else end
            found.setdefault(start, chunk[start:end])
            position = chunk.find(needle, end)
    return sorted(found.items())


def _fields(text: bytes) -> dict[bytes, bytes]:
    """``| key: value | key: value |`` -> {key: value} (keys lower-cased)."""
    out = {}
    for part in text.split(b"|"):
        key, sep, value = part.partition(b":")
        if sep:
            out[key.strip().lower()] = value.strip()
    return out


class _Iterations:
    """Shared bookkeeping of the two iteration-line formats."""

    def __init__(self, fmt: str):
        self.log = IterationLog(format=fmt)

    def add(self, iteration: int, last: int, sample: Sample) -> None:
        log = self.log
        log.last = last if log.last is None else max(log.last, last)
        if iteration in log.samples:
            log.duplicates += 1
        elif len(log.samples) >= MAX_SAMPLES:
            log.dropped += 1
            return
        log.samples[iteration] = sample
        if sample.grad_norm is not None and math.isnan(sample.grad_norm) and iteration not in log.nan_grad_norm:
            log.nan_grad_norm.append(iteration)

    def finish(self) -> IterationLog | None:
        return self.log if self.log.samples else None


_MB = re.compile(
    rb"Step Time : ([0-9.eE+-]+)s GPU utilization: ?([0-9.eE+-]+) ?MODEL_TFLOP/s/GPU"
    rb"|iteration\s+(\d+)\s*/\s*(\d+)\s*\|([^\n]*)"
)
_TFLOPS_FIELD = re.compile(rb"([0-9.eE+-]+)\s*MODEL_TFLOP/s/GPU")


class MegatronBridgeReader(_Iterations):
    """``Step Time : 1.00s GPU utilization: 939.5MODEL_TFLOP/s/GPU`` followed
    by `` iteration 35/ 50 | ... elapsed time per iteration (ms): ... |``.
    The Step Time line precedes the iteration line it belongs to; its TFLOPS
    pair with that iteration (per rank prefix), never by position in a list.
    A ``throughput per GPU (TFLOP/s/GPU)`` field in the iteration line wins."""

    def __init__(self) -> None:
        super().__init__("megatron_bridge")
        self.pending: dict[bytes, float] = {}

    def feed(self, chunk: bytes) -> None:
        # Long literals: CPython's search skips faster the longer the needle.
        if b"elapsed time per iteration" not in chunk:
            # A Step Time line may end a chunk whose iteration line starts the next.
            if b"MODEL_TFLOP/s/GPU" not in chunk[-65536:]:
                return
        for _, line in lines_containing(chunk, b"elapsed time per iteration", b"MODEL_TFLOP/s/GPU"):
            m = _MB.search(line)
            if m is None:
                continue
            rank = _line_prefix(line, m.start())
            if m.group(1) is not None:
                tflops = _float(m.group(2))
                if tflops is not None:
                    self.pending[rank] = tflops
                continue
            fields = _fields(m.group(5))
            elapsed = fields.get(b"elapsed time per iteration (ms)")
            if elapsed is None:
                continue  # another format's iteration line
            tflops = _float(fields[b"throughput per gpu (tflop/s/gpu)"]) if (
                b"throughput per gpu (tflop/s/gpu)" in fields) else None
            if tflops is None and (inline := _TFLOPS_FIELD.search(m.group(5))):
                tflops = _float(inline.group(1))
            pending = self.pending.pop(rank, None)
            self.add(int(m.group(3)), int(m.group(4)), Sample(
                iteration=int(m.group(3)),
                step_time_ms=_float(elapsed),
                tflops_per_gpu=tflops if tflops is not None else pending,
                loss=_float(fields.get(b"lm loss", b"")),
                grad_norm=_float(fields.get(b"grad norm", b"")),
                global_batch_size=_int(fields.get(b"global batch size", b"")),
            ))


_NEMO = re.compile(rb"iteration\s+(\d+)\s*/\s*(\d+)\s*\|([^\n]*train_step_timing[^\n]*)")


class NeMo2Reader(_Iterations):
    """``Training epoch 0, iteration 45/99 | ... | train_step_timing in s: 6.08 |
    TFLOPS_per_GPU: 1.249e+03 | ...`` (0-based: a 50-step run ends at 49/49)."""

    def __init__(self) -> None:
        super().__init__("nemo2")

    def feed(self, chunk: bytes) -> None:
        if b"train_step_timing in s" not in chunk:
            return
        for _, line in lines_containing(chunk, b"train_step_timing in s"):
            m = _NEMO.search(line)
            if m is None:
                continue
            fields = _fields(m.group(3))
            seconds = _float(fields.get(b"train_step_timing in s", b""))
            iteration = int(m.group(1))
            self.add(iteration, int(m.group(2)), Sample(
                iteration=iteration,
                step_time_ms=None if seconds is None else seconds * 1000.0,
                tflops_per_gpu=_float(fields.get(b"tflops_per_gpu", b"")),
                loss=_float(fields.get(b"reduced_train_loss", b"")),
                grad_norm=_float(fields.get(b"grad_norm", b"")),
                global_batch_size=_int(fields.get(b"global_batch_size", b"")),
            ))


_CKPT_TIMER = re.compile(rb"(save|load)-checkpoint\s*\.*:\s*\(\s*([0-9.]+)\s*,\s*([0-9.]+)\s*\)")
_CKPT_SAVED = re.compile(rb"successfully saved checkpoint from iteration\s+(\d+)")
_NEMO_SAVE = re.compile(rb"Global Checkpoint Save\s*:\s*Rank\s*:\s*\d+\s*:\s*Iteration\s*:\s*(\d+)\s*:[^\n]*?"
                        rb"Save duration\s*:\s*([0-9.]+)s")
_NEMO_LOAD = re.compile(rb"Global Checkpoint Load\s*:\s*Rank\s*:\s*\d+\s*:[^\n]*?"
                        rb"Time spent in load_checkpoint\s*:\s*([0-9.]+)s")


class CheckpointReader:
    """Megatron: ``(min, max) time across ranks (ms): save-checkpoint ...: (a, b)``
    (and ``load-checkpoint``); NeMo: ``Global Checkpoint Save : ... Save
    duration: 4.389s`` and ``Global Checkpoint Load : ... Time spent in
    load_checkpoint: 9.712s``. The slowest rank counts."""

    def __init__(self) -> None:
        self.save: float | None = None
        self.load: float | None = None
        self.iteration: int | None = None

    def _max(self, current: float | None, value: float | None) -> float | None:
        if value is None:
            return current
        return value if current is None else max(current, value)

    def feed(self, chunk: bytes) -> None:
        if b"eckpoint" not in chunk:
            return
        chunk = b"\n".join(line for _, line in lines_containing(chunk, b"eckpoint"))
        for kind, _low, high in _CKPT_TIMER.findall(chunk):
            seconds = _float(high)
            seconds = None if seconds is None else seconds / 1000.0
            if kind == b"save":
                self.save = self._max(self.save, seconds)
            else:
                self.load = self._max(self.load, seconds)
        for iteration in _CKPT_SAVED.findall(chunk):
            self.iteration = int(iteration)
        for iteration, seconds in _NEMO_SAVE.findall(chunk):
            self.iteration = int(iteration)
            self.save = self._max(self.save, _float(seconds))
        for seconds in _NEMO_LOAD.findall(chunk):
            self.load = self._max(self.load, _float(seconds))

    def finish(self) -> CheckpointTimings | None:
        if self.save is None and self.load is None:
            return None
        return CheckpointTimings(save_s=self.save, load_s=self.load, save_iteration=self.iteration)


# NCCL's ncclDataType_t codes and their sizes in bytes.
NCCL_DATATYPE_BYTES = {0: 1, 1: 1, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 1, 11: 1}
_NCCL = re.compile(
    rb"NCCL INFO (\w+): opCount \S+ sendbuff \S+ recvbuff \S+ count (\d+) datatype (\d+) op \S+ root \S+ "
    rb"comm \S+ \[nranks=(\d+)\]"
)


class NcclReader:
    """``NCCL INFO AllReduce: opCount 2 sendbuff .. recvbuff .. count 1 datatype 1
    op 0 root 0 comm 0x.. [nranks=128] stream ..`` per collective call
    (``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL``). Calls are counted per
    distinct (collective, count, datatype, nranks) in C (``re.split`` and a
    ``Counter`` over its groups); the sums are made once at the end.
    ``count`` is the element count NCCL logs for the call (per rank for
    AllGather and ReduceScatter), bytes are that times the datatype's size.

    It hands on the chunk without the matched part of each collective line,
    so the other parsers scan a trace's remaining quarter, not all of it."""

    def __init__(self) -> None:
        self.counter: Counter[tuple[bytes, bytes, bytes, bytes]] = Counter()

    def feed(self, chunk: bytes) -> bytes | None:
        if b"NCCL INFO" not in chunk:
            return None
        parts = _NCCL.split(chunk)  # [text, name, count, dtype, nranks, text, ...]
        if len(parts) == 1:
            return None
        self.counter.update(zip(parts[1::5], parts[2::5], parts[3::5], parts[4::5], strict=True))
        return b"".join(parts[0::5])

    def finish(self) -> tuple[Collective, ...]:
        totals: dict[bytes, dict] = {}
        for (name, count, dtype, nranks), calls in self.counter.items():
            entry = totals.setdefault(name, {"calls": 0, "elements": 0, "bytes": 0, "sizes": Counter(), "unknown": 0})
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
_SETUP = re.compile(rb"NCCL INFO (?:Channel |CollNet |Using network |NET/Plugin)")  # a literal prefix: found in C
_VIA = re.compile(rb"NCCL INFO (?:Channel|CollNet) [^\n]*? via (?:(NET|COLLNET)/(.+?)/\d|P2P/(\w+(?: pointer)?)|(SHM)/)")
_NETWORK = re.compile(rb"NCCL INFO Using network ([^\n]+?)\s*$")
_PLUGIN = re.compile(rb"NCCL INFO NET/Plugin ?: Loaded net plugin ([^\n]+?)(?: \(v\d+\))?\s*$")
_HOST = re.compile(rb"(?:^|\s)([\w.-]+):\d+:\d+ \[\d+\] NCCL INFO ")
MAX_HOSTS = 1 << 16


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
        if b"NCCL INFO" not in chunk:
            return
        previous = -1
        for found in _SETUP.finditer(chunk):
            start = chunk.rfind(b"\n", 0, found.start()) + 1
            if start == previous:
                continue  # each line once, however many set-up lines ran into it
            previous = start
            end = chunk.find(b"\n", found.end())
            line = chunk[start:end if end >= 0 else len(chunk)]
            if (m := _VIA.search(line)) is not None:
                kind, name, p2p, shm = m.groups()
                label = shm or (b"P2P/" + p2p if p2p else kind + b"/" + name)
                self.channels[label.decode("utf-8", "replace")] += 1
            elif (m := _NETWORK.search(line)) is not None:
                self.networks.setdefault(m.group(1).decode("utf-8", "replace"))
            elif (m := _PLUGIN.search(line)) is not None:
                self.plugins.setdefault(m.group(1).decode("utf-8", "replace"))
            else:
                continue
            if len(self.hosts) < MAX_HOSTS and (host := _HOST.search(line)) is not None:
                self.hosts.add(host.group(1))

    def finish(self) -> NcclTransport | None:
        if not (self.channels or self.networks or self.plugins):
            return None
        return NcclTransport(channels=dict(self.channels.most_common()), networks=tuple(self.networks),
                             plugins=tuple(self.plugins), hosts=len(self.hosts))


# kind -> (literals one of which every such line holds, the literals that mark the line)
_FAILURE_NEEDLES = {
    "cuda_oom": ((b"out of memory",), (b"CUDA out of memory", b"CUDA error: out of memory")),
    "nccl_timeout": ((b"Watchdog caught",), (b"Watchdog caught collective operation timeout",)),
    "node_failure": ((b"NODE", b"Node failure"), (b"DUE TO NODE FAILURE", b"Node failure on", b"NODE_FAIL")),
}
_TRACEBACK = b"Traceback (most recent call last):"
_EXCEPTION = re.compile(rb"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure|Warning)\b")


def _message(line: bytes) -> str:
    return line.decode("utf-8", "replace").strip()[:MAX_MESSAGE]


class FailureReader:
    """The lines that say why a run stopped: CUDA out of memory, an NCCL
    watchdog timeout, a node failure (Slurm's words), and the exception line
    that ends a Python traceback (the first traceback's: later ranks usually
    fail because the first did)."""

    def __init__(self) -> None:
        self.found: dict[str, str] = {}
        self.tracebacks = 0
        self.open_prefix: bytes | None = None  # inside a traceback that crossed a chunk end

    def feed(self, chunk: bytes) -> None:
        for kind, (cheap, needles) in _FAILURE_NEEDLES.items():
            if kind in self.found or not any(literal in chunk for literal in cheap):
                continue
            positions = [p for needle in needles if (p := chunk.find(needle)) >= 0]
            if positions:
                first = min(positions)
                start = chunk.rfind(b"\n", 0, first) + 1
                end = chunk.find(b"\n", first)
                self.found[kind] = _message(chunk[start:end if end >= 0 else len(chunk)])
        if self.open_prefix is not None:
            self._follow(chunk, 0, self.open_prefix)
        if _TRACEBACK in chunk:
            self.tracebacks += chunk.count(_TRACEBACK)
            if "python_exception" not in self.found and self.open_prefix is None:
                at = chunk.find(_TRACEBACK)
                line_start = chunk.rfind(b"\n", 0, at) + 1
                prefix = chunk[line_start:at]
                self._follow(chunk, chunk.find(b"\n", at) + 1, prefix)

    def _follow(self, chunk: bytes, position: int, prefix: bytes) -> None:
        """Walk the traceback's lines (those with its prefix) to the exception."""
        self.open_prefix = None
        while position < len(chunk):
            end = chunk.find(b"\n", position)
            end = len(chunk) if end < 0 else end
            line = chunk[position:end]
            position = end + 1
            if prefix and not line.startswith(prefix):
                continue  # another rank's line, interleaved
            body = line[len(prefix):]
            if not body.strip() or body[:1] in (b" ", b"\t") or body.startswith(_TRACEBACK):
                continue
            if _EXCEPTION.match(body):
                self.found.setdefault("python_exception", _message(body))
                return
            if body.startswith((b"During handling", b"The above exception")):
                continue
            return  # not a traceback after all
        self.open_prefix = prefix

    def finish(self) -> list[Failure]:
        return [Failure(kind=kind, message=message) for kind, message in self.found.items()]


BUILTIN_PARSERS = (  # NCCL first: it takes the collective lines out of what the others read
    LogParser("nccl", "NCCL collective trace (NCCL_DEBUG_SUBSYS=COLL)", NcclReader),
    LogParser("nccl_transport", "NCCL transports: channels, network, net plugin (NCCL_DEBUG=INFO)",
              NcclTransportReader),
    LogParser("megatron_bridge", "Megatron-Bridge iteration and Step Time lines", MegatronBridgeReader),
    LogParser("nemo2", "NeMo 2 (Lightning) iteration lines", NeMo2Reader),
    LogParser("checkpoint", "checkpoint save and load timings (Megatron and NeMo)", CheckpointReader),
    LogParser("failures", "CUDA OOM, NCCL watchdog timeout, node failure, Python exception", FailureReader),
)
