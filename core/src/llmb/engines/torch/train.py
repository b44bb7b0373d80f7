"""The torch engine's training loop (one process per rank): ``train(spec, rank, world, local_rank, host=...)``.

Synthetic tokens (seeded per rank), AdamW with the benchmarks' schedule
(linear warm-up over 10 steps, cosine decay to step 50), gradient
accumulation over the recipe's GA with DDP's gradient sync on the last
micro-batch only, gradient clipping at 1.0, bf16 autocast on GPU. Rank 0
writes Megatron-Bridge's log lines (``engines/torch/logfmt.py``). NVTX ranges mark
step, forward, backward and optimizer on GPU; the profiling window opens
and closes nsys's capture or a torch.profiler trace. Checkpoints are
``torch.distributed.checkpoint`` (``.distcp``) with the save/load timing
lines of the workload's framework.

The parts, torchtitan's way, each in its own module: ``runtime`` (the
rank's device and process group), ``model`` (built on the meta device by
the workload's plugin, its precision), ``parallelize`` (materialised and
laid out), ``optim``, ``step`` (one training step; a pipeline layout's
through its schedule), ``profiler`` (the profiling window),
``checkpoint``. Here: ``Engine``, which holds them for one rank, and the
loop (``run``). The plugin host is the worker's (one per process), passed
in: it builds the model and, before every step, calls ``llmb_before_step``
(a plugin may fail the rank there or scale the step's loss: tests inject
faults so, ``tests/fault_plugin.py``).

Speed: AdamW's fused kernel where the device has one (else its multi-tensor
``foreach`` one), multi-tensor gradient clipping, DDP reducing straight from
its buckets (``gradient_as_bucket_view``), each decoder layer compiled on its
own (``compile_blocks``: on GPU by default, on CPU with ``--compile``) before
the DDP wrapping, so the gradient reduction still overlaps backward; loss and
grad norm stay on the device until the step's one host read (the log prints
every iteration); Python's garbage collector runs every ``GC_EVERY`` steps
instead of whenever allocations trigger it (``GarbageCollection``).
"""

from __future__ import annotations

import contextlib
import math
import resource
import sys
from typing import TYPE_CHECKING

from llmb.engines.torch import checkpoint, logfmt, model
from llmb.engines.torch.optim import learning_rate, make_optimizer
from llmb.engines.torch.parallelize import lay_out, wants_compile
from llmb.engines.torch.profiler import ProfileWindow
from llmb.engines.torch.runtime import GC_EVERY, GarbageCollection, Rank
from llmb.engines.torch.step import data_generator, micro_batch, train_step
from llmb.runs.runspec import RunSpec

if TYPE_CHECKING:
    from llmb.plugins.host import PluginHost


class Engine(Rank):
    """One rank's training: the rank (``runtime.Rank``), the model its workload's plugin builds on
    ``host`` (``model``), laid out (``parallelize``), its optimizer and tokens; ``step(n)`` trains one
    step (``step.train_step``), ``close`` ends the rank's part."""

    gc_every = GC_EVERY

    def __init__(self, spec: RunSpec, rank: int, world: int, local_rank: int, host: PluginHost):
        super().__init__(spec, rank, world, local_rank)
        self.host = host
        self.compile = wants_compile(self.spec.compile, self.cuda)
        self.gc = GarbageCollection(self.gc_every)
        self.bf16_autocast = self.cuda and self.spec.compute_dtype == "bfloat16"
        # set by build when Transformer Engine's layers compute the row's format
        self.te_autocast = None

    def choose_precision(self):
        return model.choose_precision(self.spec, self.device)

    def build(self) -> None:
        from llmb.engines.torch.parallel.pipeline import Pipeline

        spec = self.spec
        self.model = model.build_on_meta(self.host, spec)
        self.precision = self.choose_precision()
        self.say(*model.startup_lines(spec, self.world, self.model, self.precision))
        self.te_autocast = model.apply_precision(
            self.model, self.precision, spec.run_dir if self.rank == 0 else None
        )
        self.module = lay_out(self.model, spec, self.world, self.device, self.compile)
        self.pipeline = self.module if isinstance(self.module, Pipeline) else None
        self.experts = spec.layout.ep > 1
        self.optimizer = make_optimizer(
            self.pipeline.parameters() if self.pipeline else self.model.parameters()
        )
        self.gc.start()
        self.generator = data_generator(spec, self.world, self.rank)
        self.vocab = spec.model_arch().vocab

    def autocast(self):
        """The context of a forward pass: bf16 autocast on GPU, and Transformer Engine's autocast with the
        row's recipe when its layers compute the row's nvfp4 / mxfp8 (``self.precision.te``)."""
        stack = contextlib.ExitStack()
        if self.bf16_autocast:
            stack.enter_context(self.torch.autocast("cuda", dtype=self.torch.bfloat16))
        if self.te_autocast is not None:
            stack.enter_context(self.te_autocast())
        return stack

    def micro_batch(self):
        return micro_batch(self.generator, self.spec, self.vocab, self.device, self.cuda)

    def step(self, step: int, loss_factor: float | None = None) -> tuple[float, float, float]:
        return train_step(self, step, loss_factor)

    def close(self) -> None:
        self.gc.stop()
        super().close()


