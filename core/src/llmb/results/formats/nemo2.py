"""NeMo 2's (Lightning's) iteration lines: ``Training epoch 0, iteration 45/99 | lr: 6.897e-06 |
global_batch_size: 128 | ... | train_step_timing in s: 6.08 | TFLOPS_per_GPU: 1.249e+03 | ...``
(0-based: a 50-step run ends at 49/49)."""

from __future__ import annotations

from llmb.results.formats.iterations import Iterations
from llmb.results.formats.megatron import ITERATION
from llmb.results.lines import fields, find_lines, number, whole
from llmb.results.records import Sample


class NeMo2Reader(Iterations):
    """The first ``iteration i/N |`` of a line whose rest holds ``train_step_timing`` (tested with
    ``in``: a ``[^\\n]*train_step_timing`` in the pattern would backtrack over the rest of the line
    from every "iteration")."""

    def __init__(self) -> None:
        super().__init__("nemo2")

    def feed(self, chunk: bytes) -> None:
        if b"train_step_timing in s" not in chunk:
            return
        for line in find_lines(chunk, b"train_step_timing in s"):
            m = ITERATION.search(line.body)
            if m is None or b"train_step_timing" not in m.group(3):
                continue
            values = fields(m.group(3))
            seconds = number(values.get(b"train_step_timing in s", b""))
            iteration = int(m.group(1))
            self.add(
                iteration,
                int(m.group(2)),
                Sample(
                    iteration=iteration,
                    step_time_ms=None if seconds is None else seconds * 1000.0,
                    tflops_per_gpu=number(values.get(b"tflops_per_gpu", b"")),
                    loss=number(values.get(b"reduced_train_loss", b"")),
                    grad_norm=number(values.get(b"grad_norm", b"")),
                    global_batch_size=whole(values.get(b"global_batch_size", b"")),
                ),
            )
