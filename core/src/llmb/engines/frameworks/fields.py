"""The configuration fields ``--framework-arg PATH=VALUE`` may set, and the check of each value.

A production framework's recipe object is a tree: Megatron-Bridge's ``ConfigContainer`` of dataclasses,
NeMo 2's ``run.Partial`` of fiddle ``Config`` objects. ``walk`` lists its leaves, each with the kind of
value it takes (``bool``, ``int``, ``float``, ``str``, ``choice`` of the enum's or Literal's values,
optionally ``null``), read from the real classes' type annotations. It imports no framework: it runs
inside the frameworks' own Python, where ``tests/frameworks/field_catalogue.py`` writes the catalogue
llmb ships (``llmb/data/framework_fields.json``: the fields of every recipe llmb runs, present in every
framework version the contract tests check), and the contract tests rebuild it from the real frameworks
and compare. ``check`` validates a ``--framework-arg`` against that catalogue at submission, before
anything is written.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import json
import math
import re
import typing
from functools import cache
from typing import Any

from llmb.errors import UsageError

CATALOGUE = "framework_fields.json"
MAX_DEPTH = 6
_SCALARS = {bool: "bool", int: "int", float: "float", str: "str"}
# A number's value: ASCII digits (int() and float() read other scripts' digits: '١٢' is 12), at most
# MAX_NUMBER_CHARS characters, finite (no NaN or Infinity: run.json is strict JSON), |x| <= 2^53 (every
# integer up to it is exact in the JSON readers of every language), and not below a field's least value.
MAX_NUMBER_CHARS = 40
MAX_MAGNITUDE = 2**53
_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
# Lightning's fields that take -1 as "no limit" / "all": no least value by name.
_NEGATIVE_SENTINEL = frozenset({"num_sanity_val_steps"})


def least_value(path: str) -> int | None:
    """The least value a numeric field takes, by its name: 1 for the parallel and batch sizes and
    ``train_iters``; 0 for the other iteration counts, sizes, layer counts and ``num_*`` counts; None
    (no bound but the magnitude) otherwise."""
    leaf = path.rsplit(".", 1)[-1]
    if leaf in _NEGATIVE_SENTINEL:
        return None
    if leaf.endswith(("_parallel_size", "_batch_size")) or leaf == "train_iters":
        return 1
    if leaf.endswith(("_iters", "_size", "_layers")) or leaf.startswith("num_"):
        return 0
    return None


def _number(raw: str, kind_type: str, path: str) -> int | float:
    """``raw`` as the int or float a field of ``kind_type`` takes; ValueError when it is none."""
    if len(raw) > MAX_NUMBER_CHARS or not (_INT if kind_type == "int" else _FLOAT).fullmatch(raw):
        raise ValueError
    value = int(raw) if kind_type == "int" else float(raw)
    least = least_value(path)
    if not math.isfinite(value) or abs(value) > MAX_MAGNITUDE:
        raise ValueError
    if least is not None and value < least:
        raise ValueError
    return value


def _shown(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else f"{text[:16]}...{text[-8:]} ({len(text):,} characters)"


def _kind_of(hint: Any) -> dict[str, Any] | None:
    """``{"type": ..., "null": bool, "choices": [...]}`` for a plain-valued annotation, None otherwise."""
    null = False
    origin = typing.get_origin(hint)
    if origin is typing.Union or type(hint).__name__ == "UnionType":
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        null = len(args) < len(typing.get_args(hint))
        kinds = [_kind_of(a) for a in args]
        if len(kinds) != 1 or kinds[0] is None:
            # int | float takes a number; str | int ... is not one plain kind
            if {k and k["type"] for k in kinds} == {"int", "float"}:
                return {"type": "float", "null": null}
            return None
        return {**kinds[0], "null": null or kinds[0].get("null", False)}
    if origin is typing.Literal:
        values = typing.get_args(hint)
        if all(isinstance(v, (str, int, bool)) for v in values):
            return {"type": "choice", "choices": [v for v in values], "null": None in values}
        return None
    if isinstance(hint, type) and issubclass(hint, enum.Enum):  # set as the member itself
        return {
            "type": "choice",
            "choices": [m.name for m in hint],
            "null": False,
            "enum": f"{hint.__module__}:{hint.__qualname__}",
        }
    if hint in _SCALARS:
        return {"type": _SCALARS[hint], "null": False}
    return None


def _children(obj: Any) -> list[tuple[str, Any, Any]]:
    """(name, value, annotation) of an object's fields: a dataclass's, or a fiddle Config's arguments
    (those set, and the target's other parameters with their defaults)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        try:
            hints = typing.get_type_hints(type(obj))
        except Exception:  # noqa: BLE001 - an annotation that does not resolve: that field's kind is unknown
            hints = {}
        return [
            (f.name, getattr(obj, f.name, None), hints.get(f.name))
            for f in dataclasses.fields(obj)
            if not f.name.startswith("_")
        ]
    target = getattr(obj, "__fn_or_cls__", None)
    if target is None:
        return []
    import inspect

    arguments = dict(getattr(obj, "__arguments__", {}))
    try:
        signature = inspect.signature(target)
        hints = typing.get_type_hints(target.__init__ if isinstance(target, type) else target)
    except Exception:  # noqa: BLE001
        signature, hints = None, {}
    out = []
    for name, parameter in signature.parameters.items() if signature else ():
        if name in ("self", "args", "kwargs") or name.startswith("_"):
            continue
        default = None if parameter.default is inspect.Parameter.empty else parameter.default
        out.append((name, arguments.pop(name, default), hints.get(name)))
    out += [(name, value, None) for name, value in arguments.items() if not name.startswith("_")]
    return out


def walk(root: Any, prefix: str = "", depth: int = 0) -> dict[str, dict[str, Any]]:
    """Every plain-valued leaf under ``root``: ``{"train.train_iters": {"type": "int", "null": False}, ...}``."""
    found: dict[str, dict[str, Any]] = {}
    if depth > MAX_DEPTH:
        return found
    for name, value, hint in _children(root):
        path = f"{prefix}{name}"
        if _children(value):
            found.update(walk(value, path + ".", depth + 1))
            continue
        kind = _kind_of(hint) if hint is not None else None
        if kind is None and hint is None and type(value) in _SCALARS:
            kind = {"type": _SCALARS[type(value)], "null": False}
        if kind is not None:
            found[path] = kind
    return found


@cache
def catalogue() -> dict[str, dict[str, dict[str, Any]]]:
    """The shipped catalogue: framework name (``megatron_bridge``, ``nemo2``) -> path -> kind."""
    from llmb.paths import packaged_data

    with open(packaged_data(CATALOGUE), encoding="utf-8") as handle:
        return json.load(handle)["fields"]


def _convert(path: str, text: str, kind: dict[str, Any]) -> Any:
    raw = text.strip()
    if kind.get("null") and raw.lower() in ("null", "none"):
        return None
    kind_type = kind["type"]
    try:
        if kind_type == "bool":
            lowered = raw.lower()
            if lowered in ("true", "1", "yes", "on"):
                return True
            if lowered in ("false", "0", "no", "off"):
                return False
            raise ValueError
        if kind_type in ("int", "float"):
            return _number(raw, kind_type, path)
        if kind_type == "choice":
            for choice in kind["choices"]:
                if raw == str(choice) or (
                    isinstance(choice, str) and raw.lower() == choice.lower()
                ):
                    # an enum's member is set as itself (llmb.engines.frameworks.overrides builds the ref)
                    return {"ref": f"{kind['enum']}.{choice}"} if kind.get("enum") else choice
            raise ValueError
        return raw
    except ValueError:
        least = least_value(path)
        span = f" from {-MAX_MAGNITUDE if least is None else least:,} to {MAX_MAGNITUDE:,} (ASCII digits)"
        expected = {
            "bool": "true or false",
            "int": "a whole number" + span,
            "float": "a finite number" + span,
            "choice": "one of " + ", ".join(map(str, kind.get("choices", ()))),
        }[kind_type]
        raise UsageError(
            f"--framework-arg {path}={_shown(text)}: {path} takes {expected}"
            + (" or null" if kind.get("null") else "")
            + "."
        ) from None


def check(
    items: tuple[str, ...], framework: str, catalogue_of: dict[str, dict[str, Any]] | None = None
) -> tuple[tuple[str, Any], ...]:
    """``--framework-arg PATH=VALUE`` items as ``(path, value)`` for ``framework``; UsageError for an
    unknown path (with the closest known ones) or a value of the wrong kind."""
    if not items:
        return ()
    fields = catalogue_of if catalogue_of is not None else catalogue().get(framework)
    if not fields:
        raise UsageError(
            f"--framework-arg sets the production framework's configuration; this run's engine "
            f"({framework}) has none (the torch engine: use --set for the recipe's fields)."
        )
    out: dict[str, Any] = {}
    for item in items:
        path, sep, text = item.partition("=")
        path = path.strip()
        if not sep or not path:
            raise UsageError(
                f"--framework-arg {item!r}: expected PATH=VALUE, e.g. model.recompute_granularity=full."
            )
        kind = fields.get(path)
        if kind is None:
            close = difflib.get_close_matches(path, list(fields), n=5, cutoff=0.6)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise UsageError(
                f"--framework-arg {path}: not a plain-valued field of the {framework} configuration "
                f"llmb runs.{hint} (docs/production-frameworks.md lists where the fields come from)"
            )
        out[path] = _convert(path, text, kind)
    return tuple(out.items())
