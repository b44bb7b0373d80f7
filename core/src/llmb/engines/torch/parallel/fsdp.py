"""Fully sharded data parallel (FSDP2, ``torch.distributed.fsdp.fully_shard``).

Each decoder layer is one FSDP unit (its parameters gathered just before
its forward and backward, and freed after), then the root module takes what
is left (embedding, final norm, output layer). Gradients are reduce-scattered
over the data-parallel ranks, so each rank keeps and steps only its shard of
the parameters, gradients and optimizer state. When the engine computes in
bfloat16 the parameters are gathered in bfloat16 and the gradients reduced
in float32 (``MixedPrecisionPolicy``); in float32 nothing is cast.

Without ``reshard_after_forward`` the gathered parameters stay until the
backward: only gradients and optimizer state are sharded (ZeRO-2), which is
what the engine uses for data parallelism beside tensor or pipeline
parallelism when the recipe does not ask for FSDP (Megatron's distributed
optimizer shards the optimizer state the same way).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from llmb.engines.torch.parallel.structure import decoder_layers

__all__ = ["apply_fsdp", "mixed_precision"]


def mixed_precision(compute_dtype: str) -> MixedPrecisionPolicy:
    """bf16 parameters with fp32 gradient reduction when computing in bfloat16; no casts otherwise."""
    if compute_dtype == "bfloat16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def apply_fsdp(
    model: nn.Module,
    mesh,
    compute_dtype: str,
    reshard_after_forward: bool = True,
    ignored: set[nn.Parameter] | None = None,
) -> nn.Module:
    """Shard ``model`` (a ``CausalLM`` or a pipeline stage of one) over the data-parallel ``mesh``, in place:
    ``fully_shard`` per decoder layer, then the root. ``ignored`` parameters are left as they are (expert
    parameters, sharded over their EP group and reduced by ``experts.reduce_expert_gradients``)."""
    policy = mixed_precision(compute_dtype)
    for _, layer in decoder_layers(model):
        fully_shard(
            layer,
            mesh=mesh,
            mp_policy=policy,
            reshard_after_forward=reshard_after_forward,
            ignored_params=ignored or None,
        )
    fully_shard(
        model,
        mesh=mesh,
        mp_policy=policy,
        reshard_after_forward=reshard_after_forward,
        ignored_params=ignored or None,
    )
    return model
