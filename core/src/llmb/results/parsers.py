"""llmb's own log parsers, contributed through ``llmb_log_parsers``.

Formats (field-facts §2): Megatron-Bridge iteration lines, NeMo 2
(Lightning) iteration lines, torchtitan's metrics lines, checkpoint
save/load timings in both NVIDIA formats, NCCL collective traces, NCCL's
transport set-up lines, and the lines that say why a run failed (with where
each is in the log, so that the first real error can be told from what
followed it).
"""

from __future__ import annotations

import math
import re
import signal
import statistics
import sys
from collections import Counter
from collections.abc import Callable
from datetime import datetime

from llmb.results.records import (
    SYMPTOMS,
    CheckpointTimings,
    Collective,
    Failure,
    IterationLog,
    NcclTransport,
    Sample,
)
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


# A terminal's colour and style codes (a log written through a pseudo-terminal, or coloured on purpose):
# removed from a line before its fields are read.
_ANSI = re.compile(rb"\x1b\[[0-9;]{0,32}[A-Za-z]")


def _plain(line: bytes) -> bytes:
    return _ANSI.sub(b"", line) if b"\x1b" in line else line


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
        if (
            sample.grad_norm is not None
            and math.isnan(sample.grad_norm)
            and iteration not in log.nan_grad_norm
        ):
            log.nan_grad_norm.append(iteration)

    def finish(self) -> IterationLog | None:
        return self.log if self.log.samples else None


# Megatron-Bridge's train_utils.py, printed by rank 0: "...MODEL_TFLOP/s/GPU" since its commit 23fc545
# (2025-11), "...TFLOP/s/GPU" from d42316e (2025-09) until then.
_STEP_TIME = re.compile(
    rb"Step Time : ([0-9.eE+-]{1,32})s GPU utilization: ?([0-9.eE+-]{1,32}) ?(?:MODEL_)?TFLOP/s/GPU"
)
# Every pattern's work is linear in the length of the line it is given, whatever the line holds (issue 32):
# numbers and runs of spaces are bounded, a group that may start anywhere starts only where its run does (a
# look-behind), and a free-form tail is found with bytes.find or rstrip rather than by a lazy group that
# would rescan the rest of the line from every start. tests/test_parse_adversarial_lines.py attacks each.
_MB_ITERATION = re.compile(
    rb"iteration\s{1,64}(\d{1,12})\s{0,64}/\s{0,64}(\d{1,12})\s{0,64}\|([^\n]*)"
)
_BEFORE_STEP_TIME = re.compile(rb"(?=Step Time : )")
_TFLOPS_FIELD = re.compile(rb"(?<![0-9.eE+-])([0-9.eE+-]{1,64})\s{0,64}MODEL_TFLOP/s/GPU")


class MegatronBridgeReader(_Iterations):
    """``Step Time : 1.00s GPU utilization: 939.5MODEL_TFLOP/s/GPU`` (before
    November 2025: ``...939.5TFLOP/s/GPU``) followed
    by `` iteration 35/ 50 | ... elapsed time per iteration (ms): ... |``.
    The Step Time line precedes the iteration line it belongs to; its TFLOPS
    pair with that iteration (per rank prefix), never by position in a list.
    Both may share a line (two ranks' output joined): each Step Time pairs
    with the iteration that follows it. A ``throughput per GPU
    (TFLOP/s/GPU)`` field in the iteration line wins."""

    def __init__(self) -> None:
        super().__init__("megatron_bridge")
        self.pending: dict[bytes, float] = {}

    def feed(self, chunk: bytes) -> None:
        # Long literals: CPython's search skips faster the longer the needle. A Step Time line may be in
        # an earlier chunk than its iteration line (whatever other output comes between): it waits in pending.
        if b"elapsed time per iteration" not in chunk and b"TFLOP/s/GPU" not in chunk:
            return
        for _, line in lines_containing(chunk, b"elapsed time per iteration", b"TFLOP/s/GPU"):
            line = _plain(line)
            rank = _line_prefix(line, len(line))
            # Each part starts at a Step Time (but the first): a Step Time, then the iteration it belongs to.
            for part in _BEFORE_STEP_TIME.split(line) if b"Step Time : " in line else (line,):
                if (m := _STEP_TIME.match(part)) is not None and (
                    tflops := _float(m.group(2))
                ) is not None:
                    self.pending[rank] = tflops
                if (m := _MB_ITERATION.search(part)) is not None:
                    self._iteration(rank, m)

    def _iteration(self, rank: bytes, m: re.Match) -> None:
        fields = _fields(m.group(3))
        elapsed = fields.get(b"elapsed time per iteration (ms)")
        if elapsed is None:
            return  # another format's iteration line
        tflops = (
            _float(fields[b"throughput per gpu (tflop/s/gpu)"])
            if (b"throughput per gpu (tflop/s/gpu)" in fields)
            else None
        )
        if (
            tflops is None
            and b"MODEL_TFLOP/s/GPU" in m.group(3)
            and (inline := _TFLOPS_FIELD.search(m.group(3)))
        ):
            tflops = _float(inline.group(1))
        pending = self.pending.pop(rank, None)
        self.add(
            int(m.group(1)),
            int(m.group(2)),
            Sample(
                iteration=int(m.group(1)),
                step_time_ms=_float(elapsed),
                tflops_per_gpu=tflops if tflops is not None else pending,
                loss=_float(fields.get(b"lm loss", b"")),
                grad_norm=_float(fields.get(b"grad norm", b"")),
                global_batch_size=_int(fields.get(b"global batch size", b"")),
            ),
        )


