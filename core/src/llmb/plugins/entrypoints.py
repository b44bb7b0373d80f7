"""Find the ``llmb`` entry points of installed distributions, quickly.

``importlib.metadata`` costs about 20 ms to import (it pulls in ``email``,
``zipfile`` and ``csv``), a fifth of the CLI's whole budget. Entry points
are plain files, ``<dist>.dist-info/entry_points.txt`` (or ``.egg-info``)
in each ``sys.path`` directory, so this module reads them directly, in the
order and with the first-wins de-duplication ``importlib.metadata`` uses.
Anything it does not handle (a zip or egg file on ``sys.path``) makes it
fall back to ``importlib.metadata`` for the whole scan.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from dataclasses import dataclass

_SECTION = re.compile(r"^\s*\[(?P<name>[^\]]+)\]\s*$")


@dataclass(frozen=True)
class EntryPoint:
    name: str
    value: str  # "package.module" or "package.module:attr"
    distribution: str | None
    version: str | None

    def load(self) -> object:
        module, _, attr = self.value.partition(":")
        obj: object = importlib.import_module(module.strip())
        for part in filter(None, attr.strip().split(".")):
            obj = getattr(obj, part)
        return obj


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _read_group(path: str, group: str) -> list[tuple[str, str]]:
    """The ``group`` entries of one ``entry_points.txt``. Any distribution's file is read, so one
    that is not UTF-8 or cannot be read costs only its own entries (none, or mangled names that
    then fail to load with a warning), never the command."""
    found, current = [], None
    try:
        handle = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - closed below
    except OSError:
        return []
    with handle:
        for line in handle:
            if m := _SECTION.match(line):
                current = m.group("name").strip()
            elif current == group and "=" in line and not line.lstrip().startswith(("#", ";")):
                name, _, value = line.partition("=")
                found.append((name.strip(), value.strip()))
    return found


def _name_and_version(meta_dir: str) -> tuple[str | None, str | None]:
    name = version = None
    for filename in ("METADATA", "PKG-INFO"):
        path = os.path.join(meta_dir, filename)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    break  # end of the headers
                key, _, value = line.partition(":")
                if key == "Name":
                    name = value.strip()
                elif key == "Version":
                    version = value.strip()
        break
    return name, version


def _scan(group: str) -> list[EntryPoint] | None:
    """None when some sys.path entry needs importlib.metadata's full machinery."""
    found: list[EntryPoint] = []
    seen: set[str] = set()
    for entry in sys.path:
        directory = entry or "."
        if os.path.isfile(directory):
            return None  # a zip or egg file
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for child in names:
            if not child.endswith((".dist-info", ".egg-info")):
                continue
            meta_dir = os.path.join(directory, child)
            if not os.path.isdir(meta_dir):
                return None  # an egg-info file, old setuptools
            stem = child.rsplit(".", 1)[0]
            key = _normalize(stem.split("-", 1)[0])
            if key in seen:
                continue
            seen.add(key)
            entry_file = os.path.join(meta_dir, "entry_points.txt")
            if not os.path.isfile(entry_file):
                continue
            pairs = _read_group(entry_file, group)
            if pairs:
                name, version = _name_and_version(meta_dir)
                found += [EntryPoint(n, v, name, version) for n, v in pairs]
    return found


def _with_importlib(group: str) -> list[EntryPoint]:
    from importlib.metadata import entry_points

    out = []
    for ep in entry_points(group=group):
        dist = getattr(ep, "dist", None)
        out.append(
            EntryPoint(
                ep.name,
                ep.value,
                dist.metadata["Name"] if dist is not None else None,
                dist.version if dist is not None else None,
            )
        )
    return out


def entry_points(group: str) -> list[EntryPoint]:
    """Every entry point in ``group``, first distribution on sys.path wins."""
    fast = _scan(group)
    return fast if fast is not None else _with_importlib(group)
