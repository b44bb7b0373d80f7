"""Apply a framework configuration's ``overrides`` to the framework's recipe object.

``overrides`` is an ordered JSON mapping, exactly what the framework is told.
Keys are attribute paths from the recipe object; the last part says how:

    "train.train_iters": 50                    set the attribute
    "comm_overlap?": {...}                     set it only while it is None
    "trainer.callbacks+": [{...}, ...]         extend the list with these entries
    "trainer.callbacks[ModelCheckpoint]-": null    remove the list's ModelCheckpoint entries
    "trainer.callbacks[MegatronCommOverlapCallback].tp_comm_overlap": false
                                               set it on the list's entries of that class

A false value (false, 0, null) where the path meets None, or a [Class]
selection with no entry, is a no-op: there is nothing to turn off.

A value is plain JSON, or an object built when applied:

    {"factory": "module:name", "args": [...], "kwargs": {...}}   the result of calling it
    {"ref": "module:name"}                                        the object itself
    {"path": "model.config"}                                      the recipe's current value there

This module imports nothing from any framework: ``factory`` and ``ref`` are
imported when applied, inside NVIDIA's container.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from typing import Any

_SELECT = re.compile(r"^(?P<list>[A-Za-z_][\w]*)\[(?P<cls>[A-Za-z_]\w*)\]$")


class OverrideError(ValueError):
    """An override that does not fit the recipe object (names the key)."""


class _NoneOnPath(OverrideError):
    """A part of the path is None: nothing there to set."""


def resolve_ref(ref: str, importer: Callable[[str], Any] = importlib.import_module) -> Any:
    module, _, name = ref.partition(":")
    target = importer(module)
    for part in name.split(".") if name else ():
        target = getattr(target, part)
    return target


def build_value(
    value: Any, root: Any, importer: Callable[[str], Any] = importlib.import_module
) -> Any:
    if isinstance(value, Mapping):
        if "factory" in value:
            func = resolve_ref(value["factory"], importer)
            args = [build_value(a, root, importer) for a in value.get("args", ())]
            kwargs = {
                k: build_value(v, root, importer) for k, v in (value.get("kwargs") or {}).items()
            }
            return func(*args, **kwargs)
        if "ref" in value:
            return resolve_ref(value["ref"], importer)
        if "path" in value:
            return _walk(root, value["path"].split("."), value["path"], owner=False)
        return {k: build_value(v, root, importer) for k, v in value.items()}
    if isinstance(value, list):
        return [build_value(v, root, importer) for v in value]
    return value


def class_name(obj: Any) -> str:
    """The class an entry is or configures (a fiddle/NeMo-Run ``Config`` names its target)."""
    target = getattr(obj, "__fn_or_cls__", None)
    return getattr(target, "__name__", None) or type(obj).__name__


def _walk(obj: Any, parts: list[str], key: str, owner: bool = True) -> Any:
    for index, part in enumerate(parts):
        where = ".".join(parts[: index + 1])
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise OverrideError(f"{key}: the recipe has no {where!r}") from None
        if obj is None and (owner or index < len(parts) - 1):
            raise _NoneOnPath(f"{key}: {where} is None in this recipe")
    return obj


def _selection(part: str, key: str) -> tuple[str, str]:
    match = _SELECT.match(part)
    if not match:
        raise OverrideError(f"{key}: expected LIST[Class] before the last part, got {part!r}")
    return match["list"], match["cls"]


def apply_one(
    root: Any, key: str, value: Any, importer: Callable[[str], Any] = importlib.import_module
) -> None:
    """Apply one override (see the module's docstring)."""
    try:
        _apply_one(root, key, value, importer)
    except _NoneOnPath:
        if value:
            raise  # a false value under a None part is a no-op: nothing to turn off


def _apply_one(root: Any, key: str, value: Any, importer: Callable[[str], Any]) -> None:
    mode = key[-1] if key[-1] in "?+-" else ""
    *path, last = (key[:-1] if mode else key).split(".")
    if mode == "-":
        name, cls = _selection(last, key)
        owner = _walk(root, path, key)
        setattr(owner, name, [e for e in getattr(owner, name) if class_name(e) != cls])
        return
    if path and _SELECT.match(path[-1]):
        name, cls = _selection(path[-1], key)
        chosen = [e for e in getattr(_walk(root, path[:-1], key), name) if class_name(e) == cls]
        if not chosen and value:
            raise OverrideError(f"{key}: {'.'.join(path[:-1] + [name])} has no {cls} entry to set")
        for entry in chosen:
            setattr(entry, last, build_value(value, root, importer))
        return
    owner = _walk(root, path, key)
    if not hasattr(owner, last):
        raise OverrideError(f"{key}: the recipe has no {'.'.join(path + [last])!r}")
    if mode == "+":
        getattr(owner, last).extend(build_value(list(value), root, importer))
    elif mode != "?" or getattr(owner, last) is None:
        setattr(owner, last, build_value(value, root, importer))


def apply(
    root: Any,
    overrides: Mapping[str, Any],
    importer: Callable[[str], Any] = importlib.import_module,
) -> Any:
    """Apply every override in order; ``root`` is changed in place and returned."""
    for key, value in overrides.items():
        apply_one(root, key, value, importer)
    return root
