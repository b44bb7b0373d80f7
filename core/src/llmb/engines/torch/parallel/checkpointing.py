"""Activation checkpointing (recompute) per decoder layer.

A recipe's ``recompute_layers: N`` (Megatron-Bridge's full recompute of N
layers, ``recompute_method: block``) keeps only the input of each of the
first N decoder layers in the forward pass and computes the layer again in
the backward pass. Applied per module given, so under pipeline parallelism
it is the first N layers of each stage, as Megatron's block method does.
Parameter names do not change: ``checkpoint_wrapper``'s prefix is dropped
from state dicts and distributed checkpoints.
"""

from __future__ import annotations

from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    checkpoint_wrapper,
)

from llmb.engines.torch.parallel.structure import decoder_layers, replace_layer

__all__ = ["apply_checkpointing"]


def apply_checkpointing(model: nn.Module, layers: int) -> nn.Module:
    """Recompute the first ``layers`` decoder layers of ``model`` in the backward pass (all when
    ``layers`` reaches the layer count), in place."""
    for index, (key, layer) in enumerate(list(decoder_layers(model))):
        if index >= layers:
            break
        replace_layer(
            model, key, checkpoint_wrapper(layer, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
        )
    return model
