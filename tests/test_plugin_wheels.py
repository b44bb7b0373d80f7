"""A workload shipped the way a third party ships one (issue 35): its wheel, built from its own folder,
installed into a fresh virtual environment beside llmb and the four plugins installed from this checkout,
and used there through the environment's own ``llmb``; then uninstalled, leaving the other workloads as
they were. The same for a skeleton written by ``llmb plugins new``, whose own tests must pass as written.

Real processes only, and no network: every wheel is built with ``pip wheel --no-deps --no-index
--no-build-isolation`` (setuptools from this environment), installed with ``--no-deps --no-index``, and
the fresh environment finds its dependencies (torch, click, pytest, ...) through a directory of links to
this environment's packages, llmb's own left out, so pip never resolves torch. The plugin is
examples/llmb-plugin-qwen3 where it exists, else only the skeleton runs (``demo``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_packaging import _can_skip_build_isolation, _clean_env, _copy_source

ROOT = Path(__file__).resolve().parents[1]
QWEN3 = ROOT / "examples" / "llmb-plugin-qwen3"
FOUR = ("llama31", "llama4", "nemotron4", "nemotronh")
CHECKOUT = {
    "llmb": ROOT / "core",
    **{f"llmb-plugin-{name}": ROOT / "plugins" / name for name in FOUR},
}
TRACEBACK = "Traceback (most recent call last)"

pytestmark = pytest.mark.slow


def _run(cmd, *, cwd=None, env=None, timeout=600, check=True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(c) for c in cmd],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env or _clean_env(),
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, cmd))} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
            f"\n--- stderr\n{proc.stderr[-4000:]}"
        )
    return proc


def _ours(entry: str) -> bool:
    """llmb's own distributions in this environment (editable here), which the fresh one must not see."""
    lowered = entry.lower()
    return lowered.startswith(("llmb", "__editable__")) or lowered.endswith(".pth")


def _dependency_links(into: Path) -> Path:
    """A directory of links to this environment's installed packages, llmb's own left out."""
    into.mkdir()
    paths = sysconfig.get_paths()
    for site in dict.fromkeys((paths["purelib"], paths["platlib"])):
        for entry in sorted(os.listdir(site)):
            if not _ours(entry) and not (into / entry).exists():
                (into / entry).symlink_to(Path(site) / entry)
    return into


