"""docs/architecture.md against the code: every package of the core is on its map and every module,
function and package it names exists; and the CLI's path imports no engine, as the page says."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORE = REPO / "core" / "src" / "llmb"
PAGE = (REPO / "docs" / "architecture.md").read_text()


def _packages() -> set[str]:
    return {p.name for p in CORE.iterdir() if p.is_dir() and p.name != "__pycache__"}


def test_every_package_of_the_core_is_on_the_map_and_each_holds_its_list():
    listed = set(re.findall(r"^    (\w+)/ ", PAGE, re.MULTILINE))
    assert listed == _packages()
    top_files = {p.name for p in CORE.glob("*.py")} - {"__init__.py", "__main__.py"}
    assert top_files <= set(re.findall(r"\b(\w+\.py)\b", PAGE.split("## The flow")[0]))
    for package in _packages() - {"data"}:
        doc = ast.get_docstring(ast.parse((CORE / package / "__init__.py").read_text()))
        assert doc, f"llmb/{package}/__init__.py says nothing of what the package holds"


def _source(path: str) -> Path:
    slurm = REPO / "backends" / "slurm" / "src"
    return slurm / path if path.startswith("llmb_backend_slurm/") else CORE / path


def _defines(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
            return True
        if isinstance(node, ast.ImportFrom) and any(
            (a.asname or a.name) == name for a in node.names
        ):
            return True
    return False


FLOW = PAGE.split("## The flow")[1]
# `lifecycle/prepare.py`, `lifecycle/prepare.prepare`,
# `engines/frameworks.train` (a package's function), `engines/torch/parallel/`
PATHS = sorted(set(re.findall(r"`((?:\w+/)+\w*)(?:\.(\w+))?", FLOW)))
# `PluginHost.resolve`, `launch.choose_engine`, `cli.get_host`: a function of a module or class named before
OWNERS = {
    "PluginHost": "plugins/host.py",
    "prepare": "lifecycle/prepare.py",
    "submit": "lifecycle/submit.py",
    "reconcile": "lifecycle/reconcile.py",
    "cli": "cli/__init__.py",
}
METHODS = sorted(set(re.findall(r"`(" + "|".join(OWNERS) + r")\.(\w+)", FLOW)))


@pytest.mark.parametrize(("path", "member"), PATHS, ids=["/".join(filter(None, p)) for p in PATHS])
def test_each_module_and_function_the_flow_names_exists(path, member):
    where = _source(path.rstrip("/"))
    if path.endswith("/"):
        assert where.is_dir(), f"docs/architecture.md names {path}, which is not in the code"
        return
    if member == "py":
        assert where.with_suffix(".py").is_file(), (
            f"docs/architecture.md names {path}.py, which is not in the code"
        )
        return
    module = (
        where.with_suffix(".py") if where.with_suffix(".py").is_file() else where / "__init__.py"
    )
    assert module.is_file(), f"docs/architecture.md names {path}, which is not in the code"
    assert not member or _defines(module, member), f"{module} defines no {member}"


@pytest.mark.parametrize(("owner", "member"), METHODS)
def test_each_method_the_flow_names_exists(owner, member):
    assert _defines(CORE / OWNERS[owner], member), f"{OWNERS[owner]} defines no {member}"


def test_the_hooks_the_flow_names_are_defined_in_hookspecs():
    hooks = set(re.findall(r"`(llmb_\w+)`", PAGE))
    specs = (CORE / "plugins" / "hookspecs.py").read_text()
    assert hooks and all(f"def {hook}(" in specs for hook in hooks), hooks


def test_planning_a_run_imports_no_engine_and_no_torch():
    script = """
import json, sys
from llmb.cli import main
try:
    main(["plan", "llama31", "--size", "8b", "--gpu", "b200", "--dtype", "nvfp4", "--gpus", "8", "--json"])
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "megatron", "nemo", "transformer_engine")
               or m.startswith("llmb.engines.torch") or m.startswith("llmb.engines.frameworks.megatron_bridge"))
print(json.dumps({"code": code, "heavy": heavy}), file=sys.stderr)
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    seen = json.loads(proc.stderr.strip().splitlines()[-1])
    assert seen == {"code": 0, "heavy": []}, proc.stderr[-2000:]


def _formatted(node: ast.AST) -> bool:
    """Whether an expression builds its text with an f-string (or joins one to more text)."""
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return _formatted(node.left) or _formatted(node.right)
    return False


def _progress_line(node: ast.AST) -> bool:
    """A progress line redrawn in place (``\\r...``): cut to the width where it is drawn."""
    first = node.values[0] if isinstance(node, ast.JoinedStr) and node.values else None
    return isinstance(first, ast.Constant) and str(first.value).startswith("\r")


def test_human_text_of_llmbs_own_is_fitted_to_the_terminal():
    """Every message llmb composes reaches the terminal through ``fit_text`` (``say``, ``echo_err``,
    ``warn``, a table): a ``click.echo`` of an f-string would print a line wider than the terminal, or a
    path broken in the middle, the day its values grow (issue 43: run --dry-run's first line, preflight's
    verdict, archive's summary)."""
    bare = []
    for path in sorted((REPO / "core" / "src" / "llmb").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("echo", "secho")
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "click"
                and node.args
                and _formatted(node.args[0])
                and not _progress_line(node.args[0])
            ):
                bare.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert bare == [], bare


def test_every_test_file_of_the_repository_is_run_by_ci():
    """A test file is collected from tests/ (the suite's testpaths) or in a plugin's own directory by
    tests/test_example_plugin.py's runner; one anywhere else would guard nothing, as the example
    plugin's did until CI ran them."""
    import test_example_plugin as runner

    assert callable(getattr(runner, "test_every_test_of_each_plugin_passes", None))
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=runner.ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    found = [
        runner.ROOT / name
        for name in listed.split("\0")
        if name
        and (Path(name).name.startswith("test_") or name.endswith("_test.py"))
        and name.endswith(".py")
    ]
    run_by = [runner.ROOT / "tests", *(plugin / "tests" for plugin in runner.PLUGINS_WITH_TESTS)]
    unrun = [
        str(path.relative_to(runner.ROOT))
        for path in found
        if not any(path.is_relative_to(d) for d in run_by)
    ]
    assert not unrun, f"test files that CI never runs: {unrun}"
    assert len(found) > 100 and any(path.is_relative_to(runner.EXAMPLE) for path in found)
