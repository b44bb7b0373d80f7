"""How a number is shown to a reader: one function every table, summary and report uses.

``figure(value, decimals)`` gives ``decimals`` decimals with thousands separators, but never fewer than
three significant digits: a CPU proxy's 0.00467 TFLOP/s/GPU stays 0.00467 (not 0.00), a 12.3 ms step
stays 12.3 (not 12). JSON and CSV carry the values themselves, not these strings.
"""

from __future__ import annotations

import math

SIGNIFICANT = 3


def figure(value: float | None, decimals: int = 2, suffix: str = "") -> str:
    """``value`` as text (``-`` for None, NaN or infinity), with ``suffix`` after it."""
    if value is None or not math.isfinite(value):
        return "-"
    if value:
        decimals = max(decimals, SIGNIFICANT - 1 - math.floor(math.log10(abs(value))))
    return f"{value:,.{decimals}f}{suffix}"


def signed_pct(value: float | None, decimals: int = 1) -> str:
    """``+4.2%`` / ``-0.5%``; ``-`` for None."""
    if value is None or not math.isfinite(value):
        return "-"
    text = figure(abs(value), decimals)
    return f"{'-' if value < 0 else '+'}{text}%"


def byte_size(count: int | float) -> str:
    """A file size in the largest decimal unit (B, kB, MB, GB, TB) that keeps it at least 1, one
    decimal: ``812 B``, ``1.5 kB``, ``248.0 MB``. An archive of 31 kB no longer reads "0.0 MB"."""
    value, unit = float(count), "B"
    for larger in ("kB", "MB", "GB", "TB"):
        if abs(value) < 1000:
            break
        value, unit = value / 1000, larger
    return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 job``, ``2 jobs``, ``1,204 comparisons``: a count and its noun in the number it takes."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"
