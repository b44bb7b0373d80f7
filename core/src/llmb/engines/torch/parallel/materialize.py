"""Building a sharded model without ever holding the whole of it.

A full-size row does not fit on one GPU unsharded (Llama 3.1 70B's float32
master weights alone are 280 GB), so under FSDP, TP or PP the engine builds
the model on the meta device, lays it out there (``parallelize`` works on
meta tensors: DTensor and FSDP2 shard shapes, pipeline stages reference
sub-modules), and only then gives this rank's parameters memory and values.

The values are those of the unsharded model initialised with
``blocks.initialize(model, seed)``: every sub-module draws from its own seed,
so ``materialize`` computes each sub-module's full initial values on the
device from a meta copy of it, one sub-module at a time (the largest, the
embedding, is the peak), and keeps the slice this rank holds. A layout is
then numerically the unsharded model, as the CPU tests check.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

from llmb.engines.torch.blocks import module_seed
from llmb.engines.torch.parallel.structure import reordering

__all__ = ["materialize", "meta_template", "unwrapped_name"]

_WRAPPERS = ("._checkpoint_wrapped_module", "._orig_mod", "._fsdp_wrapped_module")


def unwrapped_name(name: str) -> str:
    """A sub-module's name with the wrappers' path parts (activation checkpointing, compile) removed:
    its name in the model as built."""
    for part in _WRAPPERS:
        name = name.replace(part, "")
    return name


def meta_template(model: nn.Module) -> nn.Module:
    """A copy of ``model`` (on the meta device) kept before laying it out: the shapes ``materialize``
    computes the full initial values from. It costs no memory."""
    if any(not t.is_meta for t in (*model.parameters(), *model.buffers())):
        raise ValueError("meta_template expects a model built on the meta device")
    return copy.deepcopy(model)


def materialize(
    model: nn.Module,
    template: nn.Module,
    seed: int,
    device: torch.device,
    modules: list[nn.Module] | None = None,
) -> int:
    """Give this rank's share of ``model`` memory on ``device`` and the unsharded model's initial values.

    Contract: ``template`` is ``meta_template(model)`` taken before the layout was applied; ``model`` is
    the same model laid out in place (TP, FSDP2, activation checkpointing, compile), still on meta.
    ``modules`` (a pipeline's stage modules) limits the work to what this rank holds; the rest of
    ``model`` stays on meta. The values equal ``blocks.initialize(unsharded, seed)``'s. Returns the
    number of sub-modules initialised.
    """
    roots = modules if modules is not None else [model]
    for root in roots:
        root.to_empty(device=device)
    held = {id(t) for root in roots for t in (*root.parameters(), *root.buffers())}
    laid_out = {unwrapped_name(name): sub for name, sub in model.named_modules()}
    done = 0
    for index, (name, sub) in enumerate(template.named_modules()):
        reset = getattr(sub, "reset_parameters", None)
        target = laid_out.get(name)
        if not callable(reset) or target is None:
            continue
        slots = [
            (kind, key)
            for kind in ("_parameters", "_buffers")
            for key, value in getattr(target, kind).items()
            if value is not None and id(value) in held
        ]
        if not slots:
            continue  # on another pipeline stage
        # its children stay meta: reset_parameters touches only its own tensors
        whole = copy.deepcopy(sub)
        whole._apply(lambda t: torch.empty_like(t, device=device), recurse=False)
        torch.manual_seed(module_seed(seed, index))
        with torch.no_grad():
            whole.reset_parameters()
            for kind, key in slots:
                full = getattr(whole, kind)[key]
                reorder = reordering(target, key)
                _copy_share(getattr(target, kind)[key], reorder(full) if reorder else full)
        done += 1
    return done


def _copy_share(destination: torch.Tensor, full: torch.Tensor) -> None:
    """Copy ``full`` into ``destination``, or the part of it a DTensor ``destination`` holds on this rank
    (sliced locally: every rank computed the same ``full``, so nothing is sent)."""
    data = destination.data if isinstance(destination, nn.Parameter) else destination
    if isinstance(data, DTensor):
        share = distribute_tensor(
            full.to(data.dtype), data.device_mesh, data.placements, src_data_rank=None
        )
        data.to_local().copy_(share.to_local())
    else:
        data.copy_(full)