class StepTimeLinesReader:
    """Megatron-Bridge's ``Step Time : 1.23s GPU utilization: 456.7MODEL_TFLOP/s/GPU``
    lines in a log that holds no ``elapsed time per iteration`` line at all.
    Megatron-Bridge prints the Step Time line on rank 0 and the iteration line
    on the last rank (the one that holds the last pipeline stage), so the log
    of a node or pod that holds rank 0 but not the last rank has only these:
    real step times whose iterations it cannot know. ``analyze`` says so
    (status ``no_data``) rather than reading nothing. None where the log has an
    iteration line, or no Step Time line."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.tflops: list[float] = []
        self.iterations = False

    def feed(self, chunk: bytes) -> None:
        if self.iterations:
            return
        if b"elapsed time per iteration" in chunk:
            self.iterations = True
            return
        if b"Step Time : " not in chunk:
            return
        for m in _STEP_TIME.finditer(chunk):
            if len(self.seconds) >= MAX_SAMPLES:
                return
            seconds, tflops = _float(m.group(1)), _float(m.group(2))
            if seconds is not None and math.isfinite(seconds):
                self.seconds.append(seconds)
                if tflops is not None and math.isfinite(tflops):
                    self.tflops.append(tflops)

    def finish(self) -> dict | None:
        if self.iterations or not self.seconds:
            return None
        return {
            "lines": len(self.seconds),
            "median_s": statistics.median(self.seconds),
            "mean_s": statistics.fmean(self.seconds),
            "median_tflops": statistics.median(self.tflops) if self.tflops else None,
        }


# The first "iteration i/N |" of the line, whose rest must hold train_step_timing: tested with "in" (a
# "[^\n]*train_step_timing" in the pattern would backtrack over the rest of the line from every "iteration").
_NEMO = _MB_ITERATION


class NeMo2Reader(_Iterations):
    """``Training epoch 0, iteration 45/99 | ... | train_step_timing in s: 6.08 |
    TFLOPS_per_GPU: 1.249e+03 | ...`` (0-based: a 50-step run ends at 49/49)."""

    def __init__(self) -> None:
        super().__init__("nemo2")

    def feed(self, chunk: bytes) -> None:
        if b"train_step_timing in s" not in chunk:
            return
        for _, line in lines_containing(chunk, b"train_step_timing in s"):
            m = _NEMO.search(_plain(line))
            if m is None or b"train_step_timing" not in m.group(3):
                continue
            fields = _fields(m.group(3))
            seconds = _float(fields.get(b"train_step_timing in s", b""))
            iteration = int(m.group(1))
            self.add(
                iteration,
                int(m.group(2)),
                Sample(
                    iteration=iteration,
                    step_time_ms=None if seconds is None else seconds * 1000.0,
                    tflops_per_gpu=_float(fields.get(b"tflops_per_gpu", b"")),
                    loss=_float(fields.get(b"reduced_train_loss", b"")),
                    grad_norm=_float(fields.get(b"grad_norm", b"")),
                    global_batch_size=_int(fields.get(b"global_batch_size", b"")),
                ),
            )


# torchtitan's logger stamp: "[titan] 2025-04-03 16:32:20,143 " since pytorch/torchtitan#861
# (2025-02-19); before it, no "[titan]": "2025-03-04 00:44:44,441 - root - INFO - ..." (then the
# stamp must be followed by the root logger's name; a fixed-length look-ahead)
_TITAN = re.compile(
    rb"(?:\[titan\] |(?=\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - root - ))"
    rb"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) "
)
_TITAN_STEP = re.compile(rb" - INFO - step:\s{0,64}(\d{1,12})\s+(.*)")
# a key starts where its word does: "(\w+):" tried from inside a long word would rescan the word's rest
_TITAN_FIELD = re.compile(rb"(?<!\w)(\w{1,64}):\s{1,64}(\S+)")
_TITAN_TOTAL = re.compile(rb"total steps (\d{1,12})\b")
_TITAN_GBS = re.compile(rb"global batch size (\d{1,12})\b")
_TITAN_START = re.compile(rb"Training starts at step (\d{1,12})\b")


def _number(text: bytes | None) -> float | None:
    """torchtitan's numbers: ``5,856``, ``34.29%``, ``49.66GiB(52.28%)``."""
    if text is None:
        return None
    return _float(text.split(b"GiB", 1)[0].rstrip(b"%").replace(b",", b""))


