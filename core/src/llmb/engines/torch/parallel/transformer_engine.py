"""NVFP4 and MXFP8 rows through Transformer Engine's linear layers, where it is installed.

The block-scaled formats have no PyTorch-native training path: their GEMMs
are Transformer Engine's (Blackwell, SM 10.0+). When
``transformer_engine.pytorch`` imports (its CUDA extension loads only on a
GPU node) and reports the format available on this GPU, the engine swaps each
eligible ``nn.Linear`` for ``transformer_engine.pytorch.Linear`` with the
same weights and runs forward under ``transformer_engine.pytorch.autocast``
with the format's recipe (``NVFP4BlockScaling`` / ``MXFP8BlockScaling``).
Otherwise the row computes in bf16 and says why (``availability``).

Eligible: the layers ``float8_eligible`` converts (not the output layer nor
the router), with both dimensions multiples of 32 (the formats' scaling
blocks). Only data-parallel and FSDP layouts: Transformer Engine's layers
carry their own tensor parallelism, which the engine's DTensor plan does not
drive.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Callable

import torch
from torch import nn

from llmb.engines.torch.parallel.low_precision import eligible_linear

__all__ = ["BLOCK_SCALED_RECIPES", "apply_te_linears", "availability", "te_autocast"]

# The recipe's precision name -> Transformer Engine's recipe class (transformer_engine.common.recipe).
BLOCK_SCALED_RECIPES = {
    "nvfp4": "NVFP4BlockScaling",
    "mxfp8": "MXFP8BlockScaling",
    "fp8_mx": "MXFP8BlockScaling",
}
_AVAILABLE = {"NVFP4BlockScaling": "is_nvfp4_available", "MXFP8BlockScaling": "is_mxfp8_available"}
_ALIGNMENT = 32  # the formats' scaling blocks


def _te():
    """``transformer_engine.pytorch``, or None where it does not import (not installed, or its CUDA
    extension cannot load: any CPU machine)."""
    try:
        return importlib.import_module("transformer_engine.pytorch")
    except Exception:  # noqa: BLE001 - a failed CUDA extension load raises OSError/RuntimeError, not ImportError
        return None


def availability(requested: str, device: torch.device, tensor_parallel: int) -> tuple[bool, str]:
    """(whether ``requested`` runs through Transformer Engine here, the reason when it does not)."""
    recipe = BLOCK_SCALED_RECIPES.get(requested)
    if recipe is None:
        return False, f"{requested} is not a Transformer Engine block-scaled format"
    if device.type != "cuda":
        return False, f"{requested} needs Transformer Engine's GPU kernels"
    if tensor_parallel > 1:
        return False, (
            f"the engine drives Transformer Engine's {requested} layers only without tensor "
            f"parallelism (TP {tensor_parallel})"
        )
    te = _te()
    if te is None:
        return False, "Transformer Engine is not installed here (it is in NVIDIA's NeMo container)"
    available, reason = getattr(te, _AVAILABLE[recipe])(return_reason=True)
    return bool(available), reason or ""


def te_eligible(module: nn.Module, name: str) -> bool:
    """A layer float8 would convert (``float8.float8_eligible``) whose dimensions are also multiples of 32:
    ``low_precision.eligible_linear`` at 32 (a multiple of float8's 16)."""
    return eligible_linear(module, name, _ALIGNMENT)


def apply_te_linears(model: nn.Module) -> int:
    """Swap ``model``'s eligible linear layers for Transformer Engine's, in place, keeping their weights
    (the same names: ``weight``, ``bias``). Call before wrapping and compiling. Returns how many."""
    te = _te()
    if te is None:
        raise ImportError("Transformer Engine is not installed here")
    swaps = [(name, module) for name, module in model.named_modules() if te_eligible(module, name)]
    for name, module in swaps:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        weight = module.weight
        replacement = te.Linear(
            module.in_features,
            module.out_features,
            bias=module.bias is not None,
            params_dtype=weight.dtype,
            device=weight.device,
        )
        if not weight.is_meta:
            with torch.no_grad():
                replacement.weight.copy_(weight)
                if module.bias is not None:
                    replacement.bias.copy_(module.bias)
        setattr(parent, child, replacement)
    return len(swaps)


def te_autocast(requested: str) -> Callable[[], contextlib.AbstractContextManager]:
    """A factory of the context each forward pass runs under: Transformer Engine's autocast with the
    format's recipe. The module lookup and the recipe are made once, here, not on every forward."""
    te = _te()
    if te is None:
        return contextlib.nullcontext
    recipes = importlib.import_module("transformer_engine.common.recipe")
    recipe = getattr(recipes, BLOCK_SCALED_RECIPES[requested])()
    return functools.partial(te.autocast, enabled=True, recipe=recipe)
