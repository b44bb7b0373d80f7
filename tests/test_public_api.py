"""The plugin API: one flat namespace, ``from llmb import ...`` (``llmb.public_api.FACADE``). Every name
resolves, ``import llmb`` imports none of their modules, the plugins in this repository import nothing
else from llmb, docs/plugin-api.md lists exactly these names, and the module paths plugins imported
before (``MOVED``) still import, with a warning."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import llmb
import pytest
from llmb.public_api import FACADE, MOVED

REPO = Path(__file__).resolve().parents[1]
CORE = REPO / "core" / "src" / "llmb"
# Whose imports must go through the facade. The cluster backends switch with the backends' rewrite:
# then add "backends" here.
PLUGIN_ROOTS = ("plugins", "backends")


@pytest.mark.parametrize("name", sorted(FACADE))
def test_every_name_resolves(name):
    value = getattr(llmb, name)
    assert value is not None
    path = FACADE[name]
    if path.rpartition(".")[2] == name:  # a helper module offered whole
        assert value is sys.modules[path]
    else:
        assert value is getattr(importlib.import_module(path), name)
    assert vars(llmb)[name] is value  # looked up once, then an attribute like any other


def test_the_facade_is_listed_and_refuses_other_names():
    assert set(FACADE) <= set(llmb.__all__) and set(FACADE) <= set(dir(llmb))
    assert 30 <= len(FACADE) <= 55, (  # 51 with DeepSeek-V3's LatentAttention
        f"{len(FACADE)} names: the facade is meant to stay small (about 40-50)"
    )
    with pytest.raises(AttributeError):
        llmb.PluginHostess  # noqa: B018
    for name, path in FACADE.items():
        shadowed = (CORE / f"{name}.py").exists() or (CORE / name / "__init__.py").exists()
        assert not shadowed or path == f"llmb.{name}", (
            f"llmb.{name} is a module; the facade's {name} is not it"
        )


def test_import_llmb_imports_none_of_the_facades_modules():
    script = (
        "import json, sys; import llmb; from llmb.public_api import FACADE; "
        "print(json.dumps(sorted(m for m in set(FACADE.values()) - {'llmb'} if m in sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == []


def _plugin_sources() -> list[Path]:
    sources = [p for root in PLUGIN_ROOTS for p in (REPO / root).glob("*/src/**/*.py")]
    # the documented example plugin
    return sources + list((REPO / "tests" / "toy_plugin").rglob("*.py"))


def _outside_the_facade(path: Path) -> list[str]:
    """What ``path`` takes from llmb other than ``from llmb import <facade name>``: ``from llmb.x import``,
    ``import llmb.x``, a name the facade lacks, or ``llmb.<attribute>`` it lacks after ``import llmb``."""
    tree = ast.parse(path.read_text())
    found, aliases = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "llmb":
            if node.module != "llmb":
                found.append(f"line {node.lineno}: from {node.module} import ...")
            else:
                found += [
                    f"line {node.lineno}: {a.name}" for a in node.names if a.name not in FACADE
                ]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "llmb":
                    aliases.add(alias.asname or "llmb")
                elif alias.name.startswith("llmb."):
                    found.append(f"line {node.lineno}: import {alias.name}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr not in FACADE
        ):
            found.append(f"line {node.lineno}: llmb.{node.attr}")
    return found


def test_the_repositorys_plugins_import_only_from_llmb():
    sources = _plugin_sources()
    assert len(sources) > 8
    outside = [
        f"{path.relative_to(REPO)} {what}" for path in sources for what in _outside_the_facade(path)
    ]
    assert not outside, (
        "plugins import llmb other than `from llmb import <name>` (llmb.public_api.FACADE):\n"
        + ("\n".join(outside))
    )


def _docs() -> tuple[str, str]:
    page = (REPO / "docs" / "plugin-api.md").read_text()
    api, _, old_paths = page.partition("## Paths from before")
    return api, old_paths


def test_the_plugin_api_page_lists_exactly_the_facade():
    api, _ = _docs()
    listed = re.findall(r"^\| `(\w+)` \| ", api, re.MULTILINE)
    assert len(listed) == len(set(listed)), "a name is listed twice in docs/plugin-api.md"
    assert set(listed) == set(FACADE), set(listed) ^ set(FACADE)
    imports = re.findall(r"^(?:from|import) llmb\S*", api, re.MULTILINE)
    assert imports and all(line in ("from llmb", "import llmb") for line in imports), imports


def test_the_plugin_api_page_lists_the_old_paths():
    _, old_paths = _docs()
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
    seen = json.loads(
        subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        ).stdout
    )
    for old, new in MOVED.items():
        same, warned = seen[old]
        assert same, f"{old} is not the module at {new}"
        assert any(f"{old} has moved to {new}" in message for message in warned), (old, warned)


def test_no_file_is_left_at_an_old_path():
    """An old path in MOVED leads to a module of the core, and no file at the old path shadows it."""
    for old, new in MOVED.items():
        target = CORE.joinpath(*new.split(".")[1:])
        assert target.with_suffix(".py").is_file() or (target / "__init__.py").is_file(), (old, new)
        stale = CORE.joinpath(*old.split(".")[1:])
        assert not stale.with_suffix(".py").exists() and not stale.is_dir(), (
            f"{stale} shadows {new}"
        )


def test_an_old_module_imported_from_the_package_is_the_module_at_its_new_path():
    script = (
        "import sys, warnings; warnings.simplefilter('ignore'); from llmb import experiment, records; "
        "print(records is sys.modules['llmb.recipes.records'], experiment is sys.modules['llmb.runs.experiment'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["True", "True"]