class TorchTitanReader(_Iterations):
    """torchtitan's metrics lines (colour codes removed first): ``[titan]
    2025-04-03 16:32:20,143 - root - INFO - step:  1  loss: 12.2489
    grad_norm: 1.46  memory: 42.15GiB(44.37%)  tps: 1,176  tflops: 68.11  mfu:
    6.89%`` (older versions: ``wps:``, no ``tflops`` or ``grad_norm``), printed
    at step 1 and every ``metrics.log_freq`` steps (1-based, like Megatron's).
    Kept: loss, grad norm, TFLOP/s per GPU (torchtitan's own FLOPs count),
    tokens/s per GPU, MFU (against torchtitan's peak table), peak reserved
    memory. torchtitan prints no step time: it is derived, per rank prefix, as
    the time between the logger's millisecond timestamps of consecutive
    metrics lines divided by the steps between them (what torchtitan's own
    ``time_metrics/end_to_end(s)`` measures), from ``Training starts at step
    N`` for the first. The final step (the iteration denominator) is ``total
    steps N`` of ``Trainer is initialized with ... global batch size G, ...,
    total steps N``, which also gives the global batch size; without that
    line the last step seen is final only where the log says ``Training
    completed`` (else it is unknown: an excerpt, or a log whose head was lost,
    that reached the window says nothing of how the run ended). A line that
    repeats the previous line's step for the same prefix (every rank
    printing) is skipped."""

    def __init__(self) -> None:
        super().__init__("torchtitan")
        self.total: int | None = None
        self.gbs: int | None = None
        self.completed = False
        # rank prefix -> (step, seconds) of its last line
        self.previous: dict[bytes, tuple[int, float]] = {}

    def feed(self, chunk: bytes) -> None:
        # its logger's "[titan] 2025-04-03 16:32:20,143 - " (before #861: "... - root - INFO - "):
        # long literals are cheap
        if b"[titan] 20" not in chunk and b" - root - INFO - " not in chunk:
            return
        for _, line in lines_containing(
            chunk,
            b"step: ",
            b"Trainer is initialized",
            b"Training starts at step",
            b"Training completed",
        ):
            line = _plain(line)
            if (stamp := _TITAN.search(line)) is None:
                continue
            rank = line[: stamp.start()].strip()
            seconds = _seconds(stamp)
            if (m := _TITAN_STEP.search(line, stamp.end())) is not None:
                self._step(rank, seconds, int(m.group(1)), dict(_TITAN_FIELD.findall(m.group(2))))
            elif (m := _TITAN_START.search(line, stamp.end())) is not None:
                self.previous[rank] = (int(m.group(1)) - 1, seconds)
            elif b" - INFO - Training completed" in line:
                self.completed = True
            # "Trainer is initialized with"
            if (total := _TITAN_TOTAL.search(line, stamp.end())) is not None:
                self.total = int(total.group(1))
                gbs = _TITAN_GBS.search(line, stamp.end())
                self.gbs = int(gbs.group(1)) if gbs else self.gbs

    def _step(
        self, rank: bytes, seconds: float | None, step: int, fields: dict[bytes, bytes]
    ) -> None:
        before = self.previous.get(rank)
        if before is not None and before[0] == step:
            return  # the same step again: another rank's print
        step_ms = None
        if (
            seconds is not None
            and before is not None
            and before[1] is not None
            and step > before[0]
        ):
            step_ms = (
                (seconds - before[1]) * 1000.0 / (step - before[0])
                if seconds >= before[1]
                else None
            )
        self.previous[rank] = (step, seconds)
        self.add(
            step,
            self.total or step,
            Sample(
                iteration=step,
                step_time_ms=step_ms,
                tflops_per_gpu=_number(fields.get(b"tflops")),
                loss=_number(fields.get(b"loss")),
                grad_norm=_number(fields.get(b"grad_norm")),
                global_batch_size=self.gbs,
                tokens_per_s_per_gpu=_number(fields.get(b"tps", fields.get(b"wps"))),
                mfu_pct=_number(fields.get(b"mfu")),
                memory_gib=_number(fields.get(b"memory")),
            ),
        )

    def finish(self) -> IterationLog | None:
        # no "total steps": the last step seen, if training completed
        if self.log.samples and self.total is None:
            self.log.last = max(self.log.samples) if self.completed else None
        return super().finish()


