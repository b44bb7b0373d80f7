"""The recipe's parallel layout, with torch's own distributed APIs.

``parallelize(model, spec, world)`` applies what ``spec.layout`` (a
``llmb.runs.runspec.ParallelLayout``) asks, in torchtitan's order: tensor
parallel (``tensor_parallel``), activation checkpointing
(``checkpointing``), then the data-parallel wrapping: FSDP2 for ``fsdp``
layouts (``fsdp``), gradient and optimizer-state sharding over the
data-parallel ranks when TP splits the model, and DDP when the layout is
data parallel only (as the engine always did). The device mesh comes from
``mesh``. Create the optimizer after ``parallelize``, over the parameters it
leaves (DTensor shards under FSDP and TP).

In the training step: ``no_sync(module)`` skips the gradient reduction of
all but the last micro-batch (DDP and FSDP alike), ``loss_context(spec)``
computes the cross-entropy on logits split over the vocabulary (loss
parallel, with TP), and ``plain(loss)`` is the loss as an ordinary tensor.
``torch.nn.utils.clip_grad_norm_`` works on the parameters as they are:
under each layout here they are all plain tensors or all DTensors of one mesh.

Context parallelism runs only on GPUs and is refused here; pipeline and
expert parallelism live in their own modules of this package.
"""

from __future__ import annotations

import contextlib

from llmb.engines.torch.parallel.mesh import (
    Meshes,
    build_mesh,
    check_layout,
    coordinates,
    data_rank,
    describe,
)
from llmb.errors import UsageError
from llmb.runs.runspec import ParallelLayout, RunSpec

__all__ = [
    "Meshes",
    "apply_layout",
    "build_mesh",
    "check_supported",
    "coordinates",
    "data_rank",
    "describe",
    "loss_context",
    "no_sync",
    "parallelize",
    "plain",
]


def check_supported(layout: ParallelLayout, world: int, seq_len: int) -> int:
    """The data-parallel size of ``layout`` over ``world`` ranks; UsageError when the layout does not fit
    the ranks or the torch engine cannot apply it. Imports no torch: launch checks a run before submitting."""
    dp = check_layout(layout, world)
    if layout.cp > 1:
        raise UsageError(
            f"context parallel (CP {layout.cp}) is not available in the torch engine: it runs only on "
            f"GPUs (ring attention over CUDA attention kernels), and needs the rotary tables split with "
            f"the sequence. Use CP 1, or the production engine."
        )
    if layout.tp > 1 and layout.sequence_parallel and seq_len % layout.tp:
        raise UsageError(
            f"sequence parallel splits the sequence over TP {layout.tp} ranks; a sequence of "
            f"{seq_len} does not split evenly. Use a multiple of {layout.tp}, or no sequence parallel."
        )
    return dp


def parallelize(model, spec: RunSpec, world: int):
    """``model`` (a ``CausalLM``, every rank's copy initialised alike) laid out as ``spec.layout`` over
    ``world`` ranks; the module to train (the model itself, changed in place, or its DDP wrapper)."""
    layout = spec.layout
    check_supported(layout, world, spec.seq_len)
    if world == 1 or (layout.model_parallel() == 1 and layout.ep == 1 and not layout.fsdp):
        # DDP, as ever
        return apply_layout(model, layout, None, spec.compute_dtype, data_parallel=world)
    mesh = build_mesh(layout, world, "cuda" if spec.device == "cuda" else "cpu")
    if layout.ep > 1:  # the step calls experts.reduce_expert_gradients after backward
        from llmb.engines.torch.parallel.experts import (
            apply_expert_data_parallel,
            apply_expert_parallel,
        )

        if layout.model_parallel() == 1 and not layout.fsdp:
            return apply_expert_data_parallel(model, mesh)  # DDP for the dense parameters
        # before TP and the pipeline split: the experts stay whole (computed alike on each TP rank) and plain
        # tensors of this rank's EP share, left out of FSDP; the dense layers are laid out as without EP
        apply_expert_parallel(model, mesh.ep, dp=mesh.dp.size(), edp_group=mesh.edp)
    # a pipeline.Pipeline: the step calls its step(inputs, labels) instead of forward/backward
    if layout.pp > 1:
        import torch

        from llmb.engines.torch.parallel.pipeline import apply_pipeline

        # the stages' device: where the run computes (the model may still be on meta: a sharded build)
        device = (
            torch.device("cuda", torch.cuda.current_device())
            if spec.device == "cuda"
            else torch.device("cpu")
        )
        return apply_pipeline(
            model,
            mesh.pp,
            spec.ga,
            layout.vp,
            device=device,
            wrap=lambda stage: apply_layout(stage, layout, mesh, spec.compute_dtype),
        )
    return apply_layout(model, layout, mesh, spec.compute_dtype)


def apply_layout(
    model,
    layout: ParallelLayout,
    mesh: Meshes | None,
    compute_dtype: str,
    data_parallel: int | None = None,
):
    """TP, recompute and the data-parallel wrapping of ``layout`` on ``model`` (or a pipeline stage),
    over ``mesh`` (``build_mesh``'s; None: one rank, or ``data_parallel`` ranks of the default group and DDP)."""
    from llmb.engines.torch.parallel.checkpointing import apply_checkpointing
    from llmb.engines.torch.parallel.fsdp import apply_fsdp

    if layout.tp > 1:
        from llmb.engines.torch.parallel.tensor_parallel import apply_tensor_parallel

        apply_tensor_parallel(model, mesh.tp, layout.sequence_parallel)
    experts = set()
    if layout.ep > 1:
        from llmb.engines.torch.parallel.experts import flag_expert_parameters

        # again: TP made new (replicated DTensor) parameters of them
        experts = flag_expert_parameters(model)
    if layout.recompute_layers:
        apply_checkpointing(model, layout.recompute_layers)
    if mesh is None:
        if not data_parallel or data_parallel < 2:
            return model
        from torch.nn.parallel import DistributedDataParallel

        device = next(model.parameters()).device
        # gradients as views into DDP's reduction buckets: no copy in or out of them
        return DistributedDataParallel(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            gradient_as_bucket_view=True,
        )
    data = mesh.dp_cp
    if data.size() > 1 and (layout.fsdp or layout.model_parallel() > 1):
        # FSDP asked for, or the ZeRO-2 sharding that stands for Megatron's distributed optimizer
        apply_fsdp(model, data, compute_dtype, reshard_after_forward=layout.fsdp, ignored=experts)
    return model


@contextlib.contextmanager
def no_sync(module):
    """Within: backward passes accumulate gradients without reducing them over the data-parallel ranks."""
    from torch.distributed.fsdp import FSDPModule
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(module, DistributedDataParallel):
        with module.no_sync():
            yield
    elif isinstance(module, FSDPModule):
        module.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            module.set_requires_gradient_sync(True)
    else:
        yield


def loss_context(spec: RunSpec):
    """Where the loss and its backward run: ``loss_parallel()`` when TP left the logits split over the
    vocabulary, else nothing."""
    if spec.layout.tp > 1:
        from torch.distributed.tensor.parallel import loss_parallel

        return loss_parallel()
    return contextlib.nullcontext()


def plain(tensor):
    """``tensor`` as an ordinary tensor (a DTensor loss or norm made whole)."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
