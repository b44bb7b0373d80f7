"""One training step of the torch engine: forward and backward over the step's micro-batches, then the
optimizer.

``train_step(run, step)`` is the step; ``run`` is the rank's training state
(``llmb.engines.torch.train.Engine``: its module, optimizer, device,
``micro_batch()`` and ``autocast()``). Forward and backward go one of two
ways: ``accumulate`` runs GA micro-batches, each loss / GA, with the
data-parallel gradient reduction on the last one only (``no_sync``);
``pipeline_step`` hands the GA micro-batches to the pipeline schedule
(1F1B, or interleaved with VP), which runs forward and backward itself.
Then ``optimizer_step``: the expert gradients' reduction, clipping at
``CLIP_NORM`` (over every stage's / expert shard's gradients where the
layout splits them), AdamW. NVTX ranges mark step, forward, backward and
optimizer on GPU. The loss and the grad norm stay on the device until the
step's one host read.

The micro-batches are synthetic tokens (``micro_batch``), drawn from a
generator seeded by the data-parallel rank (``data_generator``).
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

from llmb.engines.torch import parallel
from llmb.engines.torch.optim import CLIP_NORM, learning_rate
from llmb.runs.runspec import RunSpec

if TYPE_CHECKING:
    from llmb.engines.torch.train import Engine


def data_generator(spec: RunSpec, world: int, rank: int):
    """The token generator of this rank, seeded by its data-parallel rank: the ranks of one model replica
    (TP, PP, CP) read the same batches."""
    import torch

    return torch.Generator().manual_seed(
        spec.seed * 1000 + parallel.data_rank(spec.layout, world, rank)
    )


def micro_batch(generator, spec: RunSpec, vocab: int, device, cuda: bool):
    """One micro-batch of synthetic tokens: (inputs, labels), the labels shifted by one."""
    import torch

    tokens = torch.randint(0, vocab, (spec.mbs, spec.seq_len + 1), generator=generator)
    # from pinned memory the copy is asynchronous (from pageable memory it waits for the GPU)
    if cuda:
        tokens = tokens.pin_memory().to(device, non_blocking=True)
    return tokens[:, :-1], tokens[:, 1:]


def accumulate(run: Engine, loss_factor: float | None = None):
    """Forward and backward of the step's GA micro-batches, gradients accumulated; the sum of their losses
    (each / GA), on the device. ``loss_factor`` (``llmb_before_step``'s) multiplies each loss first."""
    torch, spec = run.torch, run.spec
    loss_sum = torch.zeros((), device=run.device)
    for micro in range(spec.ga):
        inputs, labels = run.micro_batch()
        last = micro == spec.ga - 1
        sync = contextlib.nullcontext() if last else parallel.no_sync(run.module)
        with sync, parallel.loss_context(spec):
            with run.range("forward"), run.autocast():
                # the model's own chunked cross-entropy (no full fp32 logits), through DDP's forward
                loss = run.module(inputs, labels=labels) / spec.ga
                if loss_factor is not None:
                    loss = loss * loss_factor
            with run.range("backward"):
                loss.backward()
        loss_sum += parallel.plain(loss.detach())
    return loss_sum


def pipeline_step(run: Engine):
    """Forward and backward of the step's GA micro-batches through the pipeline schedule (1F1B, or
    interleaved with VP): its mean loss, on every rank of the pipeline. The tokens are the ones the
    unsplit model would draw, micro-batch after micro-batch, from the data-parallel rank's generator."""
    torch = run.torch
    batches = [run.micro_batch() for _ in range(run.spec.ga)]
    inputs = torch.cat([inputs for inputs, _ in batches])
    labels = torch.cat([labels for _, labels in batches])
    loss_sum = torch.zeros((), device=run.device)
    with run.range("forward-backward"), run.autocast():
        loss_sum += run.pipeline.step(inputs, labels)
    return loss_sum


def optimizer_step(run: Engine):
    """The gradients' reduction where the layout leaves it to the step, clipping, AdamW: the grad norm
    before clipping (on the device)."""
    with run.range("optimizer"):
        if run.experts:
            from llmb.engines.torch.parallel.experts import reduce_expert_gradients

            reduce_expert_gradients(run.module)
        if run.pipeline or run.experts:  # the norm over every stage's / expert shard's gradients
            from llmb.engines.torch.parallel.gradnorm import clip_layout_grad_norm_

            grad_norm = clip_layout_grad_norm_(run.module, CLIP_NORM, run.device)
        else:
            grad_norm = run.torch.nn.utils.clip_grad_norm_(
                run.model.parameters(), CLIP_NORM, foreach=True
            )
        run.optimizer.step()
        run.optimizer.zero_grad(set_to_none=True)
    return grad_norm


def train_step(
    run: Engine, step: int, loss_factor: float | None = None
) -> tuple[float, float, float]:
    """One optimizer step over GA micro-batches: (loss, grad norm, seconds).

    The loss and the grad norm stay on the device; reading them is the step's one host sync (it
    waits for every kernel of the step, the optimizer's included), then the step time's reduction.
    ``loss_factor`` multiplies each micro-batch's loss (not under a pipeline schedule, which computes
    its losses itself)."""
    torch = run.torch
    for group in run.optimizer.param_groups:
        group["lr"] = learning_rate(step)
    begin = time.perf_counter()
    with run.range("step"):
        loss_sum = pipeline_step(run) if run.pipeline else accumulate(run, loss_factor)
        grad_norm = optimizer_step(run)
        if run.distributed:
            import torch.distributed as dist

            dist.all_reduce(loss_sum, op=dist.ReduceOp.SUM)
        loss, norm = torch.stack((loss_sum / run.world, parallel.plain(grad_norm).float())).tolist()
    seconds = time.perf_counter() - begin
    run.gc.after_step(step)
    return loss, norm, run.reduce(seconds, "max")
