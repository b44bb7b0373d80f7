"""Checkpoint save and load timings in both NVIDIA formats: Megatron's ``(min, max) time across ranks
(ms): save-checkpoint ...: (a, b)`` (and ``load-checkpoint``) with ``successfully saved checkpoint from
iteration N``, and NeMo's ``Global Checkpoint Save : ... Save duration: 4.389s`` and ``Global Checkpoint
Load : ... Time spent in load_checkpoint: 9.712s``."""

from __future__ import annotations

import re

from llmb.results.lines import find_lines, number
from llmb.results.records import CheckpointTimings

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
        chunk = b"\n".join(line.body for line in find_lines(chunk, b"eckpoint"))
        for kind, _low, high in _CKPT_TIMER.findall(chunk):
            seconds = number(high)
            seconds = None if seconds is None else seconds / 1000.0
            if kind == b"save":
                self.save = self._max(self.save, seconds)
            else:
                self.load = self._max(self.load, seconds)
        for iteration in _CKPT_SAVED.findall(chunk):
            self.iteration = int(iteration)
        for iteration, seconds in _NEMO_SAVE.findall(chunk):
            self.iteration = int(iteration)
            self.save = self._max(self.save, number(seconds))
        for seconds in _NEMO_LOAD.findall(chunk):
            self.load = self._max(self.load, number(seconds))

    def finish(self) -> CheckpointTimings | None:
        if self.save is None and self.load is None:
            return None
        return CheckpointTimings(save_s=self.save, load_s=self.load, save_iteration=self.iteration)