@dataclass
class Env:
    root: Path
    wheels: Path
    install: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def pip(self, *args) -> None:
        # this environment's pip, acting on the fresh one (which has none: python -m venv --without-pip)
        _run([sys.executable, "-m", "pip", "--python", self.python, *args, "--quiet"])

    def env(self, **extra: str) -> dict[str, str]:
        return _clean_env(
            LLMB_INSTALL=str(self.install),
            LLMB_CACHE_DIR=str(self.install.parent / "cache"),
            LLMB_LOG_FORMAT="console",
            **extra,
        )

    def llmb(
        self, *args: str, expect: int = 0, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        proc = _run(
            [self.root / "bin" / "llmb", *args], env=self.env(), timeout=timeout, check=False
        )
        assert proc.returncode == expect, (
            f"llmb {' '.join(args)} exited {proc.returncode}, expected {expect}\n"
            f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
        )
        assert TRACEBACK not in proc.stdout + proc.stderr, proc.stderr
        return proc

    def llmb_json(self, *args: str):
        return json.loads(self.llmb(*args, "--json").stdout)

    def build(self, *sources: Path) -> list[Path]:
        """Wheels of ``sources`` (built from copies: no build/ or egg-info in the checkout)."""
        before = set(self.wheels.glob("*.whl"))
        copies = self.wheels.parent / "sources"
        copies.mkdir(exist_ok=True)
        trees = [
            _copy_source(src, copies / f"{len(list(copies.iterdir()))}-{src.name}")
            for src in sources
        ]
        _run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index"]
            + ["--no-build-isolation", "-w", self.wheels, *trees]
        )
        return sorted(set(self.wheels.glob("*.whl")) - before)


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Env:
    """A fresh environment with llmb and the four workload plugins installed from this checkout's wheels."""
    if not _can_skip_build_isolation():
        if os.environ.get("CI"):
            pytest.fail(
                "CI must build wheels offline: setuptools>=77 and wheel are missing (./dev.sh setup)"
            )
        pytest.skip("setuptools>=77 and wheel are needed to build wheels offline (./dev.sh setup)")
    base = tmp_path_factory.mktemp("plugin-wheels")
    env = Env(base / "env", base / "wheels", base / "install")
    env.wheels.mkdir()
    _run([sys.executable, "-m", "venv", "--without-pip", env.root])
    purelib = _run(
        [env.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    ).stdout.strip()
    links = _dependency_links(base / "dependencies")
    Path(purelib, "llmb_test_dependencies.pth").write_text(f"{links}\n")
    env.pip("install", "--no-deps", "--no-index", *env.build(*CHECKOUT.values()))
    return env


@pytest.fixture(scope="module")
def four(env) -> list[dict]:
    """``llmb list --json`` before any other plugin is installed."""
    listing = env.llmb_json("list")
    assert {e["workload"] for e in listing} == set(FOUR)
    plugins = {p["name"]: p for p in env.llmb_json("plugins")}
    assert sorted(plugins) == sorted(FOUR), plugins
    assert all(p["status"] == "loaded" for p in plugins.values())
    return listing


def test_qwen3_wheel_installs_runs_and_uninstalls(env, four):
    if not (QWEN3 / "pyproject.toml").exists():
        pytest.skip("examples/llmb-plugin-qwen3 is not in this checkout")
    (wheel,) = env.build(QWEN3)
    assert wheel.name.startswith("llmb_plugin_qwen3-")
    env.pip("install", "--no-deps", "--no-index", wheel)

    plugins = {p["name"]: p for p in env.llmb_json("plugins")}
    assert plugins["qwen3"]["status"] == "loaded", plugins["qwen3"]["error"]
    assert (plugins["qwen3"]["distribution"], plugins["qwen3"]["workloads"]) == (
        "llmb-plugin-qwen3",
        ["qwen3"],
    )
    assert "qwen3" in env.llmb("plugins").stdout

    listing = env.llmb_json("list", "qwen3")
    assert {e["size"] for e in listing} == {"30b", "235b"}
    assert {e["gpu"] for e in listing} >= {"h100"}
    assert "qwen3" in env.llmb("list", "qwen3").stdout

    # llmb plan of every published row: the recipe's own DP and GA (or an erratum that says otherwise)
    planned = json.loads(
        _run([env.python, ROOT / "tests" / "plan_every_row.py", "qwen3"], env=env.env()).stdout
    )
    assert planned, "qwen3 has no published rows"
    listed = {(e["size"], e["gpu"], d) for e in listing for d in e["dtypes"]}
    assert {(r["args"][5], r["args"][7], r["args"][9]) for r in planned} == listed
    for row in planned:
        where = f"{' '.join(row['args'])} ({row['source']})"
        assert row["code"] == 0, f"{where}: {row['stderr']}"
        plan, printed = row["plan"], row["printed"]
        if plan["errata"]:
            continue  # the recipe's own figure is corrected, and the plan says so
        for key in ("dp", "ga"):
            if printed[key] is not None:
                assert plan[key] == printed[key], f"{where}: {key} {plan[key]} != {printed[key]}"
        assert (plan["tp"], plan["pp"], plan["mbs"]) == (
            printed["tp"],
            printed["pp"],
            printed["mbs"],
        )
        assert plan["dp"] * plan["tp"] * plan["pp"] * plan["cp"] == plan["gpus"]

    # GBS 128 at the recipe's 16 GPUs: GA 8 where the recipe's GBS 1024 takes 64 (the proxy keeps the
    # recipe's GA), 8x less training for the same question: does the installed wheel's workload run?
    run = env.llmb(
        "run", "qwen3", "--size", "30b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "2",
        "--proxy", "tiny", "--set", "gbs=128", "--json",
    )  # fmt: skip
    summary = json.loads(run.stdout)
    assert summary["state"] == "SUCCEEDED", summary
    (result,) = env.llmb_json("results", summary["experiment_dir"])
    assert (result["workload"], result["status"], result["proxy"]) == ("qwen3", "success", True)
    assert result["tokens_per_s"] > 0
    assert "qwen3" in env.llmb("results").stdout

    env.pip("uninstall", "--yes", "llmb-plugin-qwen3")
    assert env.llmb_json("list") == four
    assert sorted(p["name"] for p in env.llmb_json("plugins")) == sorted(FOUR)
    env.llmb("plan", "qwen3", "--gpus", "8", expect=2)


# "no": a name YAML would read as False unquoted (issue 41, item 3)
@pytest.mark.parametrize("name", ["demo", "no"])
def test_a_scaffolded_plugin_passes_its_own_tests(env, four, tmp_path, name):
    made = env.llmb("plugins", "new", name, "--dir", str(tmp_path / f"llmb-plugin-{name}"))
    assert f"tests/test_{name}.py" in made.stdout
    (wheel,) = env.build(tmp_path / f"llmb-plugin-{name}")
    env.pip("install", "--no-deps", "--no-index", wheel)
    try:
        tests = _run(
            [env.python, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
            cwd=tmp_path / f"llmb-plugin-{name}",
            env=env.env(),
        )
        assert " passed" in tests.stdout and "skipped" not in tests.stdout, tests.stdout
        assert name in {e["workload"] for e in env.llmb_json("list")}
    finally:
        env.pip("uninstall", "--yes", f"llmb-plugin-{name}")
    assert env.llmb_json("list") == four
