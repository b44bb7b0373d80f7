"""torchtitan's metrics lines: ``[titan] 2025-04-03 16:32:20,143 - root - INFO - step:  1  loss:
12.2489  grad_norm: 1.46  memory: 42.15GiB(44.37%)  tps: 1,176  tflops: 68.11  mfu: 6.89%`` (older
versions: no ``[titan]``, ``wps:``, no ``tflops`` or ``grad_norm``), printed at step 1 and every
``metrics.log_freq`` steps (1-based, like Megatron's); also behind another logger's header (AMD's
Primus, loguru), which the prefix stage takes off and whose time it gives."""

from __future__ import annotations

import re
from datetime import datetime

from llmb.results.formats.iterations import Iterations
from llmb.results.lines import Line, find_lines, number
from llmb.results.records import IterationLog, Sample

# torchtitan's logger stamp: "[titan] 2025-04-03 16:32:20,143 " since pytorch/torchtitan#861
# (2025-02-19); before it, no "[titan]": "2025-03-04 00:44:44,441 - root - INFO - ..." (then the
# stamp must be followed by the root logger's name; a fixed-length look-ahead)
_TITAN = re.compile(
    rb"(?:\[titan\] |(?=\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - root - ))"
    rb"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) "
)
_TITAN_STEP = re.compile(rb" - INFO - step:\s{0,64}(\d{1,12})\s+(.*)")
# Behind another logger's header (its time taken off by the prefix stage): the message itself starts
# with "step:", after at most two bracketed tags ("[trainer.py:123] ")
_HEADED_STEP = re.compile(rb"(?:\[[^\]\n]{1,256}\] ?){0,2}step:\s{0,64}(\d{1,12})\s+(.*)")
# a key starts where its word does: "(\w+):" tried from inside a long word would rescan the word's rest
_TITAN_FIELD = re.compile(rb"(?<!\w)(\w{1,64}):\s{1,64}(\S+)")
_TITAN_TOTAL = re.compile(rb"total steps (\d{1,12})\b")
_TITAN_GBS = re.compile(rb"global batch size (\d{1,12})\b")
_EPOCH = datetime(1970, 1, 1)


def _figure(text: bytes | None) -> float | None:
    """torchtitan's numbers: ``5,856``, ``34.29%``, ``49.66GiB(52.28%)``."""
    if text is None:
        return None
    return number(text.split(b"GiB", 1)[0].rstrip(b"%").replace(b",", b""))


def _seconds(stamp: re.Match) -> float | None:
    """The logger's timestamp in seconds (naive local time: differences only)."""
    try:
        when = datetime.fromisoformat(stamp.group(1).decode("ascii"))
    except ValueError:
        return None
    return (when - _EPOCH).total_seconds() + int(stamp.group(2)) / 1000.0


class TorchTitanReader(Iterations):
    """Kept: loss, grad norm, TFLOP/s per GPU (torchtitan's own FLOPs count), tokens/s per GPU, MFU
    (against torchtitan's peak table), peak reserved memory. torchtitan prints no step time: it is
    derived, per writer (``Line.key``), as the time between the stamps of consecutive metrics lines
    divided by the steps between them (what torchtitan's own ``time_metrics/end_to_end(s)`` measures).
    The first metrics line after ``Training starts at step N`` has none: the time from that line to
    the first step is warm-up (the model's compilation, the first batch), not a step. The final step
    (the iteration denominator) is ``total steps N`` of ``Trainer is initialized with ... global batch
    size G, ..., total steps N``, which also gives the global batch size; without that line the last
    step seen is final only where the log says ``Training completed`` (else it is unknown: an excerpt,
    or a log whose head was lost, that reached the window says nothing of how the run ended). A line
    that repeats the previous line's step for the same writer (every rank printing) is skipped. A
    metrics line behind another logger's header counts only where it holds ``loss:`` and torchtitan's
    ``tps:`` or ``wps:``."""

    def __init__(self) -> None:
        super().__init__("torchtitan")
        self.total: int | None = None
        self.gbs: int | None = None
        self.completed = False
        # writer -> (step, seconds) of its last metrics line
        self.previous: dict[bytes, tuple[int, float | None]] = {}

    def feed(self, chunk: bytes) -> None:
        if b"step:" not in chunk and b"Trainer is initialized" not in chunk:
            return
        for line in find_lines(
            chunk,
            b"step:",
            b"Trainer is initialized",
            b"Training starts at step",
            b"Training completed",
        ):
            body = line.body
            if (stamp := _TITAN.search(body)) is not None:
                seconds, rest = _seconds(stamp), body[stamp.end() :]
                step = _TITAN_STEP.search(rest)
            elif (line.stamp is not None or line.key) and b"Trainer is initialized" not in body:
                # behind another logger's header: timed where the header has a time
                seconds, rest = line.stamp, body
                step = _HEADED_STEP.match(rest)
                if step is not None and not _metrics(step.group(2)):
                    continue
            else:
                if (total := _TITAN_TOTAL.search(body)) is not None:  # any header, or none
                    self._initialized(body, total)
                continue
            if step is not None:
                self._step(
                    line, seconds, int(step.group(1)), dict(_TITAN_FIELD.findall(step.group(2)))
                )
            elif b"Training starts at step" in rest:
                self.previous.pop(line.key, None)  # what comes next is warm-up
            elif b"Training completed" in rest:
                self.completed = True
            elif (total := _TITAN_TOTAL.search(rest)) is not None:  # "Trainer is initialized with"
                self._initialized(rest, total)

    def _initialized(self, text: bytes, total: re.Match) -> None:
        self.total = int(total.group(1))
        gbs = _TITAN_GBS.search(text)
        self.gbs = int(gbs.group(1)) if gbs else self.gbs

    def _step(
        self, line: Line, seconds: float | None, step: int, values: dict[bytes, bytes]
    ) -> None:
        before = self.previous.get(line.key)
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
        self.previous[line.key] = (step, seconds)
        self.add(
            step,
            self.total or step,
            Sample(
                iteration=step,
                step_time_ms=step_ms,
                tflops_per_gpu=_figure(values.get(b"tflops")),
                loss=_figure(values.get(b"loss")),
                grad_norm=_figure(values.get(b"grad_norm")),
                global_batch_size=self.gbs,
                tokens_per_s_per_gpu=_figure(values.get(b"tps", values.get(b"wps"))),
                mfu_pct=_figure(values.get(b"mfu")),
                memory_gib=_figure(values.get(b"memory")),
            ),
        )

    def finish(self) -> IterationLog | None:
        # no "total steps": the last step seen, if training completed
        if self.log.samples and self.total is None:
            self.log.last = max(self.log.samples) if self.completed else None
        return super().finish()


def _metrics(rest: bytes) -> bool:
    """Whether a ``step: N ...`` message behind a foreign header is torchtitan's metrics line."""
    return b"loss:" in rest and (b"tps:" in rest or b"wps:" in rest)
