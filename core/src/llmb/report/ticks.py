"""Tick labels as plain numbers (``6,000``, ``0.5``), never matplotlib's mathtext.

matplotlib's log-axis formatters write ``$\\mathdefault{6\\times10^{3}}$``, and the report draws every
text with ``text.parse_math`` off (labels come from logs, and a ``$`` in them must not start the math
parser), so the page showed that source text. ``plain_ticks`` replaces the number formatters of both
axes, major and minor ticks: a log axis still labels the ticks matplotlib's formatter would (every
decade, and the minor ticks where the axis spans little), written as plain numbers with thousands
separators; a linear axis writes its ticks in full, with the decimals they need and no offset or
scientific notation. Labels a plot set itself (the GPU counts, percentages) are kept.

Imported only by the functions that draw, as matplotlib is.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable

from matplotlib.ticker import Formatter, LogFormatter, ScalarFormatter

MAX_DECIMALS = 12


def decimals(values: Iterable[float]) -> int:
    """The fewest decimals that write every one of ``values`` exactly (to a part in a million of the
    smallest gap between them, or of the value when there is one)."""
    finite = sorted({v for v in values if math.isfinite(v)})
    if not finite:
        return 0
    gaps = [b - a for a, b in itertools.pairwise(finite)]
    scale = min(gaps) if gaps else (abs(finite[0]) or 1.0)
    for count in range(MAX_DECIMALS + 1):
        if all(abs(round(v, count) - v) <= 1e-6 * scale for v in finite):
            return count
    return MAX_DECIMALS


def plain_number(value: float, places: int) -> str:
    """``6,000``, ``0.25``, ``-1,500``: thousands separators, ``places`` decimals, an ASCII minus."""
    if round(value, places) == 0:
        value = 0.0  # never "-0.0"
    return f"{value:,.{places}f}"


class PlainLogFormatter(Formatter):
    """Labels the ticks ``chooser`` (matplotlib's formatter of a log axis) labels, as plain numbers."""

    def __init__(self, chooser: LogFormatter) -> None:
        self.chooser = chooser

    def set_axis(self, axis) -> None:
        super().set_axis(axis)
        self.chooser.set_axis(axis)

    def set_locs(self, locs) -> None:
        super().set_locs(locs)
        self.chooser.set_locs(locs)

    def __call__(self, x, pos=None) -> str:
        if not self.chooser(x, pos):
            return ""
        return plain_number(x, decimals([x]))


class PlainLinearFormatter(Formatter):
    """Every tick of a linear axis in full: as many decimals as the ticks need, alike for all of them."""

    def __init__(self) -> None:
        self.places = 0

    def set_locs(self, locs) -> None:
        super().set_locs(locs)
        self.places = decimals(locs)

    def __call__(self, x, pos=None) -> str:
        return plain_number(x, self.places)


def plain_ticks(axes) -> None:
    """Plain-number formatters for the major and minor ticks of both axes of ``axes``."""
    for axis in (axes.xaxis, axes.yaxis):
        for get, put in (
            (axis.get_major_formatter, axis.set_major_formatter),
            (axis.get_minor_formatter, axis.set_minor_formatter),
        ):
            current = get()
            if isinstance(current, LogFormatter):
                put(PlainLogFormatter(current))
            elif isinstance(current, ScalarFormatter):
                put(PlainLinearFormatter())