def _seconds(stamp: re.Match) -> float | None:
    """The logger's timestamp in seconds (naive local time: differences only)."""
    try:
        when = datetime.fromisoformat(stamp.group(1).decode("ascii"))
    except ValueError:
        return None
    return (when - _EPOCH).total_seconds() + int(stamp.group(2)) / 1000.0


_EPOCH = datetime(1970, 1, 1)


_CKPT_TIMER = re.compile(
    rb"(save|load)-checkpoint\s{0,64}\.*:\s{0,64}\(\s{0,64}([0-9.]{1,64})\s{0,64},\s{0,64}([0-9.]{1,64})\s{0,64}\)"
)
_CKPT_SAVED = re.compile(rb"successfully saved checkpoint from iteration\s{1,64}(\d{1,12})")
# NeMo's fields up to the duration may be anything, but never another "Global Checkpoint" (a lazy
# "[^\n]*?" would rescan the rest of the line from each of them): one pass over the line in all
_NOT_ANOTHER = rb"(?:(?!Global Checkpoint )[^\n])*?"
_NEMO_SAVE = re.compile(
    rb"Global Checkpoint Save\s{0,64}:\s{0,64}Rank\s{0,64}:\s{0,64}\d{1,12}\s{0,64}:\s{0,64}Iteration\s{0,64}:"
    rb"\s{0,64}(\d{1,12})\s{0,64}:"
    + _NOT_ANOTHER
    + rb"Save duration\s{0,64}:\s{0,64}([0-9.]{1,64})s"
)
_NEMO_LOAD = re.compile(
    rb"Global Checkpoint Load\s{0,64}:\s{0,64}Rank\s{0,64}:\s{0,64}\d{1,12}\s{0,64}:"
    + _NOT_ANOTHER
    + rb"Time spent in load_checkpoint\s{0,64}:\s{0,64}([0-9.]{1,64})s"
)


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


