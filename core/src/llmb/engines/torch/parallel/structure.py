"""Where the decoder layers of an engine model are.

A ``CausalLM`` keeps its layers in a ``ModuleList``; a pipeline stage
(``llmb.engines.torch.parallel.pipeline``) keeps its share in a ``ModuleDict``
under the model's own indices. The layouts here work on either.

A layout that stores a tensor in another order than the model's own (the
fused q|k|v rows under TP) says so with ``mark_reordered``; building a
sharded model (``materialize``) computes the tensor in the model's order and
applies ``reordering`` before keeping this rank's share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from torch import nn

__all__ = ["decoder_layers", "mark_reordered", "reordering", "replace_layer"]

_REORDERED = "_llmb_reordered"


def decoder_layers(model: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """``(key, layer)`` for each decoder layer of ``model``, in order."""
    layers = getattr(model, "layers", None)
    if isinstance(layers, nn.ModuleDict):
        yield from layers.items()
    elif isinstance(layers, nn.ModuleList):
        yield from ((str(i), layer) for i, layer in enumerate(layers))
    else:
        raise TypeError(
            f"{type(model).__name__} has no decoder layers (a 'layers' ModuleList or ModuleDict)"
        )


def replace_layer(model: nn.Module, key: str, layer: nn.Module) -> None:
    """Put ``layer`` in the place of the decoder layer ``key`` (as ``decoder_layers`` names it)."""
    layers = model.layers
    if isinstance(layers, nn.ModuleDict):
        layers[key] = layer
    else:
        layers[int(key)] = layer


def mark_reordered(module: nn.Module, name: str, reorder: Callable) -> None:
    """Record that ``module``'s tensor ``name`` is kept as ``reorder(tensor in the model's order)``."""
    module.__dict__.setdefault(_REORDERED, {})[name] = reorder


def reordering(module: nn.Module, name: str) -> Callable | None:
    """The reordering ``mark_reordered`` recorded for ``module``'s tensor ``name``, or None."""
    return module.__dict__.get(_REORDERED, {}).get(name)
