"""``--set key=value``: the recipe fields a user may override, and their types."""

from __future__ import annotations

from collections.abc import Callable

from llmb.errors import UsageError
from llmb.recipes.scale_expr import ScaleExpr


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError("must be 1 or more")
    return number


def _non_negative(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError("must be 0 or more")
    return number


def _optional_positive(value: str) -> int | None:
    return None if value.strip().lower() in ("na", "none", "null") else _positive(value)


def _boolean(value: str) -> bool:
    text = value.strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def _gbs(value: str) -> ScaleExpr:
    expr = ScaleExpr.parse(value)
    if expr.coefficient <= 0:
        raise ValueError("must be positive")
    return expr


SETTABLE: dict[str, tuple[Callable[[str], object], str]] = {
    "tp": (_positive, "tensor parallel size"),
    "pp": (_positive, "pipeline parallel size"),
    "cp": (_positive, "context parallel size"),
    "ep": (_optional_positive, "expert parallel size (NA for dense models)"),
    "etp": (_optional_positive, "expert tensor parallel size (NA for dense models)"),
    "vp": (_optional_positive, "virtual pipeline stages (NA for none)"),
    "mbs": (_positive, "micro-batch size"),
    "gbs": (_gbs, "global batch size: a number, or GPUs*N / GPUs/N"),
    "seq_len": (_positive, "sequence length"),
    "layers": (_positive, "number of layers (a proxy when fewer than the model's)"),
    "fsdp": (_boolean, "Megatron FSDP"),
    "cuda_graphs": (_boolean, "CUDA graphs"),
    "steps": (_positive, "training steps"),
    "recompute_layers": (_non_negative, "layers with full activation recompute (memory estimate)"),
    "offload_layers": (_non_negative, "layers whose activations go to CPU (memory estimate)"),
}
DERIVED = {
    "dp": "DP is derived as GPUs/(TP*PP*CP); set tp, pp or cp instead",
    "ga": "GA is derived as GBS/(MBS*DP); set gbs or mbs instead",
    "nodes": "nodes follow from --gpus and the GPUs per node; use --gpus",
    "gpus": "use --gpus",
}


def parse_overrides(items: tuple[str, ...] | list[str]) -> dict[str, object]:
    """``["mbs=1", "fsdp=true"]`` -> ``{"mbs": 1, "fsdp": True}``; UsageError otherwise."""
    valid = ", ".join(SETTABLE)
    out: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().lower().replace("-", "_")
        if not sep or not key or not value.strip():
            raise UsageError(
                f"malformed --set {item!r}: expected key=value, e.g. --set mbs=1. Valid keys: {valid}."
            )
        if key in DERIVED:
            raise UsageError(f"cannot --set {key}: {DERIVED[key]}.")
        if key not in SETTABLE:
            raise UsageError(f"unknown --set key {key!r}. Valid keys: {valid}.")
        parse, meaning = SETTABLE[key]
        try:
            out[key] = parse(value.strip())
        except ValueError as exc:
            reason = str(exc) if "must" in str(exc) else "not a valid value"
            raise UsageError(f"bad --set {key}={value!r} ({meaning}): {reason}.") from None
    return out