# The words of each failure kind (records.FAILURE_KINDS). Real wording: PyTorch's "torch.OutOfMemoryError:
# CUDA out of memory."; NCCL's "NCCL WARN Cuda failure 'out of memory'" (newer NCCL: "Cuda failure 2 'out of
# memory'"); Megatron-Core's NaN checks (megatron/core/rerun_state_machine.py: "Unexpected result nan ...
# (message='found NaN in local grad norm ...')"); Slurm's "*** JOB 123 ON node CANCELLED AT ... DUE TO TIME
# LIMIT ***" and "srun: error: node: task 3: Exited with exit code 1"; torchrun's "closing signal SIGTERM".
# A Slurm cancel that names no cause ("*** JOB 123 ON node CANCELLED AT 2025-03-01T10:00:00 ***", the same
# for "*** STEP 123.0 ON ..."): scancel, by a user, an administrator or a tool.
_OOM = (
    b"CUDA out of memory",
    b"CUDA error: out of memory",
    b"Cuda failure 'out of memory'",
    b"Cuda failure 2 'out of memory'",
)
_NAN = (
    b"Unexpected result nan",
    b"Unexpected result inf",
    b"Unexpected result tensor(nan",
    b"Unexpected result tensor(inf",
    b"found NaN in",
    b"found Inf in",
)
_WATCHDOG = (b"Watchdog caught collective operation timeout",)
# kind -> (literals one of which every such line holds, the literals that mark the line). Each literal is a
# pass over every chunk: kinds share them (found once per chunk), the rarest words stand for the rest.
_FAILURE_NEEDLES = {
    "cuda_oom": ((b"out of memory",), _OOM),
    "nccl_timeout": ((b"Watchdog caught",), _WATCHDOG),
    "nan_loss_or_grad": ((b"Unexpected result",), _NAN[:4]),
    "node_failure": (
        (b"CANCELLED AT", b"srun: error:"),
        (b"DUE TO NODE FAILURE", b"Node failure on"),
    ),
    "time_limit": ((b"CANCELLED AT",), (b"DUE TO TIME LIMIT",)),
    "preempted": ((b"CANCELLED AT",), (b"DUE TO PREEMPTION",)),
    "cancelled": ((b"CANCELLED AT",), (b"CANCELLED AT",)),
    "task_exit": ((b"srun: error:",), (b": Exited with exit code", b": Terminated")),
    # torch.distributed.elastic's agent: "failed (exitcode: -6) local_rank: 6 (pid: 1234) of binary: ..."
    "worker_failed": ((b"failed (exitcode: ",), (b"failed (exitcode: ",)),
}
_SLURM_CANCEL = re.compile(rb"\*\*\* (?:JOB|STEP) \S{1,64} ON \S{1,256} CANCELLED AT \S{1,64}")
_SLURM_CAUSES = (b"DUE TO TIME LIMIT", b"DUE TO PREEMPTION", b"DUE TO NODE FAILURE")
_WORKER_FAILED = re.compile(rb"failed \(exitcode: (-?\d{1,9})\) local_rank: \d{1,9}")
# A kind's line must also pass this test (the others: their words are enough).
_ACCEPT = {
    "cancelled": lambda line: (
        _SLURM_CANCEL.search(line) is not None and not any(c in line for c in _SLURM_CAUSES)
    ),
    "worker_failed": lambda line: _WORKER_FAILED.search(line) is not None,
}
# torch/distributed/elastic/multiprocessing/errors: ChildFailedError's report ends with the failure it
# observed first, "Root Cause (first observed failure):" then "[0]:" and "  key : value" lines (time, host,
# rank, exitcode, error_file, traceback: "Signal 6 (SIGABRT) received by PID 1234" for a signalled worker).
_ROOT_CAUSE = b"Root Cause (first observed failure):"
_ROOT_FIELD = re.compile(rb"(time|host|rank|exitcode|error_file|traceback)\s{0,32}:\s?(.{0,400})")
_ROOT_LINES = 12  # lines of a root-cause block read at most
# Read in the log's last TAIL bytes only, where they are: the last words of a launcher, and llmb's own
# note on an attempt that Slurm ended (a retry's log names its predecessor's end differently).
TAIL = 1 << 20
_TAIL_NEEDLES = {
    "node_failure": (b"ended: NODE_FAIL",),
    "preempted": (b"ended: PREEMPTED",),
    "signal": (b"SIGTERM", b"Killing subprocess"),
}
# An exception's kind, by its words (first match); any other exception is a python_exception.
_EXCEPTION_KINDS = (
    ("cuda_oom", (*_OOM, b"OutOfMemoryError")),
    ("nan_loss_or_grad", _NAN),
    ("nccl_timeout", _WATCHDOG),
    ("child_failed", (b"ChildFailedError",)),  # torchrun's summary of a worker that failed
    (
        "signal",
        (b"SignalException", b"got signal: "),
    ),  # torchrun, signalled (Slurm's kill, a time limit)
)
_TRACEBACK = b"Traceback (most recent call last):"
_EXCEPTION = re.compile(rb"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure|Warning)\b")
# tqdm's bar, "Training:  12%|█▏   | 6/50 [00:30<03:40, 1.23it/s]", and what ranks put before a line.
_BAR = re.compile(rb"\d{1,3}%\|[^|\n]{0,2048}\|[^|\[\n]{0,256}\[[^\]\n]{0,256}\]")
_BAR_SPAN = 8192  # a bar is looked for in this much text before the error, however long the line
_RANK_PREFIX = re.compile(
    rb"(?:\s*(?:\[rank\d+\]:|\[default\d+\]:|\d+:(?=\s)|[\w.-]+/\d+(?=\s)))+\s*"
)
# rank prefixes are looked for at most this far into a line (the regex's work is bounded)
_PREFIX_SPAN = 1024
# lines after an exception's that may carry its message on (torch's NCCL errors do)
_CONTINUATION = 4


def _clean(line: bytes, at: int | None = None) -> bytes:
    """The error text alone: the ``\\r``-separated segment of ``line`` that holds
    ``at`` (None: the last one with text; a progress bar redraws its line after a
    ``\\r``), less a progress bar, colour codes and rank prefixes (``[rank3]:``, ``0:``,
    ``job/3``) before it."""
    if at is None:
        segments = [s for s in line.split(b"\r") if s.strip()]
        text = segments[-1] if segments else b""
        low, high = 0, min(len(text), _BAR_SPAN)  # the bar leads the segment
    else:
        start = line.rfind(b"\r", 0, at) + 1
        end = line.find(b"\r", at)
        text = line[start : end if end >= 0 else len(line)]
        low, high = max(0, at - start - _BAR_SPAN), at - start
    bars = list(_BAR.finditer(text, low, high))
    if bars:
        text = text[bars[-1].end() :]
    text = _plain(text)
    rank = _RANK_PREFIX.match(text, 0, _PREFIX_SPAN)
    return text[rank.end() :] if rank else text


