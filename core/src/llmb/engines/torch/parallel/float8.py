"""FP8 training for the torch engine through torchao's float8 linear layers.

A recipe row in ``fp8`` is what the production frameworks call FP8 current
scaling (Megatron-Bridge's ``fp8_cs``): each tensor scaled by its own
current absolute maximum. torchao's ``tensorwise`` recipe is exactly that
(dynamic per-tensor scales, e4m3 forward, e5m2 gradients); its ``rowwise``
recipe scales per row instead. ``convert_to_float8_training`` swaps each
eligible ``nn.Linear`` for a ``Float8Linear`` that casts its operands to
float8 and multiplies with ``torch._scaled_mm`` (SM 8.9+: Ada, Hopper,
Blackwell), keeping the master weights in their own dtype.

Not converted: the output layer and the MoE router (kept in bf16 as the
production recipes keep them), and any linear whose dimensions are not
multiples of 16 (float8 GEMMs need them). On a CPU, torchao's ``emulate``
mode does the same casts and computes the products in float32: a test of
the numerics, not a speed-up, so the engine uses it only when asked.

NVFP4 and MXFP8 need Transformer Engine's kernels: where it is installed and
supports the format on the GPU, its linear layers compute them
(``transformer_engine.py``); elsewhere those rows compute in bfloat16, saying
why (see ``choose_precision``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import warnings
from dataclasses import dataclass

import torch
from torch import nn

from llmb.engines.torch.parallel.low_precision import eligible_linear
from llmb.runs.runspec import BLOCK_SCALED

__all__ = [
    "FLOAT8_RECIPES",
    "Precision",
    "apply_float8",
    "choose_precision",
    "float8_eligible",
    "record_precision",
]

# The recipe's precision name -> torchao's float8 recipe (fp8 is current scaling: tensorwise).
FLOAT8_RECIPES = {
    "fp8": "tensorwise",
    "fp8_cs": "tensorwise",
    "fp8_tensorwise": "tensorwise",
    "fp8_rowwise": "rowwise",
}
_ALIGNMENT = 16  # float8 GEMMs' dimensions


@dataclass(frozen=True)
class Precision:
    """What the engine computes in, as decided for a run.

    ``name`` is what the log line and ``recipe.json`` record (e.g.
    ``fp8-tensorwise``, ``bfloat16``); ``float8`` the torchao recipe to
    convert with, or None; ``emulate`` whether float8 is emulated (CPU);
    ``warning`` why the recipe's precision is not what runs, or None.
    """

    name: str
    float8: str | None = None
    emulate: bool = False
    warning: str | None = None
    te: str | None = None  # the block-scaled format Transformer Engine's layers compute, or None

    def lines(self) -> list[str]:
        """The run log's lines for it: the precision used, and the warning when there is one."""
        return [
            f"[llmb] precision: {self.name}",
            *([f"[llmb] warning: {self.warning}."] if self.warning else []),
        ]


def _torchao_float8():
    """torchao's float8 module, or None when torchao is not installed.
    Its import logs a warning for each CUDA-only kernel library a CPU build cannot load, and torch warns
    that torchao still uses ``torch.jit.script_method``: both muted (nothing the user can act on)."""
    log = logging.getLogger("torchao")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore",
                message=r".*torch\.jit\.script_method.* is deprecated",
                category=DeprecationWarning,
            )
            import torchao.float8 as float8
    except ImportError:
        return None
    finally:
        log.setLevel(level)
    return float8


def choose_precision(
    requested: str,
    device: torch.device,
    compute_dtype: str,
    emulate_on_cpu: bool = False,
    tensor_parallel: int = 1,
) -> Precision:
    """The precision a run of a ``requested`` recipe (bf16, fp8, nvfp4, ...) computes in on ``device``.

    ``compute_dtype`` is the engine's high precision there (bfloat16 on GPU,
    float32 on CPU). FP8 rows get torchao float8 on a GPU of SM 8.9 or
    newer; on CPU only with ``emulate_on_cpu`` (tests). Everything else
    computes in ``compute_dtype``; ``warning`` says why when the recipe asked
    for a lower precision (the run's log line, beside the plan's own warning).
    """
    recipe = FLOAT8_RECIPES.get(requested)
    fallback = f"the recipe's {requested} is computed in {compute_dtype} by the torch engine on {device.type}"
    if recipe is None:
        if requested in BLOCK_SCALED:  # Transformer Engine's formats
            from llmb.engines.torch.parallel.transformer_engine import availability

            available, reason = availability(requested, device, tensor_parallel)
            if available:
                return Precision(f"{requested}-transformer-engine", te=requested)
            return Precision(compute_dtype, warning=fallback + f" ({reason})")
        return Precision(compute_dtype)
    # decided without importing torchao (a second of start-up)
    if device.type != "cuda" and not emulate_on_cpu:
        return Precision(
            compute_dtype, warning=fallback + " (float8 on CPU is an emulation for tests only)"
        )
    if _torchao_float8() is None:
        return Precision(
            compute_dtype, warning=fallback + " (torchao is not installed: pip install 'llmb[fp8]')"
        )
    if device.type == "cuda":
        capability = torch.cuda.get_device_capability(device)
        if capability < (8, 9):
            return Precision(
                compute_dtype,
                warning=fallback + f" (float8 matrix products need SM 8.9 or newer; "
                f"this GPU is SM {capability[0]}.{capability[1]})",
            )
        return Precision(f"fp8-{recipe}", float8=recipe)
    return Precision(f"fp8-{recipe}-emulated", float8=recipe, emulate=True)


def float8_eligible(module: nn.Module, name: str) -> bool:
    """Whether ``convert_to_float8_training`` may swap this module: a linear layer outside the
    output layer and the router, with both dimensions multiples of 16."""
    return eligible_linear(module, name, _ALIGNMENT)


def apply_float8(model: nn.Module, recipe: str, emulate: bool = False) -> int:
    """Convert ``model``'s eligible linear layers (``float8_eligible``) to torchao float8 training, in place.

    Contract: ``recipe`` is ``tensorwise`` or ``rowwise`` (``FLOAT8_RECIPES``'
    values); ``emulate`` computes the float8 products in float32 (CPU). Call it
    on the whole model before pipeline stages, FSDP / DDP wrapping and
    ``torch.compile``, and after the weights hold their values (the layers
    keep their parameters). Returns the number of layers converted; raises
    ValueError for an unknown recipe and ImportError without torchao.
    """
    if recipe not in set(FLOAT8_RECIPES.values()):
        raise ValueError(
            f"unknown float8 recipe {recipe!r}; known: {', '.join(sorted(set(FLOAT8_RECIPES.values())))}"
        )
    float8 = _torchao_float8()
    if float8 is None:
        raise ImportError("float8 training needs torchao: pip install 'llmb[fp8]'")
    config = dataclasses.replace(
        float8.Float8LinearConfig.from_recipe_name(recipe), emulate=emulate
    )
    float8.convert_to_float8_training(model, module_filter_fn=float8_eligible, config=config)
    return sum(isinstance(m, float8.float8_linear.Float8Linear) for m in model.modules())


def record_precision(run_dir: str, precision: Precision) -> None:
    """Write the precision a run computes in into its ``recipe.json`` (``compute_precision``), beside
    the ``compute_dtype`` planned at submission (rank 0 calls it once the model is built)."""
    from llmb.runs import experiment

    path = os.path.join(run_dir, experiment.RECIPE_FILE)
    data = experiment.read_json(path)
    if data is not None:
        data["compute_precision"] = precision.name
        with contextlib.suppress(OSError):
            experiment.write_json(path, data)
