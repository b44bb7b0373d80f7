"""Megatron's iteration lines (Megatron-LM, Megatron-Bridge, and the forks that keep their format) and
Megatron-Bridge's ``Step Time`` lines.

``Step Time : 1.00s GPU utilization: 939.5MODEL_TFLOP/s/GPU`` (before November 2025:
``...939.5TFLOP/s/GPU``), printed on rank 0, then `` [2025-12-22 15:18:33] iteration 35/ 50 | ...
elapsed time per iteration (ms): 1004.9 | ... | global batch size: 128 | ...`` printed on the last
rank. Megatron-LM under AMD's Primus prints pairs, ``elapsed time per iteration (ms): 434.5/515.4``
and ``throughput per GPU (TFLOP/s/GPU): 440.1/430.2`` (or ``compute per GPU (TFLOP/s/GPU): 400.0 (avg
280.0)``): the iteration's own figure, then the running average; the first is read
(``llmb.results.lines.number``).
"""

from __future__ import annotations

import math
import re
import statistics

from llmb.results.formats.iterations import Iterations
from llmb.results.lines import (
    MAX_SAMPLES,
    fields,
    find_lines,
    number,
    raw_lines_containing,
    split,
    whole,
)
from llmb.results.records import Sample

# Megatron-Bridge's train_utils.py, printed by rank 0: "...MODEL_TFLOP/s/GPU" since its commit 23fc545
# (2025-11), "...TFLOP/s/GPU" from d42316e (2025-09) until then.
STEP_TIME = re.compile(
    rb"Step Time : ([0-9.eE+-]{1,32})s GPU utilization: ?([0-9.eE+-]{1,32}) ?(?:MODEL_)?TFLOP/s/GPU"
)
# Every pattern's work is linear in the length of the line it is given, whatever the line holds (issue 32):
# numbers and runs of spaces are bounded, a group that may start anywhere starts only where its run does (a
# look-behind), and a free-form tail is found with bytes.find or rstrip rather than by a lazy group that
# would rescan the rest of the line from every start. tests/test_parse_adversarial_lines.py attacks each.
ITERATION = re.compile(rb"iteration\s{1,64}(\d{1,12})\s{0,64}/\s{0,64}(\d{1,12})\s{0,64}\|([^\n]*)")
_BEFORE_STEP_TIME = re.compile(rb"(?=Step Time : )")
_TFLOPS_FIELD = re.compile(rb"(?<![0-9.eE+-])([0-9.eE+-]{1,64})\s{0,64}MODEL_TFLOP/s/GPU")
# the iteration line's own TFLOP/s/GPU: Megatron-LM's field, and Primus's name for it
_THROUGHPUT = (b"throughput per gpu (tflop/s/gpu)", b"compute per gpu (tflop/s/gpu)")
_ELAPSED = b"elapsed time per iteration (ms)"
_LOSS, _GRAD_NORM, _GBS = b"lm loss", b"grad norm", b"global batch size"


# Unprefixed Step Time lines kept unread at most (a log of Step Time lines alone): then they are read.
MAX_DEFERRED = 4096


