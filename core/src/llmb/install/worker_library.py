"""The worker library: llmb as the container's Python imports it.

Inside NVIDIA's container a job's ranks run ``python3 -m llmb.worker`` with
``PYTHONPATH=<install>/python``. ``llmb install`` fills that directory from
the llmb running it: the packages of ``llmb``, of every distribution that
registers in the ``llmb`` entry-point group (workload plugins, backends), and
of the dependencies the container may lack; each with a minimal ``.dist-info``
(name, version, entry points) so that plugin discovery works there as it does
here.

``PYTHONPATH`` comes before the container's site-packages, so only llmb and
its plugins lie directly in ``<install>/python``. The dependencies (click,
PyYAML, pluggy, structlog: NeMo-Run and Megatron-Bridge import the first two
too) lie in ``<install>/python/.fallback``, which no import finds from
``<install>/python``: ``import llmb`` appends it to the end of ``sys.path``,
so the container's own copies win and llmb's are used only for what the
container lacks. Nothing compiled is copied (``*.so``: built for this
machine's Python and architecture, not the container's): PyYAML falls back
to pure Python. The stamp file records the versions and what lies where.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile

from llmb.plugins.entrypoints import entry_points

DEPENDENCIES = (
    ("pluggy", "pluggy"),
    ("structlog", "structlog"),
    ("click", "click"),
    ("PyYAML", "yaml"),
)
STAMP = ".llmb-library.json"
# the dependencies' directory, under the library: llmb/__init__.py appends it to sys.path
FALLBACK = ".fallback"
# 1: the dependencies beside llmb, compiled parts included; an older stamp means "build again"
LAYOUT = 2
COMPILED = ("*.so", "*.pyd", "*.dylib")


def library_dir(install: str) -> str:
    return os.path.join(install, "python")


def contents() -> dict[str, dict]:
    """Distribution name -> {"version", "packages", "entry_points"} of what the library holds."""
    wanted: dict[str, set[str]] = {"llmb": {"llmb"}}
    for ep in entry_points("llmb"):
        package = ep.value.partition(":")[0].strip().split(".")[0]
        wanted.setdefault(ep.distribution or package, set()).add(package)
    for dist, package in DEPENDENCIES:
        wanted.setdefault(dist, set()).add(package)
    found = {}
    for dist, packages in sorted(wanted.items()):
        try:
            meta = importlib.metadata.distribution(dist)
            version, eps = meta.version, meta.read_text("entry_points.txt") or ""
        except importlib.metadata.PackageNotFoundError:
            version, eps = "0", ""
        found[dist] = {"version": version, "packages": sorted(packages), "entry_points": eps}
    return found


def current(install: str) -> dict | None:
    """The versions an earlier ``llmb install`` put there (None: nothing, or an older layout)."""
    try:
        with open(os.path.join(library_dir(install), STAMP), encoding="utf-8") as handle:
            stamp = json.load(handle)
    except (OSError, ValueError):
        return None
    return (
        stamp.get("versions") if isinstance(stamp, dict) and stamp.get("layout") == LAYOUT else None
    )


def versions(described: dict[str, dict]) -> dict[str, str]:
    return {dist: info["version"] for dist, info in described.items()}


def build(install: str) -> str:
    """Write the library (atomically: a job never sees half of it); return its directory."""
    described = contents()
    target = library_dir(install)
    os.makedirs(install, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".python-", dir=install)
    dependencies = {dist for dist, _ in DEPENDENCIES}
    where: dict[str, list[str]] = {".": [], FALLBACK: []}
    try:
        for dist, info in described.items():
            place = FALLBACK if dist in dependencies else "."
            where[place] += info["packages"]
            into = os.path.normpath(os.path.join(staging, place))
            for package in info["packages"]:
                spec = importlib.util.find_spec(package)
                if spec is None or not spec.submodule_search_locations:
                    raise RuntimeError(f"cannot find the package {package!r} of {dist} to copy")
                shutil.copytree(
                    list(spec.submodule_search_locations)[0],
                    os.path.join(into, package),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", *COMPILED),
                )
            meta = os.path.join(into, f"{dist.replace('-', '_')}-{info['version']}.dist-info")
            os.makedirs(meta)
            with open(os.path.join(meta, "METADATA"), "w", encoding="utf-8") as handle:
                handle.write(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {info['version']}\n")
            if info["entry_points"]:
                with open(os.path.join(meta, "entry_points.txt"), "w", encoding="utf-8") as handle:
                    handle.write(info["entry_points"])
        with open(os.path.join(staging, STAMP), "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "layout": LAYOUT,
                    "versions": versions(described),
                    "packages": {place: sorted(packages) for place, packages in where.items()},
                },
                handle,
                indent=2,
                sort_keys=True,
            )
        old = None
        if os.path.exists(target):
            old = tempfile.mkdtemp(prefix=".python-old-", dir=install)
            os.rename(target, os.path.join(old, "python"))
        os.rename(staging, target)
        if old:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
