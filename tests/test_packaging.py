"""Packaging: the distributions build as wheels, install into a clean virtual
environment, and find each other through the ``llmb`` entry-point group.

The slow tests use real processes only: ``pip wheel`` on copies of ``core/``,
``plugins/nemotronh/`` and the out-of-tree fixture ``tests/toy_plugin/``, a
fresh ``python -m venv`` (no system site-packages), ``pip install`` of those
wheels (their dependencies come from the package index, through pip's cache),
and that environment's own ``llmb`` console script. The environment is built
once per module. The fast test checks that the versions move in lockstep.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "tests" / "toy_plugin"
OTHER_WORKLOADS = ("llama31", "llama4", "nemotron4")
SEED_VARS = ("MODEL_SIZE", "DTYPE", "JOB_TOTAL_GPUS", "GPU_TYPE", "STRONG_SCALING", "GPUS_PER_NODE")
# Variables that would leak this checkout, or a different install target, into the new environment.
# PYTHONWARNINGS would put non-JSON lines on stderr.
LEAKY_VARS = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONWARNINGS",
    "VIRTUAL_ENV",
    "__PYVENV_LAUNCHER__",
    "LLMB_DEBUG",
    "PIP_USER",
    "PIP_TARGET",
    "PIP_PREFIX",
    "PIP_REQUIRE_VIRTUALENV",
)
TRACEBACK = "Traceback (most recent call last)"


def _load(path: Path) -> dict:
    with path.open("rb") as f:
        return tomllib.load(f)


# ---------------------------------------------------------------- lockstep versions (fast)

CORE = ROOT / "core" / "pyproject.toml"
PLUGIN_PROJECTS = sorted(ROOT.glob("plugins/*/pyproject.toml"))
VERSION = _load(CORE)["project"]["version"]  # every distribution's, by the lockstep test


def test_versions_move_in_lockstep():
    core = _load(CORE)["project"]
    assert core["name"] == "llmb"
    version = core["version"]
    assert PLUGIN_PROJECTS, "no plugins/*/pyproject.toml found"
    pin = f"llmb~={version}"
    for path in [*PLUGIN_PROJECTS, TOY / "pyproject.toml"]:
        project = _load(path)["project"]
        where = path.relative_to(ROOT)
        assert project["version"] == version, (
            f"{where}: version {project['version']} != llmb {version}"
        )
        deps = [d.replace(" ", "") for d in project.get("dependencies", [])]
        llmb_deps = [d for d in deps if re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower() == "llmb"]
        assert llmb_deps == [pin], f"{where}: depends on {llmb_deps}, expected [{pin!r}]"


@pytest.mark.parametrize("path", PLUGIN_PROJECTS, ids=lambda p: p.parent.name)
def test_plugin_entry_point_is_named_after_its_workload(path: Path):
    """hookspecs.py: the entry point's name is how a failed import is attributed to a workload."""
    name = path.parent.name
    project = _load(path)["project"]
    assert project["name"] == f"llmb-plugin-{name}"
    assert project["entry-points"]["llmb"] == {name: f"llmb_plugin_{name}.plugin"}


# ---------------------------------------------------------------- the toy plugin as documentation (fast)

DOC = ROOT / "docs" / "writing-a-workload-plugin.md"
_QUOTED = re.compile(r"<!-- file: (?P<path>\S+) -->\n```[a-z]*\n(?P<body>.*?)```\n", re.DOTALL)


def test_docs_quote_the_toy_plugin_verbatim():
    quoted = {m["path"]: m["body"] for m in _QUOTED.finditer(DOC.read_text())}
    assert sorted(quoted) == [
        "tests/toy_plugin/pyproject.toml",
        "tests/toy_plugin/src/llmb_plugin_toy/plugin.py",
        "tests/toy_plugin/src/llmb_plugin_toy/workload.yaml",
    ]
    for path, body in quoted.items():
        assert body == (ROOT / path).read_text(), f"{DOC.name} quotes an outdated {path}"


def test_toy_table_is_the_documented_recipe_table_cell_for_cell():
    from llmb.yamlio import load_yaml
    from seed_tables import read_tables  # tests/ is on sys.path (conftest.py)

    raw = load_yaml((TOY / "src" / "llmb_plugin_toy" / "workload.yaml").read_text())
    (table,) = raw["variants"][0]["tables"]
    documented = [t for t in read_tables(DOC.read_text()) if t.header == table["columns"]]
    assert len(documented) == 1, "the toy's recipe table is not in the docs (or is there twice)"
    assert documented[0].rows == [[str(cell) for cell in row] for row in table["rows"]]


