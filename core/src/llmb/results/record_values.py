"""The values a run's records may hold, checked wherever a record is read.

A run's records are files anyone may have written or damaged (``recipe.json``, ``provenance.json``, an
experiment directory's name, the results database): a GPU count of 10^30, a sequence length of
1e308, ``true`` for a number, a 20-digit count in a name. Each reader of a record passes every field
through ``whole``, ``positive`` or ``text``: a value that is possible is returned, one that is not
gives None and a *problem*, in words that name the record, the field, the value and what would be
valid. The reader puts the problem among the run's doubts (``RunContext.doubts``): the run is marked,
its verdict withheld, and every command that reads it still ends normally. The bounds are the ones
``llmb plan --set`` accepts (``llmb.recipes.overrides``), so that what llmb can run it can read back.
"""

from __future__ import annotations

import math

from llmb.recipes.gpus import MAX_GPUS
from llmb.recipes.overrides import MAX_LAYERS, MAX_MBS, MAX_PARALLEL, MAX_SEQ_LEN, MAX_VP
from llmb.recipes.validity import MAX_GBS

# field -> (what a value is, smallest, largest)
WHOLE = {
    "gpus": ("a GPU count", 1, MAX_GPUS),
    "nodes": ("a node count", 1, MAX_GPUS),
    "gbs": ("a global batch size", 1, MAX_GBS),
    "mbs": ("a micro batch size", 1, MAX_MBS),
    "seq_len": ("a sequence length", 1, MAX_SEQ_LEN),
    "layers": ("a layer count", 1, MAX_LAYERS),
    "tp": ("a tensor parallel size", 1, MAX_PARALLEL),
    "pp": ("a pipeline parallel size", 1, MAX_PARALLEL),
    "cp": ("a context parallel size", 1, MAX_PARALLEL),
    "ep": ("an expert parallel size", 1, MAX_PARALLEL),
    "etp": ("an expert tensor parallel size", 1, MAX_PARALLEL),
    "vp": ("a virtual pipeline size", 1, MAX_VP),
}
MAX_FLOPS_PER_SAMPLE = 1e24  # a trillion-parameter model at a million tokens is about 6e21
MAX_TEXT = 256  # characters of a name, a type, a job id
MAX_SHOWN = 40  # characters of a bad value quoted in a problem


def shown(value) -> str:
    """A bad value as a problem quotes it: short, on one line."""
    try:
        if isinstance(value, float):
            words = f"{value:g}"
        elif isinstance(value, int) and not isinstance(value, bool):
            words = (
                str(value) if abs(value) < 10**MAX_SHOWN else f"a {len(str(value)):,}-digit number"
            )
        elif isinstance(value, str) and value.isdigit():
            words = value if len(value) <= MAX_SHOWN else f"a {len(value):,}-digit number"
        else:
            words = repr(value)
    except ValueError:  # an integer too long for str()
        words = "a number of thousands of digits"
    words = " ".join(words.split())
    return words if len(words) <= MAX_SHOWN else words[: MAX_SHOWN - 3] + "..."


def whole(field: str, value, where: str) -> tuple[int | None, str | None]:
    """``value`` as ``field``'s whole number (a JSON integer, an integral float, a string of digits),
    and None; or None and the problem. None stays None (the record does not say)."""
    if value is None:
        return None, None
    what, low, high = WHOLE[field]
    number: int | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value) if abs(value) < 1e18 else None
    elif isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 18:
        number = int(value.strip())
    if number is not None and low <= number <= high:
        return number, None
    return None, (
        f"{where} gives {field} {shown(value)}, which is not {what} (a whole number from {low:,} to "
        f"{high:,})"
    )


def positive(field: str, value, where: str, high: float) -> tuple[float | None, str | None]:
    """``value`` as a finite number above 0 and at most ``high``; or None and the problem."""
    if value is None:
        return None, None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value) if not isinstance(value, int) or abs(value) < 1e300 else math.inf
        if math.isfinite(number) and 0 < number <= high:
            return number, None
    return (
        None,
        f"{where} gives {field} {shown(value)}, which is not a number above 0 and at most {high:g}",
    )


def text(field: str, value, where: str) -> tuple[str | None, str | None]:
    """``value`` as a lower-cased name of at most ``MAX_TEXT`` printable characters; or None and the
    problem. A number is taken as its digits (a job id, a size written 8 for 8b is no size: it stays
    "8")."""
    if value is None:
        return None, None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None, f"{where} gives {field} {shown(value)}, which is not a name"
    words = str(value)
    if len(words) > MAX_TEXT or not words.isprintable():
        return None, (
            f"{where} gives a {field} of {len(words):,} characters or with control characters, which is "
            f"not a name (at most {MAX_TEXT} printable characters)"
        )
    return words.lower(), None