def _shown(text: bytes) -> str:
    """``text`` decoded and stripped, at most ``MAX_MESSAGE`` characters: only
    what can be shown is decoded (a line may be a megabyte)."""
    return text.lstrip()[: 4 * MAX_MESSAGE].decode("utf-8", "replace").strip()[:MAX_MESSAGE]


def _message(text: bytes, detail: bytes = b"") -> str:
    message = _shown(text)
    if detail:
        more = f" ({_shown(detail)})"
        return message[: max(0, MAX_MESSAGE - len(more))] + more
    return message


def _signal_name(exitcode: bytes) -> bytes:
    """The signal a worker's negative exit code stands for (torch's ``-6``: ``SIGABRT``), else b""."""
    try:
        return signal.Signals(-int(exitcode)).name.encode() if int(exitcode) < 0 else b""
    except ValueError:
        return b""


def _root_cause_message(fields: dict[bytes, bytes]) -> str:
    """One line of a root-cause block's fields: who failed and how, in torch's words."""
    rank, host = fields.get(b"rank"), fields.get(b"host")
    code, trace = fields.get(b"exitcode", b""), fields.get(b"traceback", b"")
    text = _ROOT_CAUSE + b" rank " + (rank or b"?")
    text += b" on " + host if host else b""
    text += b", exitcode " + code if code else b""
    if trace.startswith(b"Signal "):  # "Signal 6 (SIGABRT) received by PID 1234"
        return _message(text + b": " + trace)
    number = re.match(rb"-?\d{1,9}", code)
    return _message(text, _signal_name(number.group(0)) if number else b"")


def _kind_of(text: bytes) -> str:
    return next(
        (kind for kind, words in _EXCEPTION_KINDS if any(w in text for w in words)),
        "python_exception",
    )


def _traceback_prefix(head: bytes) -> bytes:
    """What each line of a traceback starts with: the text before ``Traceback``
    on its first line, or only its rank prefix where a progress bar shares that line."""
    segment = head[head.rfind(b"\r") + 1 :]
    if _BAR.search(segment, max(0, len(segment) - _BAR_SPAN)) is None:
        return segment
    rank = _RANK_PREFIX.match(segment, 0, _PREFIX_SPAN)
    return rank.group(0) if rank else b""


def _line_at(chunk: bytes, position: int) -> tuple[int, bytes]:
    """(start, text) of the line that holds ``position``."""
    start = chunk.rfind(b"\n", 0, position) + 1
    end = chunk.find(b"\n", position)
    return start, chunk[start : end if end >= 0 else len(chunk)]


def _lines_from(chunk: bytes, position: int, count: int) -> list[bytes]:
    """The (at most) ``count`` lines from ``position`` on."""
    lines = []
    while len(lines) < count and position < len(chunk):
        end = chunk.find(b"\n", position)
        end = len(chunk) if end < 0 else end
        lines.append(chunk[position:end])
        position = end + 1
    return lines


def _first_line(
    chunk: bytes,
    marks: tuple[bytes, ...],
    words: tuple[bytes, ...],
    accept: Callable[[bytes], bool] | None = None,
) -> tuple[int, int] | None:
    """(line start, mark position) of the first line of ``chunk`` that holds one of
    ``marks`` and one of ``words`` (and passes ``accept``), or None."""
    first = None
    for mark in marks:
        position = chunk.find(mark)
        while position >= 0 and (first is None or position < first[1]):
            start, line = _line_at(chunk, position)
            if any(word in line for word in words) and (accept is None or accept(line)):
                first = (start, position)
                break
            position = chunk.find(mark, start + len(line))
    return first