# ---------------------------------------------------------------- real wheels, real venv (slow)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LEAKY_VARS + SEED_VARS}
    env.update(LLMB_LOG_FORMAT="json", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    env.update(extra)
    return env


def _run(
    cmd: list[str | Path],
    *,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(c) for c in cmd],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or _clean_env(),
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, cmd))} exited {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
    return proc


def _can_skip_build_isolation() -> bool:
    """setuptools>=77 (the build backend every pyproject.toml asks for) and
    wheel importable in this interpreter: build without an isolated env."""
    try:
        major = int(importlib.metadata.version("setuptools").split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return False
    return major >= 77 and importlib.util.find_spec("wheel") is not None


def _copy_source(src: Path, dest: Path) -> Path:
    """Build from a copy: an in-tree build would write build/ and *.egg-info
    into the checkout, and a stale egg-info could leak into the wheel."""
    shutil.copytree(
        src, dest, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__")
    )
    return dest


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    """Wheels of llmb, llmb-plugin-nemotronh and llmb-plugin-toy, by distribution name."""
    src = tmp_path_factory.mktemp("src")
    out = tmp_path_factory.mktemp("wheels")
    trees = [
        _copy_source(ROOT / "core", src / "core"),
        _copy_source(ROOT / "plugins" / "nemotronh", src / "nemotronh"),
        _copy_source(TOY, src / "toy"),
    ]
    isolation = ["--no-build-isolation"] if _can_skip_build_isolation() else []
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            *isolation,
            "-w",
            out,
            *trees,
        ]
    )
    built = {p.name.split("-")[0]: p for p in out.glob("*.whl")}
    assert sorted(built) == ["llmb", "llmb_plugin_nemotronh", "llmb_plugin_toy"], sorted(built)
    return {
        "llmb": built["llmb"],
        "llmb-plugin-nemotronh": built["llmb_plugin_nemotronh"],
        "llmb-plugin-toy": built["llmb_plugin_toy"],
    }


