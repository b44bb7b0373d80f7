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

__all__ = ["clip_grad_norm_", "squared_norm"]


def squared_norm(parameters: Iterable[torch.Tensor], device: torch.device) -> torch.Tensor:
    """Sum of the squared L2 norms of the gradients of ``parameters`` (a float32 scalar on ``device``).
    A DTensor gradient counts whole: its norm is reduced over its mesh."""
    total = torch.zeros((), dtype=torch.float32, device=device)
    local = []
    for p in parameters:
        if p.grad is None:
            continue
        if hasattr(p.grad, "full_tensor"):
            total = total + torch.linalg.vector_norm(p.grad, dtype=torch.float32).full_tensor().square()
        else:
            local.append(p.grad)
    if local:
        total = total + torch.stack(torch._foreach_norm(local, 2.0, dtype=torch.float32)).square().sum()
    return total


def clip_grad_norm_(parts: Sequence[tuple[Iterable[torch.Tensor], Sequence[dist.ProcessGroup | None]]],
                    max_norm: float, device: torch.device) -> torch.Tensor:
    """Clip the gradients of every parameter in ``parts`` to a joint L2 norm of ``max_norm``.

    ``parts`` is a sequence of ``(parameters, groups)``: ``groups`` are the
    process groups over whose ranks those parameters are distinct (each rank
    holds other ones), e.g. ``[(dense, [pp_group]), (experts, [ep_group,
    pp_group])]``; ``None`` entries are skipped. Replicated parameters (DP)
    belong in no group: their gradients are equal on every rank after the
    reduction. Every rank of every group must call it. The norm is reduced
    on ``device`` (the accelerator under NCCL). Returns the total norm
    before clipping, the same on every rank, as ``clip_grad_norm_`` does.
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
    norm = total.sqrt()
    torch.nn.utils.clip_grads_with_norm_([p for p in params if p.grad is not None], max_norm, norm)
    return norm
