"""The names plugins may import (``llmb.public_api.PUBLIC``): each exists, the plugins and backends in
this repository import nothing else from llmb, docs/plugin-api.md shows the list, and the paths they had
before the core was grouped by stage (``MOVED``) still import, with a warning."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from llmb.public_api import MOVED, PUBLIC

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_every_public_name_exists(module):
    imported = importlib.import_module(module)
    missing = [name for name in PUBLIC[module] if not hasattr(imported, name)]
    assert not missing, f"{module} no longer has {missing}: plugins import them (llmb.public_api)"


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # the parent is a module, not a package
        return False


def _imports(path: Path) -> set[tuple[str, str]]:
    """(module, name) of every llmb name ``path`` imports; for a module imported from ``llmb``, the
    attributes the file reads of it."""
    tree = ast.parse(path.read_text())
    used, modules = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and re.fullmatch(r"llmb(\..+)?", node.module):
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if submodule not in MOVED and _is_module(submodule):
                    modules[alias.asname or alias.name] = submodule
                else:
                    used.add((node.module, alias.name))
        elif isinstance(node, ast.Import) and any(a.name.startswith("llmb.") for a in node.names):
            raise AssertionError(f"{path}: 'import llmb.x' hides which names it uses; import them by name")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            used.add((modules[node.value.id], node.attr))
    return used


def test_the_repositorys_plugins_and_backends_import_only_public_names():
    sources = [p for root in ("plugins", "backends") for p in (REPO / root).glob("*/src/**/*.py")]
    sources += list((REPO / "tests" / "toy_plugin").rglob("*.py"))  # the documented example plugin
    assert len(sources) > 10
    private = sorted({(module, name, str(path.relative_to(REPO))) for path in sources
                      for module, name in _imports(path) if name not in PUBLIC.get(module, ())})
    assert not private, "plugins import names outside llmb.public_api.PUBLIC:\n" + "\n".join(map(str, private))


def test_the_plugin_api_page_shows_the_list():
    page = (REPO / "docs" / "plugin-api.md").read_text()
    api, _, old_paths = page.partition("## Paths from before")
    shown = {}
    for module, names in re.findall(r"^\| `([\w.]+)` \| (.+) \|$", api, re.MULTILINE):
        shown[module] = tuple(re.findall(r"`(\w+)`", names))
    assert shown == PUBLIC
    assert dict(re.findall(r"^\| `([\w.]+)` \| `([\w.]+)` \|$", old_paths, re.MULTILINE)) == MOVED


def test_the_old_paths_give_the_modules_at_their_new_paths_with_a_warning():
    script = """
import importlib, json, sys, warnings
from llmb.public_api import MOVED
seen = {}
for old, new in MOVED.items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    seen[old] = [module is sys.modules[new], [str(w.message) for w in caught if w.category is DeprecationWarning]]
print(json.dumps(seen))
"""
    seen = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                     check=True).stdout)
    for old, new in MOVED.items():
        same, warned = seen[old]
        assert same, f"{old} is not the module at {new}"
        assert any(f"{old} has moved to {new}" in message for message in warned), (old, warned)


def test_every_moved_path_leads_to_the_plugin_api():
    """MOVED keeps old paths of plugin-facing modules only: each new path is in PUBLIC or holds one, and
    no file is left at an old path to shadow the new one."""
    package = Path(importlib.import_module("llmb").__file__).parent
    for old, new in MOVED.items():
        assert any(module == new or module.startswith(new + ".") for module in PUBLIC), (old, new)
        stale = package.joinpath(*old.split(".")[1:])
        assert not stale.with_suffix(".py").exists() and not stale.is_dir(), f"{stale} shadows {new}"


def test_an_old_module_imported_from_the_package_is_the_module_at_its_new_path():
    script = ("import sys, warnings; warnings.simplefilter('ignore'); from llmb import experiment, records; "
              "print(records is sys.modules['llmb.recipes.records'], experiment is sys.modules['llmb.runs.experiment'])")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True"]