@dataclass
class Venv:
    root: Path
    wheelhouse: Path

    @property
    def bin(self) -> Path:
        return self.root / ("Scripts" if os.name == "nt" else "bin")

    @property
    def python(self) -> Path:
        return self.bin / ("python.exe" if os.name == "nt" else "python")

    def pip_install(self, *args: str | Path) -> None:
        _run(
            [self.python, "-m", "pip", "install", "--quiet", "--find-links", self.wheelhouse, *args]
        )

    def llmb(self, *args: str, expect: int = 0, **env: str) -> subprocess.CompletedProcess[str]:
        # llmb may cache parsed data files; keep that cache beside the venv, not in ~/.cache.
        env = {"LLMB_CACHE_DIR": str(self.root.parent / "llmb-cache"), **env}
        proc = _run([self.bin / "llmb", *args], env=_clean_env(**env), timeout=60, check=False)
        assert proc.returncode == expect, (
            f"llmb {' '.join(args)} exited {proc.returncode}, expected {expect}\n"
            f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
        assert TRACEBACK not in proc.stderr and TRACEBACK not in proc.stdout, proc.stderr
        return proc

    def llmb_json(self, *args: str) -> object:
        proc = self.llmb(*args, "--json")
        assert _log_lines(proc.stderr) == [], f"unexpected log output:\n{proc.stderr}"
        return json.loads(proc.stdout)


def _log_lines(stderr: str) -> list[dict]:
    """stderr as structlog JSON lines (LLMB_LOG_FORMAT=json): every line must parse."""
    return [json.loads(line) for line in stderr.splitlines() if line.strip()]


@dataclass
class Snapshot:
    """What the environment said before anything else was installed into it."""

    env: Venv
    version: str
    listing: list[dict]
    plugins: list[dict]


@pytest.fixture(scope="module")
def base_env(tmp_path_factory, wheels) -> Snapshot:
    """A fresh venv with llmb and llmb-plugin-nemotronh from their wheels; the
    listing is recorded here, so later installs cannot change what the tests see."""
    root = tmp_path_factory.mktemp("venv") / "env"
    _run([sys.executable, "-m", "venv", root])
    assert "include-system-site-packages = false" in (root / "pyvenv.cfg").read_text()
    env = Venv(root, wheels["llmb"].parent)
    # Wheel files, not names: the index must not supply an `llmb` of its own.
    env.pip_install(wheels["llmb"], wheels["llmb-plugin-nemotronh"])
    version = env.llmb("--version").stdout
    return Snapshot(env, version, env.llmb_json("list"), env.llmb_json("plugins"))


@pytest.fixture(scope="module")
def toy_venv(base_env, wheels) -> Venv:
    """The same venv with llmb-plugin-toy installed too."""
    base_env.env.pip_install(wheels["llmb-plugin-toy"])
    return base_env.env


@pytest.mark.slow
def test_core_and_one_plugin_install_alone(base_env):
    assert base_env.version.strip() == f"llmb, version {VERSION}"
    workloads = {entry["workload"] for entry in base_env.listing}
    assert "nemotronh" in workloads
    for other in OTHER_WORKLOADS:
        assert other not in workloads, f"{other} listed without its plugin installed"
    assert workloads == {"nemotronh"}

    assert len(base_env.plugins) == 1, base_env.plugins
    (info,) = base_env.plugins
    assert info["name"] == "nemotronh"
    assert info["distribution"] == "llmb-plugin-nemotronh"
    assert info["version"] == VERSION
    assert info["status"] == "loaded"
    assert info["error"] is None
    assert info["workloads"] == ["nemotronh"]
    assert info["module"] == "llmb_plugin_nemotronh.plugin"


@pytest.mark.slow
def test_out_of_tree_plugin_installs_beside_it(toy_venv):
    listing = toy_venv.llmb_json("list")
    assert {entry["workload"] for entry in listing} == {"nemotronh", "toy"}

    plugins = {info["name"]: info for info in toy_venv.llmb_json("plugins")}
    assert sorted(plugins) == ["nemotronh", "toy"]
    toy = plugins["toy"]
    assert toy["distribution"] == "llmb-plugin-toy"
    assert toy["version"] == VERSION
    assert toy["status"] == "loaded"
    assert toy["workloads"] == ["toy"]
    assert toy["module"] == "llmb_plugin_toy.plugin"

    # The toy's one table: the BF16 and FP8 range rows share their scales, so
    # the support matrix shows them as one entry; the 128-GPU row is another.
    matrix = [
        (
            e["size"],
            e["gpu"],
            e["dtypes"],
            e["min_gpus"],
            e["max_gpus"],
            e["tested_gpus"],
            e["scaling"],
        )
        for e in toy_venv.llmb_json("list", "toy")
    ]
    assert matrix == [
        ("1b", "h100", ["bf16", "fp8"], 8, 64, [8, 64], "weak"),
        ("1b", "h100", ["bf16", "fp8"], 128, 128, [128], "weak"),
    ]


@pytest.mark.slow
def test_plan_uses_the_toy_recipe_and_its_flops_hook(toy_venv):
    plan = toy_venv.llmb_json(
        "plan", "toy", "--size", "1b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8"
    )
    # Row 1: 8-64 GPUs, TP 1, PP 1, CP 1, MBS 2, GBS GPUs*4.
    assert (plan["tp"], plan["pp"], plan["cp"], plan["mbs"]) == (1, 1, 1, 2)
    assert plan["dp"] == 8  # 8 / (1*1*1)
    assert plan["gbs"] == 32 and plan["gbs_rule"] == "GPUs*4"
    assert plan["ga"] == 2  # 32 / (2*8)
    assert (plan["nodes"], plan["gpus_per_node"]) == (1, 8)
    assert plan["validated"] is True
    assert plan["source"] == "toy-1b.md table 1, row 1"  # the document the plugin names, no folder
    assert plan["warnings"] == [] and plan["errata"] == []

    # The toy's own llmb_model_flops answered, not the core's fallback.
    assert plan["model_flops_formula"] == "toy: llmb.recipes.flops.dense_transformer"
    s, L, h, ffn, V, groups, heads = 4096, 16, 2048, 5632, 32000, 4, 16
    per_token = 12 * L * h * h * (1 + groups / heads + s / h) + 18 * L * ffn * h + 6 * V * h
    assert plan["model_flops_per_sample"] == pytest.approx(s * per_token, rel=1e-12)
    assert set(plan["model_flops_terms"]) == {"attention", "mlp", "embedding"}


@pytest.mark.slow
def test_a_plugin_that_fails_to_import_breaks_only_its_workload(toy_venv, tmp_path):
    # A package earlier on sys.path shadows the installed llmb_plugin_toy; the
    # entry point (metadata of the installed distribution) now loads a module
    # that raises, as a plugin with a missing dependency would.
    shadow = tmp_path / "llmb_plugin_toy"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("")
    (shadow / "plugin.py").write_text("import llmb_toy_missing_dependency\n")
    env = {"PYTHONPATH": str(tmp_path)}

    listing = toy_venv.llmb("list", "--json", **env)
    assert {e["workload"] for e in json.loads(listing.stdout)} == {"nemotronh"}
    (warning,) = _log_lines(listing.stderr)
    assert warning["level"] == "warning" and warning["plugin"] == "toy"
    assert warning["provider"] == f"llmb-plugin-toy {VERSION}"

    plugins = {i["name"]: i for i in json.loads(toy_venv.llmb("plugins", "--json", **env).stdout)}
    assert plugins["nemotronh"]["status"] == "loaded"
    assert plugins["toy"]["status"] == "failed"
    assert (
        plugins["toy"]["error"]
        == "ModuleNotFoundError: No module named 'llmb_toy_missing_dependency'"
    )
    assert plugins["toy"]["workloads"] == []

    plan = toy_venv.llmb("plan", "toy", "--gpus", "8", expect=1, **env)
    assert plan.stdout == ""
    assert (
        f"llmb: error: workload 'toy' is unavailable: plugin llmb-plugin-toy {VERSION} failed to load: "
        "ModuleNotFoundError: No module named 'llmb_toy_missing_dependency'"
    ) in plan.stderr
