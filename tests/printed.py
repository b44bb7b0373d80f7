"""Comparing a computed number with one a seed prints."""

from __future__ import annotations

from decimal import Decimal


def unit(printed: str) -> float:
    """The value of one unit in the last printed digit: '30.93' -> 0.01,
    '4.74E+14' -> 1e12, '84631' -> 1, '891,792,891,914,752' -> 1."""
    text = printed.replace(",", "").replace("%", "").strip()
    return float(Decimal(1).scaleb(Decimal(text).as_tuple().exponent))


def agrees(computed: float, printed: str) -> bool:
    """True when ``computed`` is what the seed printed, to its last digit
    (rounded or truncated: within one unit of that digit)."""
    value = float(printed.replace(",", "").replace("%", ""))
    return abs(computed - value) < unit(printed)
