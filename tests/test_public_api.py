"""The names plugins may import (``llmb.public_api.PUBLIC``): each exists, the plugins and backends in
this repository import nothing else from llmb, and docs/plugin-api.md shows the list."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
from llmb.public_api import PUBLIC

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_every_public_name_exists(module):
    imported = importlib.import_module(module)
    missing = [name for name in PUBLIC[module] if not hasattr(imported, name)]
    assert not missing, f"{module} no longer has {missing}: plugins import them (llmb.public_api)"


def _imports(path: Path) -> set[tuple[str, str]]:
    """(module, name) of every llmb name ``path`` imports; for a module imported from ``llmb``, the
    attributes the file reads of it."""
    tree = ast.parse(path.read_text())
    used, modules = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and re.fullmatch(r"llmb(\..+)?", node.module):
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if node.module == "llmb" and importlib.util.find_spec(submodule) is not None:
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
    shown = {}
    for module, names in re.findall(r"^\| `([\w.]+)` \| (.+) \|$", page, re.MULTILINE):
        shown[module] = tuple(re.findall(r"`(\w+)`", names))
    assert shown == PUBLIC
