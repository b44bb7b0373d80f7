"""Whether a parallel layout is possible at a GPU count.

DP and GA are derived, never read from a table:

    DP = GPUs / (TP * PP * CP)        GA = GBS / (MBS * DP)

and both must be whole numbers with GA >= 1. Expert layers additionally
split each pipeline stage's GPUs into EP * ETP groups.

Bounds that need the GPU count or the layout: GBS at the run's GPU count is at
most ``MAX_GBS`` (2^24; ``--set gbs=GPUs*N`` is bounded per GPU when read), and
recompute and offload layers are at most the run's layers.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Protocol

# 16,777,216 samples per step (llmb.recipes.overrides reads --set gbs within it too)
MAX_GBS = 1 << 24


class LayoutLike(Protocol):
    tp: int
    pp: int
    cp: int
    ep: int | None
    etp: int | None
    mbs: int


def _gbs_at(layout: object, gpus: int) -> Fraction:
    gbs = layout.gbs
    return gbs.at(gpus) if hasattr(gbs, "at") else Fraction(gbs)


def derive(
    layout: LayoutLike, gpus: int, gbs: Fraction | None = None
) -> tuple[Fraction, Fraction, Fraction]:
    """(DP, GBS, GA) at ``gpus``, exact, possibly fractional."""
    gbs = _gbs_at(layout, gpus) if gbs is None else Fraction(gbs)
    dp = Fraction(gpus, layout.tp * layout.pp * layout.cp)
    ga = gbs / (layout.mbs * dp) if dp else Fraction(0)
    return dp, gbs, ga


def _fmt(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):.4g}"


def check_layout(layout: LayoutLike, gpus: int, gbs: Fraction | None = None) -> str | None:
    """A sentence saying why ``layout`` is impossible at ``gpus``, or None."""
    mp = layout.tp * layout.pp * layout.cp
    dp, gbs, ga = derive(layout, gpus, gbs)
    if gbs > MAX_GBS:
        return f"GBS would be {_fmt(gbs)} at {gpus} GPUs, more than the {MAX_GBS:,} llmb accepts"
    layers = getattr(layout, "layers", None)
    for name in ("recompute_layers", "offload_layers"):
        count = getattr(layout, name, 0) or 0
        if layers is not None and count > layers:
            return f"{name} {count} is more than the {layers} layers (valid: 0 to {layers})"
    if dp.denominator != 1 or dp < 1:
        return (
            f"TP*PP*CP = {layout.tp}*{layout.pp}*{layout.cp} = {mp} does not divide {gpus} GPUs "
            f"(DP would be {_fmt(dp)})"
        )
    if gbs.denominator != 1:
        return f"GBS would be {_fmt(gbs)}, not a whole number"
    if gbs < layout.mbs * dp:
        return (
            f"GBS {_fmt(gbs)} is smaller than MBS*DP = {layout.mbs}*{_fmt(dp)} = {_fmt(layout.mbs * dp)} "
            f"(GA would be {_fmt(ga)})"
        )
    if ga.denominator != 1:
        return (
            f"GBS {_fmt(gbs)} is not divisible by MBS*DP = {layout.mbs}*{_fmt(dp)} = "
            f"{_fmt(layout.mbs * dp)} (GA would be {_fmt(ga)})"
        )
    ep, etp = layout.ep or 1, layout.etp or 1
    if (ep > 1 or etp > 1) and (gpus % layout.pp or (gpus // layout.pp) % (ep * etp)):
        return (
            f"EP*ETP = {ep}*{etp} = {ep * etp} does not divide the {_fmt(Fraction(gpus, layout.pp))} "
            f"GPUs of each pipeline stage"
        )
    return None
