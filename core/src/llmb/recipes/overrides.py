"""``--set key=value``: the recipe fields a user may override, their types and their ranges.

Every value is checked here, when the command line is read, before any derived value (DP, GA, FLOPs,
memory, a time limit) is computed from it: ASCII digits only, at most ``MAX_DIGITS`` of them (``int()``
of thousands of digits is slow and then refused by Python itself), and inside the field's range:

    tp pp cp ep etp      1 .. 131,072 (the most GPUs a run may have; their product must divide --gpus)
    vp                   1 .. 1,024
    mbs                  1 .. 4,096
    gbs                  1 .. 16,777,216 (2^24), or GPUs*N with N 1 .. 16,777,216, or GPUs/N with
                         N 1 .. 131,072; at the run's GPU count GBS stays within 1 .. 2^24 (validity.py)
    seq_len              1 .. 1,048,576 (2^20)
    layers               1 .. 1,024 (and at most the model's, checked when the recipe resolves)
    steps                1 .. 1,000,000
    recompute_layers     0 .. 1,024 (and at most the run's layers, checked when the recipe resolves)
    offload_layers       0 .. 1,024 (likewise)

A value outside its range is a UsageError naming the field, the value (shortened when long) and the range.
"""

from __future__ import annotations

from collections.abc import Callable

from llmb.errors import UsageError
from llmb.recipes.gpus import MAX_GPUS
from llmb.recipes.scale_expr import ScaleExpr, shorten, whole_number
from llmb.recipes.validity import MAX_GBS

# a parallel size beyond the most GPUs a run may have could never divide them
MAX_PARALLEL = MAX_GPUS
MAX_VP = 1024
MAX_MBS = 4096
MAX_SEQ_LEN = 1 << 20  # 1,048,576 tokens
MAX_LAYERS = 1024  # the largest model here has 126
MAX_STEPS = 1_000_000


def _ranged(low: int, high: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        return whole_number(value, low, high)

    parse.range = f"{low:,} to {high:,}"  # type: ignore[attr-defined]
    return parse


def _optional(low: int, high: int) -> Callable[[str], int | None]:
    ranged = _ranged(low, high)

    def parse(value: str) -> int | None:
        if value.strip().lower() in ("na", "none", "null"):
            return None
        try:
            return ranged(value)
        except ValueError as exc:
            raise ValueError(f"{exc}, or NA") from None

    parse.range = f"{low:,} to {high:,}, or NA"  # type: ignore[attr-defined]
    return parse


def _boolean(value: str) -> bool:
    text = value.strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


_GBS_RANGE = f"1 to {MAX_GBS:,}, GPUs*N (N 1 to {MAX_GBS:,}) or GPUs/N (N 1 to {MAX_PARALLEL:,})"


def _gbs(value: str) -> ScaleExpr:
    try:
        expr = ScaleExpr.parse(value)
    except ValueError as exc:
        why = "" if str(exc).startswith("not a scale formula") else f" ({exc})"
        raise ValueError(f"must be {_GBS_RANGE}{why}") from None
    coefficient = expr.coefficient
    if coefficient <= 0 or coefficient > MAX_GBS or coefficient.denominator > MAX_PARALLEL:
        raise ValueError(f"must be {_GBS_RANGE}")
    return expr


_gbs.range = _GBS_RANGE  # type: ignore[attr-defined]


SETTABLE: dict[str, tuple[Callable[[str], object], str]] = {
    "tp": (_ranged(1, MAX_PARALLEL), "tensor parallel size"),
    "pp": (_ranged(1, MAX_PARALLEL), "pipeline parallel size"),
    "cp": (_ranged(1, MAX_PARALLEL), "context parallel size"),
    "ep": (_optional(1, MAX_PARALLEL), "expert parallel size (NA for dense models)"),
    "etp": (_optional(1, MAX_PARALLEL), "expert tensor parallel size (NA for dense models)"),
    "vp": (_optional(1, MAX_VP), "virtual pipeline stages (NA for none)"),
    "mbs": (_ranged(1, MAX_MBS), "micro-batch size"),
    "gbs": (_gbs, "global batch size: a number, or GPUs*N / GPUs/N"),
    "seq_len": (_ranged(1, MAX_SEQ_LEN), "sequence length"),
    "layers": (_ranged(1, MAX_LAYERS), "number of layers (a proxy when fewer than the model's)"),
    "fsdp": (_boolean, "Megatron FSDP"),
    "cuda_graphs": (_boolean, "CUDA graphs"),
    "steps": (_ranged(1, MAX_STEPS), "training steps"),
    "recompute_layers": (
        _ranged(0, MAX_LAYERS),
        "layers with full activation recompute (memory estimate)",
    ),
    "offload_layers": (
        _ranged(0, MAX_LAYERS),
        "layers whose activations go to CPU (memory estimate)",
    ),
}
DERIVED = {
    "dp": "DP is derived as GPUs/(TP*PP*CP); set tp, pp or cp instead",
    "ga": "GA is derived as GBS/(MBS*DP); set gbs or mbs instead",
    "nodes": "nodes follow from --gpus and the GPUs per node; use --gpus",
    "gpus": "use --gpus",
}


def valid_range(key: str) -> str:
    """The values ``--set key=`` takes, in words (``1 to 1,000,000``)."""
    parse = SETTABLE[key][0]
    return getattr(parse, "range", "true or false")


def parse_overrides(items: tuple[str, ...] | list[str]) -> dict[str, object]:
    """``["mbs=1", "fsdp=true"]`` -> ``{"mbs": 1, "fsdp": True}``; UsageError otherwise."""
    valid = ", ".join(SETTABLE)
    out: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().lower().replace("-", "_")
        if not sep or not key or not value.strip():
            raise UsageError(
                f"malformed --set {shorten(item)}: expected key=value, e.g. --set mbs=1. "
                f"Valid keys: {valid}."
            )
        if key in DERIVED:
            raise UsageError(f"cannot --set {key}: {DERIVED[key]}.")
        if key not in SETTABLE:
            raise UsageError(f"unknown --set key {shorten(key)}. Valid keys: {valid}.")
        parse, meaning = SETTABLE[key]
        try:
            out[key] = parse(value.strip())
        except ValueError as exc:
            reason = str(exc) if "must" in str(exc) else f"must be {valid_range(key)}"
            raise UsageError(f"bad --set {key}={shorten(value)} ({meaning}): {reason}.") from None
    return out
