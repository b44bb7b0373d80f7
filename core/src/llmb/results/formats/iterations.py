"""What the iteration-line formats share: one ``IterationLog`` per log, filled sample by sample."""

from __future__ import annotations

import math

from llmb.results.lines import MAX_SAMPLES
from llmb.results.records import IterationLog, Sample


class Iterations:
    """Shared bookkeeping of the iteration-line readers: the last denominator (``i/N``), repeated
    iterations (the last kept), NaN grad norms, and the cap on distinct iterations kept."""

    def __init__(self, fmt: str):
        self.log = IterationLog(format=fmt)

    def add(self, iteration: int, last: int | None, sample: Sample) -> None:
        log = self.log
        if last is not None:
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
