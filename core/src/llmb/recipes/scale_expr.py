"""The seeds' scale formulas: ``GPUs``, ``GPUs*16``, ``GPUs/2`` or a number.

The Megatron-Bridge seed writes DP, GBS and GA as formulas of the GPU count
(``GPUs/2``); the NeMo 2 seeds print numbers. Both become a ``ScaleExpr``:
``coefficient * GPUs`` or a constant, evaluated exactly with fractions.

Numbers are ASCII digits, at most ``MAX_DIGITS`` of them: Python's ``int()`` reads other scripts'
digits (``GPUs*١٦``), takes up to 4,300 digits (which then overflow any float they meet) and refuses
more with a message of its own. ``GPUs/0`` is a ValueError, like any other formula that is not one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

_FORMULA = re.compile(r"\s*GPUs\s*(?:([*/])\s*([0-9]+)\s*)?", re.IGNORECASE | re.ASCII)
_NUMBER = re.compile(r"\s*([0-9]+)\s*", re.ASCII)
_DIGITS = re.compile(r"[0-9]+", re.ASCII)
MAX_DIGITS = 18  # beyond any count llmb takes, and far below what makes int() slow


def shorten(text: object, limit: int = 40) -> str:
    """``repr(text)``, or its start and end with its length between when it is longer than ``limit``."""
    text = str(text)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:16]!r}...{text[-8:]!r} ({len(text):,} characters)"


def _int(digits: str) -> int:
    if len(digits) > MAX_DIGITS:
        raise ValueError(f"{shorten(digits)} has more than {MAX_DIGITS} digits")
    return int(digits)


def whole_number(text: str, low: int, high: int) -> int:
    """``text`` (ASCII digits, blanks around) as an int from ``low`` to ``high``; ValueError saying
    the range otherwise (never ``int()`` of a huge or non-ASCII digit string)."""
    digits = text.strip()
    number = None
    if len(digits) <= MAX_DIGITS and _DIGITS.fullmatch(digits):
        number = _int(digits)
    if number is None or not low <= number <= high:
        raise ValueError(f"must be a whole number from {low:,} to {high:,}")
    return number


@dataclass(frozen=True)
class ScaleExpr:
    """``coefficient * GPUs`` when ``per_gpu``, else the constant ``coefficient``."""

    coefficient: Fraction
    per_gpu: bool
    text: str

    @classmethod
    def parse(cls, text: object) -> ScaleExpr:
        raw = str(text).strip()
        if m := _FORMULA.fullmatch(raw):
            op, num = m.groups()
            if op is None:
                coeff = Fraction(1)
            elif op == "*":
                coeff = Fraction(_int(num))
            elif _int(num) == 0:
                raise ValueError(f"{shorten(raw)} divides by zero")
            else:
                coeff = Fraction(1, _int(num))
            return cls(coeff, True, raw)
        if m := _NUMBER.fullmatch(raw):
            return cls(Fraction(_int(m.group(1))), False, raw)
        raise ValueError(
            f"not a scale formula: {shorten(raw)} (expected GPUs, GPUs*N, GPUs/N or a number)"
        )

    @classmethod
    def per_gpu_of(cls, coefficient: Fraction) -> ScaleExpr:
        if coefficient.denominator == 1:
            text = "GPUs" if coefficient == 1 else f"GPUs*{coefficient.numerator}"
        elif coefficient.numerator == 1:
            text = f"GPUs/{coefficient.denominator}"
        else:
            text = f"GPUs*{coefficient.numerator}/{coefficient.denominator}"
        return cls(coefficient, True, text)

    @classmethod
    def constant(cls, value: int) -> ScaleExpr:
        return cls(Fraction(value), False, str(value))

    def at(self, gpus: int) -> Fraction:
        """The exact value at ``gpus`` GPUs (may be fractional: callers check)."""
        return self.coefficient * gpus if self.per_gpu else self.coefficient

    def __str__(self) -> str:
        return self.text
