"""Imports point down the stage map (docs/architecture.md, "The stages"): a module of the core imports
only modules of its own stage and of the stages before it, and no modules import each other round in
a cycle. Imports inside functions count (they run, only later); imports under ``if TYPE_CHECKING:``
do not. The core registering its own hook modules by name (importlib) is not an import.

Pure ``ast``: nothing of llmb is imported, so the test stays fast and sees even modules that cannot
be imported here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORE = REPO / "core" / "src" / "llmb"
PAGE = REPO / "docs" / "architecture.md"


def stages() -> dict[str, int]:
    """The block under "The stages" in docs/architecture.md: one line per stage, ``N  name  entries``,
    where an entry is a package of the core (``recipes/``) or a module at its top (``log.py``); a line
    without a number goes on with the stage above it."""
    text = PAGE.read_text()
    block = re.search(r"^## The stages\b.*?^```\w*\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert block, "docs/architecture.md has no fenced block under '## The stages'"
    order: dict[str, int] = {}
    stage = None
    for line in block.group(1).splitlines():
        match = re.match(r"\s*(\d+)\s+\w+\s+(.*)", line)
        if match:
            stage, entries = int(match.group(1)), match.group(2)
        else:
            assert stage is not None or not line.strip(), f"a stage's line has no number: {line!r}"
            entries = line
        for entry in entries.split():
            assert entry not in order, f"{entry} is on two stages of docs/architecture.md"
            order[entry] = stage
    assert order and sorted(set(order.values())) == list(range(max(order.values()) + 1)), order
    return order


def module_name(path: Path) -> str:
    parts = path.relative_to(CORE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(CORE.rglob("*.py")) if "__pycache__" not in p.parts}
PACKAGES = {name for name, p in MODULES.items() if p.name == "__init__.py"}


def facade() -> dict[str, str]:
    """``FACADE`` of public_api.py (name -> module), read as a literal: ``from llmb import Workload``
    in the core is an import of the module that defines it."""
    tree = ast.parse((CORE / "public_api.py").read_text())
    for node in tree.body:
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else (node.targets[0] if isinstance(node, ast.Assign) else None)
        )
        if isinstance(target, ast.Name) and target.id == "FACADE" and node.value is not None:
            return ast.literal_eval(node.value)
    return {}


FACADE = facade()


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST):
    """Every Import/ImportFrom, at any depth, except under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _owner(name: str) -> str | None:
    """The module of the core that ``name`` (a dotted module path) is, or the nearest package above it."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imports(module: str, source: str | None = None) -> list[tuple[str, int]]:
    """(module of the core imported, line) for every import in ``module`` (its file, or ``source``)."""
    package = module if module in PACKAGES else module.rpartition(".")[0]
    found = []
    for node in _import_nodes(ast.parse(MODULES[module].read_text() if source is None else source)):
        if isinstance(node, ast.Import):
            found += [
                (_owner(alias.name), node.lineno)
                for alias in node.names
                if alias.name.split(".")[0] == "llmb"
            ]
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join(anchor + ([base] if base else []))
        if base.split(".")[0] != "llmb":
            continue
        for alias in node.names:
            if f"{base}.{alias.name}" in MODULES:  # from llmb.runs import experiment: the module
                found.append((f"{base}.{alias.name}", node.lineno))
            # from llmb import Workload: where it lives
            elif base == "llmb" and alias.name in FACADE:
                found.append((_owner(FACADE[alias.name]), node.lineno))
            else:
                found.append((_owner(base), node.lineno))
    return sorted({(target, line) for target, line in found if target and target != module})


def stage_of(module: str, order: dict[str, int]) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        entry = "__init__.py"
    elif f"{parts[1]}/" in order:
        entry = f"{parts[1]}/"
    else:
        entry = f"{parts[1]}.py"
    assert entry in order, f"{module} ({entry}) is on no stage of docs/architecture.md"
    return order[entry]


GRAPH = {module: imports(module) for module in MODULES}


def test_every_module_of_the_core_is_on_a_stage():
    order = stages()
    for module in MODULES:
        stage_of(module, order)
    tops = {f"{p.name}/" for p in CORE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    tops |= {p.name for p in CORE.glob("*.py")}
    assert set(order) <= tops, (
        f"docs/architecture.md stages name what is not in the core: {set(order) - tops}"
    )


def test_no_module_imports_a_later_stage():
    order = stages()
    upward = [
        f"{module} -> {target} (line {line})"
        for module, edges in GRAPH.items()
        for target, line in edges
        if stage_of(target, order) > stage_of(module, order)
    ]
    assert not upward, "imports of a later stage (docs/architecture.md, The stages):\n" + "\n".join(
        upward
    )


def cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    succ = {module: sorted({target for target, _ in edges}) for module, edges in GRAPH.items()}
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in succ:
        if root in index:
            continue
        work = [(root, iter(succ[root]))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(succ[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles():
    report = []
    for component in cycles():
        members = set(component)
        report.append("cycle: " + ", ".join(component))
        report += [
            f"  {module} -> {target} (line {line})"
            for module in component
            for target, line in GRAPH[module]
            if target in members
        ]
    assert not report, "modules that import each other, directly or round a cycle:\n" + "\n".join(
        report
    )


def package_edges() -> set[tuple[str, str]]:
    """(package, package) pairs with an import between different packages of the core (a top-level
    module counts as its own package); what docs/architecture.md reports as cross-package edges."""

    def package(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else "llmb"

    return {
        (package(m), package(t))
        for m, edges in GRAPH.items()
        for t, _ in edges
        if package(m) != package(t)
    }


def test_the_graph_is_read():
    """A guard on the parser itself: what counts as an import of which module, and what does not."""
    source = """
from typing import TYPE_CHECKING
import llmb.runs.jobs
from llmb.runs import experiment
from llmb import Workload, log
from . import gates
if TYPE_CHECKING:
    from llmb.cli.output import render_table
def later():
    from llmb.install.images import image_path
    import json
"""
    assert imports("llmb.certify.verdict", source) == sorted(
        [
            ("llmb.runs.jobs", 3),
            ("llmb.runs.experiment", 4),
            (FACADE["Workload"], 5),
            ("llmb.log", 5),
            ("llmb.certify.gates", 6),
            ("llmb.install.images", 10),
        ]
    )
    assert len(package_edges()) > 20
