"""The torch engine's optimizer and schedule: the benchmarks' AdamW, learning rate and clipping.

AdamW with betas 0.9/0.95 and weight decay 0.1 (``make_optimizer``): its
fused kernel where the device has one (``fused_devices``), else the
multi-tensor ``foreach`` one; a linear warm-up over 10 steps and a cosine
decay to step 50 (``learning_rate``); gradients clipped at ``CLIP_NORM``.
"""

from __future__ import annotations

import math

MAX_LR, MIN_LR, WARMUP_STEPS, DECAY_STEPS = 3e-4, 3e-5, 10, 50
CLIP_NORM = 1.0


def learning_rate(step: int) -> float:
    """Linear warm-up to MAX_LR over WARMUP_STEPS, cosine decay to MIN_LR at step DECAY_STEPS."""
    if step <= WARMUP_STEPS:
        return MAX_LR * step / WARMUP_STEPS
    if step >= DECAY_STEPS:
        return MIN_LR
    progress = (step - WARMUP_STEPS) / (DECAY_STEPS - WARMUP_STEPS)
    return MIN_LR + 0.5 * (MAX_LR - MIN_LR) * (1 + math.cos(math.pi * progress))


def fused_devices() -> set[str]:
    """Device types with a fused AdamW kernel in this torch (CUDA; CPU and others since torch 2.4)."""
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
    except ImportError:
        return {"cuda"}
    return set(_get_fused_kernels_supported_devices())


def make_optimizer(parameters):
    """AdamW with the benchmarks' settings (betas 0.9/0.95, weight decay 0.1): one fused kernel for all
    parameters where their device has one, else the multi-tensor (``foreach``) implementation."""
    import torch

    params = list(parameters)
    fused = all(p.device.type in fused_devices() and p.is_floating_point() for p in params)
    # one parameter group per kind (plain tensors, DTensors of each mesh): a fused or foreach kernel takes
    # one kind at a time (expert parallelism leaves the experts plain beside FSDP's DTensors)
    groups: dict[int, list] = {}
    for p in params:
        groups.setdefault(id(getattr(p, "device_mesh", None)), []).append(p)
    return torch.optim.AdamW(
        [{"params": group} for group in groups.values()],
        lr=learning_rate(1),
        betas=(0.9, 0.95),
        weight_decay=0.1,
        eps=1e-8,
        **({"fused": True} if fused else {"foreach": True}),
    )