def memory_line(engine: Engine, step: int) -> str:
    """The log's memory line: the CUDA allocator's figures on GPU, the peak resident set on CPU."""
    torch = engine.torch
    gib = 2**30
    if engine.cuda:
        fields = {
            "mem-allocated-gigabytes": torch.cuda.memory_allocated() / gib,
            "mem-max-allocated-gigabytes": torch.cuda.max_memory_allocated() / gib,
            "mem-reserved-gigabytes": torch.cuda.memory_reserved() / gib,
            "mem-max-reserved-gigabytes": torch.cuda.max_memory_reserved() / gib,
        }
    else:
        fields = {
            "max-rss-gigabytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / gib
        }
    return logfmt.memory(step, engine.rank, fields)


def before_step(host: PluginHost, step: int, rank: int) -> float | None:
    """``llmb_before_step``'s answers for this step, multiplied (None: no plugin changes it). A plugin
    that raises fails the rank here, before the step."""
    factors = host.pm.hook.llmb_before_step(step=step, rank=rank)
    return math.prod(factors) if factors else None


def run(engine: Engine) -> None:
    """Build, load the checkpoint to start from, train ``spec.steps`` steps (rank 0 logs each), save."""
    spec = engine.spec
    engine.build()
    if spec.checkpoint_load_dir:
        checkpoint.load(engine)
    window = ProfileWindow(spec.profile, engine.rank, engine.cuda, engine.say)
    consumed = 0
    for step in range(1, spec.steps + 1):
        loss_factor = before_step(engine.host, step, engine.rank)
        with window.step(step):
            loss, grad_norm, seconds = engine.step(step, loss_factor)
        consumed += spec.gbs
        tflops = (
            spec.gbs * spec.flops_per_sample / seconds / spec.ranks / 1e12 if seconds > 0 else 0.0
        )
        engine.say(
            logfmt.step_time(seconds, tflops),
            logfmt.iteration(
                step,
                spec.steps,
                consumed=consumed,
                elapsed_ms=seconds * 1000,
                tflops=tflops,
                lr=learning_rate(step),
                gbs=spec.gbs,
                loss=loss,
                grad_norm=grad_norm,
            ),
        )
        if step == 1:
            engine.say(memory_line(engine, step))
    if spec.checkpoint_save_dir:
        checkpoint.save(engine, spec.steps)
    engine.say(
        memory_line(engine, spec.steps), f"[llmb] training finished after {spec.steps} steps"
    )


def train(spec: RunSpec, rank: int, world: int, local_rank: int, *, host: PluginHost) -> None:
    """One rank's run of ``spec``, the model built and the steps' hooks called through ``host``."""
    sys.stdout.reconfigure(line_buffering=True)
    engine = Engine(spec, rank, world, local_rank, host)
    run(engine)
    engine.close()  # not on failure: a barrier would wait forever for the rank that failed
