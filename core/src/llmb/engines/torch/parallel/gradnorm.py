"""Gradient clipping when the parameters are spread over ranks.

``torch.nn.utils.clip_grad_norm_`` sees one rank's parameters. Under pipeline
parallelism every stage holds different layers, and under expert parallelism
every rank different experts, so the norm the unsharded model would clip by
is the square root of the sum, over those ranks, of each rank's squared norm.
DTensor gradients (FSDP, TP) reduce over their own mesh first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
import torch.distributed as dist

__all__ = ["clip_grad_norm_", "clip_layout_grad_norm_", "layout_parts", "squared_norm"]


def squared_norm(parameters: Iterable[torch.Tensor], device: torch.device) -> torch.Tensor:
    """Sum of the squared L2 norms of the gradients of ``parameters`` (a float32 scalar on ``device``).
    A DTensor gradient counts whole: its norm is reduced over its mesh."""
    total = torch.zeros((), dtype=torch.float32, device=device)
    local = []
    for p in parameters:
        if p.grad is None:
            continue
        if hasattr(p.grad, "full_tensor"):
            total = (
                total + torch.linalg.vector_norm(p.grad, dtype=torch.float32).full_tensor().square()
            )
        else:
            local.append(p.grad)
    if local:
        total = (
            total + torch.stack(torch._foreach_norm(local, 2.0, dtype=torch.float32)).square().sum()
        )
    return total


def clip_grad_norm_(
    parts: Sequence[tuple[Iterable[torch.Tensor], Sequence[dist.ProcessGroup | None]]],
    max_norm: float,
    device: torch.device,
    outer: Sequence[dist.ProcessGroup | None] = (),
) -> torch.Tensor:
    """Clip the gradients of every parameter in ``parts`` to a joint L2 norm of ``max_norm``.

    ``parts`` is a sequence of ``(parameters, groups)``: ``groups`` are the
    process groups over whose ranks those parameters are distinct (each rank
    holds other ones), e.g. ``[(dense, []), (experts, [ep_group])]``; every
    rank of such a group must hold the same parts. ``outer`` are the groups
    over which the whole total is distinct (a pipeline's: its stages hold
    different parts, e.g. only one stage has experts), reduced once at the
    end. ``None`` entries are skipped. Replicated parameters (DP) belong in no
    group: their gradients are equal on every rank after the reduction. The
    norm is reduced on ``device`` (the accelerator under NCCL). Returns the
    total norm before clipping, the same on every rank, as ``clip_grad_norm_``
    does.
    """
    total = torch.zeros((), dtype=torch.float32, device=device)
    params: list[torch.Tensor] = []
    for parameters, groups in parts:
        parameters = list(parameters)
        params += parameters
        squared = squared_norm(parameters, device)
        for group in groups:
            if group is not None:
                dist.all_reduce(squared, op=dist.ReduceOp.SUM, group=group)
        total = total + squared
    for group in outer:
        if group is not None:
            dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group)
    norm = total.sqrt()
    # scaled in groups of one mesh each (DTensor arithmetic does not mix meshes: under TP with EP the experts
    # are replicated over the TP mesh, the dense parameters sharded over the data-parallel x TP one)
    by_mesh: dict[int, list[torch.Tensor]] = {}
    for p in params:
        if p.grad is not None:
            by_mesh.setdefault(id(getattr(p.grad, "device_mesh", None)), []).append(p)
    for group in by_mesh.values():
        torch.nn.utils.clip_grads_with_norm_(group, max_norm, norm)
    return norm


def layout_parts(
    module,
) -> tuple[list[tuple[list[torch.Tensor], list[dist.ProcessGroup]]], list[dist.ProcessGroup]]:
    """``clip_grad_norm_``'s parts and outer groups for what ``parallelize`` returned: an expert-parallel
    layer's experts differ over its EP group, a pipeline's whole total over its pipeline group; the rest
    is replicated (or a DTensor, which reduces itself)."""
    from llmb.engines.torch.parallel.experts import ExpertParallelMoE
    from llmb.engines.torch.parallel.pipeline import Pipeline

    outer = [module.group] if isinstance(module, Pipeline) else []
    modules = module.modules if isinstance(module, Pipeline) else [module]
    experts: dict[int, dist.ProcessGroup] = {}
    for part in modules:
        for layer in part.modules():
            if isinstance(layer, ExpertParallelMoE):
                experts.update((id(p), layer.group) for p in layer.experts.parameters())
    parts: dict[tuple, list[torch.Tensor]] = {}
    for part in modules:
        for p in part.parameters():
            key = (experts[id(p)],) if id(p) in experts else ()
            parts.setdefault(key, []).append(p)
    return [(params, list(key)) for key, params in parts.items()], outer


def clip_layout_grad_norm_(module, max_norm: float, device: torch.device) -> torch.Tensor:
    """``clip_grad_norm_`` over ``layout_parts(module)``: the unsharded model's clipping, under any layout."""
    parts, outer = layout_parts(module)
    return clip_grad_norm_(parts, max_norm, device, outer)
