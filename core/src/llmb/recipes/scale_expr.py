"""The seeds' scale formulas: ``GPUs``, ``GPUs*16``, ``GPUs/2`` or a number.

The Megatron-Bridge seed writes DP, GBS and GA as formulas of the GPU count
(``GPUs/2``); the NeMo 2 seeds print numbers. Both become a ``ScaleExpr``:
``coefficient * GPUs`` or a constant, evaluated exactly with fractions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

_FORMULA = re.compile(r"^\s*GPUs\s*(?:([*/])\s*(\d+)\s*)?$", re.IGNORECASE)
_NUMBER = re.compile(r"^\s*(\d+)\s*$")


@dataclass(frozen=True)
class ScaleExpr:
    """``coefficient * GPUs`` when ``per_gpu``, else the constant ``coefficient``."""

    coefficient: Fraction
    per_gpu: bool
    text: str

    @classmethod
    def parse(cls, text: object) -> ScaleExpr:
        raw = str(text).strip()
        if m := _FORMULA.match(raw):
            op, num = m.groups()
            if op is None:
                coeff = Fraction(1)
            elif op == "*":
                coeff = Fraction(int(num))
            else:
                coeff = Fraction(1, int(num))
            return cls(coeff, True, raw)
        if m := _NUMBER.match(raw):
            return cls(Fraction(int(m.group(1))), False, raw)
        raise ValueError(
            f"not a scale formula: {raw!r} (expected GPUs, GPUs*N, GPUs/N or a number)"
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