class MegatronReader(Iterations):
    """The iteration lines, each with the TFLOP/s/GPU of its own ``Step Time`` line: the Step Time
    line precedes the iteration line it belongs to, and pairs with it per writer (``Line.key``), never
    by position in a list. Both may share a line (two ranks' output joined): each Step Time pairs with
    the iteration that follows it. A ``throughput per GPU (TFLOP/s/GPU)`` field in the iteration line
    wins.

    A log whose iteration lines have their own TFLOP/s/GPU (Megatron-LM's, llmb's torch engine's) never
    needs its Step Time lines. One that starts the line (no launcher's prefix, so its writer's key is
    ``b""``; no colour code) is kept as written (``unread``) until the next unprefixed iteration line,
    and read only if that line lacks the figure: the pairing is the one reading every line gives."""

    def __init__(self) -> None:
        super().__init__("megatron_bridge")
        self.pending: dict[bytes, float] = {}
        # unprefixed Step Time lines since the last unprefixed iteration
        self.unread: list[bytes] = []

    def feed(self, chunk: bytes) -> None:
        # Long literals: CPython's search skips faster the longer the needle. A Step Time line may be in
        # an earlier chunk than its iteration line (whatever other output comes between): it waits in pending.
        if b"elapsed time per iteration" not in chunk and b"TFLOP/s/GPU" not in chunk:
            return
        for start, raw in raw_lines_containing(
            chunk, b"elapsed time per iteration", b"TFLOP/s/GPU"
        ):
            if raw.startswith(b"Step Time : ") and b"iteration" not in raw and b"\x1b" not in raw:
                self.unread.append(raw)  # split() would take nothing off it: its key is b""
                if len(self.unread) >= MAX_DEFERRED:
                    self._read_unread()
                continue
            line = split(raw, start)
            body = line.body
            if b"Step Time : " not in body:  # most lines: an iteration line, or another TFLOP/s/GPU
                if (m := ITERATION.search(body)) is not None:
                    self._iteration(line.key, m)
                continue
            if not line.key:
                self._read_unread()  # they come before this line's parts
            self._parts(line.key, body)

    def _parts(self, key: bytes, body: bytes) -> None:
        """A line that holds a Step Time: each part starts at a Step Time (but the first), a Step Time
        then the iteration it belongs to."""
        for part in _BEFORE_STEP_TIME.split(body):
            if (m := STEP_TIME.match(part)) is not None and (
                tflops := number(m.group(2))
            ) is not None:
                self.pending[key] = tflops
            if (m := ITERATION.search(part)) is not None:
                self._iteration(key, m)

    def _read_unread(self) -> None:
        """The unread Step Time lines, in order: ``pending[b""]`` as reading each in its turn sets it."""
        unread, self.unread = self.unread, []
        for raw in unread:
            self._parts(b"", raw)

    def _iteration(self, key: bytes, m: re.Match) -> None:
        tail = m.group(3)
        values = fields(tail)
        elapsed = values.get(_ELAPSED)
        if elapsed is None:
            return  # another format's iteration line
        # the first of _THROUGHPUT the line has (its number, or None where it is none)
        throughput = values.get(_THROUGHPUT[0])
        if throughput is None:
            throughput = values.get(_THROUGHPUT[1])
        tflops = number(throughput) if throughput is not None else None
        if (
            tflops is None
            and b"MODEL_TFLOP/s/GPU" in tail
            and (inline := _TFLOPS_FIELD.search(tail))
        ):
            tflops = number(inline.group(1))
        if not key and self.unread:
            if tflops is None:
                self._read_unread()  # this one wants its Step Time
            else:
                self.unread.clear()  # read or not, they were this iteration's to take
        pending = self.pending.pop(key, None)
        iteration = int(m.group(1))
        self.add(
            iteration,
            int(m.group(2)),
            Sample(
                iteration,
                number(elapsed),
                tflops if tflops is not None else pending,
                number(values.get(_LOSS, b"")),
                number(values.get(_GRAD_NORM, b"")),
                whole(values.get(_GBS, b"")),
            ),
        )


class StepTimeLinesReader:
    """Megatron-Bridge's ``Step Time : 1.23s GPU utilization: 456.7MODEL_TFLOP/s/GPU`` lines in a log
    that holds no ``elapsed time per iteration`` line at all. Megatron-Bridge prints the Step Time line
    on rank 0 and the iteration line on the last rank (the one that holds the last pipeline stage), so
    the log of a node or pod that holds rank 0 but not the last rank has only these: real step times
    whose iterations it cannot know. ``analyze`` says so (status ``incomplete``, with the times) rather
    than reading nothing. None where the log has an iteration line, or no Step Time line."""

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
        # no needle ends in a blank: a search for one in a run of blanks would try every position
        if b"Step Time :" not in chunk:
            return
        for line in find_lines(chunk, b"Step Time :"):
            for m in STEP_TIME.finditer(line.body):
                if len(self.seconds) >= MAX_SAMPLES:
                    return
                seconds, tflops = number(m.group(1)), number(m.group(2))
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