class FailureReader:
    """The lines that say why a run stopped, each kind's first in log order with
    its offset (``Failure``): CUDA out of memory (PyTorch's and NCCL's words),
    a NaN or Inf found by Megatron-Core's checks, an NCCL watchdog timeout, a
    node failure, a Slurm time limit, preemption or cancel (Slurm's words), the
    exception that ends a Python traceback (the first that is not a symptom:
    later ranks usually fail because the first did; an exception's kind follows
    its words, so ``torch.OutOfMemoryError`` is ``cuda_oom``), torchrun's
    account of the worker that failed first (``worker_failed``: its agent's
    ``failed (exitcode: -6) local_rank: 6`` line, in the words of the first
    ``Root Cause (first observed failure)`` block where there is one: rank,
    host, exit code, signal), and the symptoms that follow a failure (srun's
    task exits, torchrun's ``ChildFailedError`` and its signals: SIGTERM ones
    are looked for in the log's last ``TAIL`` bytes). ``analyze`` picks the
    reason among them."""

    def __init__(self) -> None:
        self.found: dict[str, tuple[int, str]] = {}  # kind -> (offset, message) of its first
        self.offset = 0  # of the chunk being read, in the text this parser reads
        self.cause = False  # a traceback ended in a cause: later tracebacks follow from it
        # (prefix, offset) of a traceback that crossed a chunk end
        self.open: tuple[bytes, int] | None = None
        # the last chunks, holding the last TAIL bytes (joined once, at the end)
        self.tail: list[bytes] = []
        # torchrun's first root-cause block: (offset, fields) while its lines are read, then (offset, message)
        self.reading: tuple[int, dict[bytes, bytes], int] | None = None
        self.root_cause: tuple[int, str] | None = None

    def _record(self, kind: str, offset: int, message: str) -> None:
        if kind not in self.found or offset < self.found[kind][0]:
            self.found[kind] = (offset, message)

    def feed(self, chunk: bytes) -> None:
        self._needles(chunk)
        if self.reading is not None or (self.root_cause is None and _ROOT_CAUSE in chunk):
            self._root_causes(chunk)
        position = 0
        if self.open is not None:
            prefix, at = self.open
            position = self._follow(chunk, 0, prefix, at)
        while (
            not self.cause and self.open is None and (at := chunk.find(_TRACEBACK, position)) >= 0
        ):
            line_start = chunk.rfind(b"\n", 0, at) + 1
            line_end = chunk.find(b"\n", at)
            prefix = _traceback_prefix(chunk[line_start:at])
            position = self._follow(
                chunk,
                len(chunk) if line_end < 0 else line_end + 1,
                prefix,
                self.offset + line_start,
            )
        self.tail.append(chunk)
        while len(self.tail) > 1 and sum(map(len, self.tail[1:])) >= TAIL:
            del self.tail[0]
        self.offset += len(chunk)

    def _needles(self, chunk: bytes) -> None:
        present: dict[bytes, bool] = {}

        def has(literal: bytes) -> bool:
            if literal not in present:
                present[literal] = literal in chunk
            return present[literal]

        for kind, (cheap, marks) in _FAILURE_NEEDLES.items():
            if kind in self.found or not any(has(literal) for literal in cheap):
                continue
            if found := _first_line(chunk, marks, cheap, _ACCEPT.get(kind)):
                start, at = found
                line = _line_at(chunk, at)[1]
                # worker_failed: from torch's words on (the logger's prefix says nothing)
                if kind == "worker_failed":
                    text = line[at - start :]
                    code = _WORKER_FAILED.search(text)
                    message = _message(text, _signal_name(code.group(1) if code else b""))
                else:
                    message = _message(_clean(line, at - start))
                self._record(kind, self.offset + start, message)

    def _root_causes(self, chunk: bytes) -> None:
        """The first root-cause block of torchrun's report, its fields read on however many chunks."""
        position = self._root_fields(chunk, 0) if self.reading is not None else 0
        if self.root_cause is None and self.reading is None:
            if (at := chunk.find(_ROOT_CAUSE, position)) >= 0:
                start = chunk.rfind(b"\n", 0, at) + 1
                end = chunk.find(b"\n", at)
                self.reading = (self.offset + start, {}, 0)
                if end >= 0:
                    self._root_fields(chunk, end + 1)

    def _root_fields(self, chunk: bytes, position: int) -> int:
        """Read a root-cause block's ``key : value`` lines from ``position``; the position after them."""
        offset, fields, seen = self.reading
        while position < len(chunk):
            end = chunk.find(b"\n", position)
            end = len(chunk) if end < 0 else end
            text = _clean(chunk[position:end]).strip()
            position, seen = end + 1, seen + 1
            if (m := _ROOT_FIELD.match(text)) is not None:
                fields[m.group(1)] = m.group(2).strip()
            elif not (text.startswith(b"[") and text.endswith(b"]:")):  # "[0]:" opens the entry
                seen = _ROOT_LINES  # "=====": the block's end
            if b"traceback" in fields or seen >= _ROOT_LINES:
                self.reading, self.root_cause = None, (offset, _root_cause_message(fields))
                return position
        self.reading = (offset, fields, seen)
        return position

    def _follow(self, chunk: bytes, position: int, prefix: bytes, at: int) -> int:
        """Walk the traceback's lines (those with its prefix) to the exception;
        the position after where it stopped."""
        self.open = None
        while position < len(chunk):
            end = chunk.find(b"\n", position)
            end = len(chunk) if end < 0 else end
            line = chunk[position:end]
            position = end + 1
            if prefix and not line.startswith(prefix):
                continue  # another rank's line, interleaved
            body = line[len(prefix) :]
            if not body.strip() or body[:1] in (b" ", b"\t") or body.startswith(_TRACEBACK):
                continue
            if body.startswith((b"During handling", b"The above exception")):
                continue
            if _EXCEPTION.match(text := _clean(body)):
                self._exception(text, chunk, position, prefix, at)
            return position  # the exception, or not a traceback after all
        self.open = (prefix, at)
        return position

    def _exception(self, text: bytes, chunk: bytes, position: int, prefix: bytes, at: int) -> None:
        """Record the exception by its kind; a python_exception whose next lines
        name a kind (torch's NCCL errors end in "Last error: Cuda failure 'out of
        memory'") is of that kind, and quotes that line."""
        kind, detail = _kind_of(text), b""
        if kind == "python_exception":
            for line in _lines_from(chunk, position, _CONTINUATION):
                if not line.strip() or (prefix and not line.startswith(prefix)):
                    break
                if (found := _kind_of(line)) != "python_exception":
                    kind, detail = found, _clean(line[len(prefix) :])
                    break
        self._record(kind, at, _message(text, detail))
        self.cause = kind not in SYMPTOMS

    def finish(self) -> list[Failure]:
        tail = b"".join(self.tail)[-TAIL:]
        start = self.offset - len(tail)
        for kind, marks in _TAIL_NEEDLES.items():
            if found := _first_line(tail, marks, marks):
                line_start, at = found
                self._record(
                    kind,
                    start + line_start,
                    _message(_clean(_line_at(tail, at)[1], at - line_start)),
                )
        if self.reading is not None:  # a block cut off by the end of the log
            self.root_cause = (self.reading[0], _root_cause_message(self.reading[1]))
        if self.root_cause is not None:
            # torchrun's own account of the worker that failed first names more than its agent's
            # "failed (exitcode: ...)" line (the rank, the host, the signal): its words, the earlier place
            offset, message = self.root_cause
            if (line := self.found.get("worker_failed")) is not None:
                offset = min(offset, line[0])
            self.found["worker_failed"] = (offset, message)
        return [
            Failure(kind=kind, message=message, offset=offset)
            for kind, (offset, message) in sorted(self.found.items(), key=lambda item: item[1][0])
        ]


