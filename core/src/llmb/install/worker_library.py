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

Of a plugin, only what its own distribution installs is copied: the top-level
package (or module) its entry point lives in, when that distribution's files
hold it (an editable install: when it lies in the project's directory) and no
other installed distribution provides that name, nor does the container's
framework (``CONTAINER_PACKAGES``). A plugin whose entry point lives in
``yaml``, ``torch`` or ``nemo`` would otherwise put this machine's copy of
that package in front of the container's: such an entry point is left out,
with a warning that names the plugin, the package and whose it is (the plugin
then does not load on the cluster).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import tempfile
from pathlib import PurePosixPath
from urllib.parse import unquote, urlparse

from llmb.log import warn

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
# What NVIDIA's containers run on: a plugin's package of one of these names would stand in front of the
# container's own, whether or not this machine has it installed.
CONTAINER_PACKAGES = frozenset(
    {
        "apex",
        "lightning",
        "megatron",
        "nemo",
        "nemo_run",
        "numpy",
        "nvidia",
        "pytorch_lightning",
        "torch",
        "transformer_engine",
        "triton",
    }
)
SKIPPED = ("__pycache__", "*.pyc", *COMPILED)


def library_dir(install: str) -> str:
    return os.path.join(install, "python")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist_name(dist: importlib.metadata.Distribution) -> str:
    return dist.metadata["Name"] or "?"


def _editable_project(dist: importlib.metadata.Distribution) -> str | None:
    """The project directory of an editable install (PEP 660's direct_url.json), else None."""
    try:
        direct = json.loads(dist.read_text("direct_url.json") or "null")
    except ValueError:
        return None
    if not isinstance(direct, dict) or not (direct.get("dir_info") or {}).get("editable"):
        return None
    url = urlparse(str(direct.get("url", "")))
    return os.path.realpath(unquote(url.path)) if url.scheme == "file" else None


def _inside(path: str, directory: str) -> bool:
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return os.path.commonpath([path, directory]) == directory


def _own_source(dist: importlib.metadata.Distribution, name: str) -> dict | str:
    """Where the top-level package or module ``name`` of ``dist`` lies, as ``{"path", "files"}`` (files:
    the package's files as its RECORD lists them, relative to the path's parent; None: the whole
    directory); or why it is not ``dist``'s."""
    project = _editable_project(dist)
    if project is not None:
        # an editable install lists a .pth file, not its packages: they are its project's files
        spec = importlib.util.find_spec(name)
        if spec is None:
            return f"no module {name} is importable here"
        if spec.submodule_search_locations:
            locations = list(spec.submodule_search_locations)
            path = locations[0] if len(locations) == 1 else None
        else:
            path = spec.origin if spec.origin and spec.origin.endswith(".py") else None
        if path is None or not _inside(path, project):
            return f"{name} lies outside {_dist_name(dist)}'s project ({project})"
        return {"path": path, "files": None}
    files = dist.files
    if files is None:
        return f"{_dist_name(dist)} lists no files it installs"
    mine = [
        f
        for f in files
        if f.parts
        and f.parts[0] in (name, f"{name}.py")
        and ".." not in f.parts
        and not PurePosixPath(f).is_absolute()
    ]
    if any(len(f.parts) > 1 for f in mine):
        path = str(dist.locate_file(name))
        if not os.path.isdir(path):
            return f"{name} is not where {_dist_name(dist)} installed it"
        kept = [
            str(f)
            for f in mine
            if len(f.parts) > 1
            and "__pycache__" not in f.parts
            and not any(PurePosixPath(f).match(p) for p in SKIPPED)
        ]
        return {"path": path, "files": kept}
    if mine:
        path = str(dist.locate_file(f"{name}.py"))
        return {"path": path, "files": None} if os.path.isfile(path) else f"{path} is missing"
    return f"{_dist_name(dist)} installs no package or module {name}"


def _refused(plugin: str, dist: str, package: str, why: str) -> None:
    warn(
        "plugin left out of the worker library: it will not load on the cluster",
        plugin=plugin,
        distribution=dist,
        package=package,
        reason=why,
    )


def _entry_points_text(dist: importlib.metadata.Distribution, left_out: set[str]) -> str:
    """The distribution's entry_points.txt, less the ``llmb`` entry points left out."""
    groups: dict[str, list[str]] = {}
    for ep in dist.entry_points:
        if ep.group == "llmb" and ep.name in left_out:
            continue
        groups.setdefault(ep.group, []).append(f"{ep.name} = {ep.value}")
    return "".join(f"[{group}]\n" + "\n".join(lines) + "\n\n" for group, lines in groups.items())


def contents() -> dict[str, dict]:
    """Distribution name -> {"version", "packages", "entry_points", "sources"} of what the library holds.

    A plugin's entry point whose top-level package is not its own distribution's alone (see the module's
    docstring) is left out with a warning, and with it that entry point."""
    providers: dict[str, dict[str, str]] = {}  # top-level name -> normalized -> distribution name
    for top, dists in importlib.metadata.packages_distributions().items():
        providers[top] = {_normalize(d): d for d in dists}
    found: dict[str, dict] = {}
    plugins: dict[str, dict] = {}
    for ep in importlib.metadata.entry_points(group="llmb"):
        dist = ep.dist
        package = ep.value.partition(":")[0].strip().split(".")[0]
        if dist is None:
            _refused(ep.name, "?", package, "no distribution is known to provide it")
            continue
        name = _dist_name(dist)
        if _normalize(name) == "llmb":
            continue  # llmb itself is copied whole
        entry = plugins.setdefault(
            name, {"dist": dist, "sources": {}, "left_out": set(), "accepted": 0}
        )
        others = sorted(
            d for key, d in providers.get(package, {}).items() if key != _normalize(name)
        )
        source: dict | str
        if others:
            source = f"{package} is {' and '.join(others)}'s, not {name}'s"
        elif package in CONTAINER_PACKAGES or package in {p for _, p in DEPENDENCIES}:
            source = f"{package} is a package of the container's own"
        else:
            source = _own_source(dist, package)
        if isinstance(source, str):
            _refused(ep.name, name, package, source)
            entry["left_out"].add(ep.name)
            continue
        entry["sources"][package] = source
        entry["accepted"] += 1
    wanted: dict[str, set[str]] = {"llmb": {"llmb"}}
    for dist, package in DEPENDENCIES:
        wanted.setdefault(dist, set()).add(package)
    for dist, packages in sorted(wanted.items()):
        try:
            meta = importlib.metadata.distribution(dist)
            version, eps = meta.version, meta.read_text("entry_points.txt") or ""
        except importlib.metadata.PackageNotFoundError:
            version, eps = "0", ""
        found[dist] = {"version": version, "packages": sorted(packages), "entry_points": eps}
    for name, entry in sorted(plugins.items()):
        if name in found or not entry["accepted"]:
            continue
        dist = entry["dist"]
        found[name] = {
            "version": dist.version,
            "packages": sorted(entry["sources"]),
            "entry_points": _entry_points_text(dist, entry["left_out"]),
            "sources": entry["sources"],
        }
    return dict(sorted(found.items()))


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


def _found(dist: str, package: str) -> dict:
    """Where llmb's own package, or one of its dependencies, lies."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"cannot find the package {package!r} of {dist} to copy")
    return {"path": list(spec.submodule_search_locations)[0], "files": None}


def _copy(source: dict, into: str, package: str) -> None:
    path, files = source["path"], source["files"]
    if os.path.isfile(path):  # a top-level module
        os.makedirs(into, exist_ok=True)
        shutil.copy2(path, os.path.join(into, f"{package}.py"))
    elif files is None:
        shutil.copytree(path, os.path.join(into, package), ignore=shutil.ignore_patterns(*SKIPPED))
    else:  # only the files its distribution installed there
        parent = os.path.dirname(path)
        for relative in files:
            target = os.path.join(into, relative)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(os.path.join(parent, relative), target)


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
                _copy(info.get("sources", {}).get(package) or _found(dist, package), into, package)
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
