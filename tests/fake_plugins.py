"""Throwaway workload plugins, installed as real distributions: a package and its ``.dist-info``
(``METADATA``, ``entry_points.txt`` in the group ``llmb``) on a directory that a test puts on
``PYTHONPATH``, so that ``llmb`` finds them through its real entry-point discovery, as it finds a
plugin installed with pip."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

from workload_dicts import minimal_workload

# The plugin module: its workload from the workload.yaml beside it, as a published plugin loads it.
LOADS_ITS_WORKLOAD = """
from llmb import hookimpl, load_workload


@hookimpl
def llmb_workloads():
    return [load_workload(__package__)]
"""


def install_plugin(
    site: Path,
    name: str,
    *,
    workload: dict | None = None,
    workload_text: str | None = None,
    source: str = LOADS_ITS_WORKLOAD,
    version: str = "0.3.0",
) -> Path:
    """Install ``llmb-plugin-NAME`` (import ``llmb_plugin_NAME``, entry point ``NAME``) into ``site``:
    ``plugin.py`` is ``source``, ``workload.yaml`` the workload dict (default: the minimal workload
    called NAME), written as JSON, which YAML reads as written, or ``workload_text`` as it is.
    Returns ``site``."""
    package = f"llmb_plugin_{name}"
    root = site / package
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "plugin.py").write_text(textwrap.dedent(source))
    data = minimal_workload(name) if workload is None else workload
    text = json.dumps(data, indent=1) + "\n" if workload_text is None else workload_text
    (root / "workload.yaml").write_text(text)
    info = site / f"{package}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: llmb-plugin-{name}\nVersion: {version}\n"
    )
    (info / "entry_points.txt").write_text(f"[llmb]\n{name} = {package}.plugin\n")
    return site


def with_aliases(name: str, *aliases: str) -> dict:
    """The minimal workload called ``name`` with these aliases."""
    return {**minimal_workload(name), "aliases": list(aliases)}


def site_env(site: Path, **more: str) -> dict[str, str]:
    """The environment that puts ``site`` on the ``llmb`` process's path (before what the tests' own
    PYTHONPATH holds, which the process keeps)."""
    path = os.pathsep.join(filter(None, (str(site), os.environ.get("PYTHONPATH"))))
    return {"PYTHONPATH": path, **more}