# Megatron-LM's and Megatron-Bridge's pretrain() print it on rank 0 once the training loop returned after its
# last iteration (an early exit, by signal, duration or interval, leaves by sys.exit before it).
_TRAINING_DONE = b"[after training is done] datetime: "


class TrainingDoneReader:
    """Where Megatron's ``[after training is done] datetime: 2025-12-03 14:45:03``
    is, in the text the failures parser reads (so ``analyze`` can tell a failure
    that came after training finished, a hang at exit until Slurm's time limit,
    from one that ended training), and its words: ``{"offset": ..., "line": ...}``
    or None. It must be registered just before that parser: both then read the
    same chunks, the NCCL trace lines taken out."""

    def __init__(self) -> None:
        self.offset = 0
        self.found: dict | None = None

    def feed(self, chunk: bytes) -> None:
        if self.found is None and _TRAINING_DONE in chunk:
            at = chunk.find(_TRAINING_DONE)
            start, line = _line_at(chunk, at)
            self.found = {"offset": self.offset + start, "line": _message(_clean(line, at - start))}
        self.offset += len(chunk)

    def finish(self) -> dict | None:
        return self.found


BUILTIN_PARSERS = (  # NCCL first: it takes the collective lines out of what the others read
    LogParser("nccl", "NCCL collective trace (NCCL_DEBUG_SUBSYS=COLL)", NcclReader),
    LogParser(
        "nccl_transport",
        "NCCL transports: channels, network, net plugin (NCCL_DEBUG=INFO)",
        NcclTransportReader,
    ),
    LogParser(
        "megatron_bridge", "Megatron-Bridge iteration and Step Time lines", MegatronBridgeReader
    ),
    LogParser(
        "step_time_lines",
        "Megatron-Bridge Step Time lines in a log without iteration lines (a rank-0-only log)",
        StepTimeLinesReader,
    ),
    LogParser("nemo2", "NeMo 2 (Lightning) iteration lines", NeMo2Reader),
    LogParser(
        "torchtitan",
        "torchtitan metrics lines (step, loss, tps, tflops, mfu, memory)",
        TorchTitanReader,
    ),
    LogParser(
        "checkpoint", "checkpoint save and load timings (Megatron and NeMo)", CheckpointReader
    ),
    LogParser(
        "training_done", "Megatron's [after training is done] line, where it is", TrainingDoneReader
    ),
    LogParser(
        "failures",
        "why a run stopped: CUDA OOM, NaN check, NCCL watchdog timeout, node failure, Slurm time "
        "limit, preemption or cancel, Python exception, torchrun's root cause, and the symptoms that "
        "follow them",
        FailureReader,
    ),
)
