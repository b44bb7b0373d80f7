"""Plugins' own tests, run as their authors run them, in their directories with their own pytest
settings: the example third-party plugin's (examples/llmb-plugin-qwen3/tests), and those of any other
plugin in the repository (plugins/*, backends/*, examples/*) that has tests of its own. The suite's
testpaths (tests/) reaches none of them: this is how CI runs every one, slow ones included. The
example's default run leaves out its slow tests (a plugin author's loop stays short)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "llmb-plugin-qwen3"
PLUGIN_FOLDERS = ("plugins", "backends", "examples")
# every plugin directory with tests of its own (tests/test_architecture.py holds every test file of the
# repository to tests/ or one of these)
PLUGINS_WITH_TESTS = sorted(
    {
        path.parents[1]
        for folder in PLUGIN_FOLDERS
        for path in ROOT.glob(f"{folder}/*/tests/test_*.py")
    }
)

pytestmark = pytest.mark.slow


def _pytest(*args: str, plugin: Path = EXAMPLE) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
        cwd=plugin,
        capture_output=True,
        text=True,
        timeout=1800,
    )


def test_a_plain_pytest_there_leaves_the_slow_tests_out():
    listed = _pytest("--collect-only", "-q")
    assert listed.returncode == 0, listed.stdout[-3000:]
    assert "deselected" in listed.stdout.splitlines()[-1], listed.stdout[-500:]
    assert "test_a_tiny_proxy_runs_and_its_log_is_read" not in listed.stdout


def test_the_example_is_among_the_plugins_whose_tests_run():
    assert EXAMPLE in PLUGINS_WITH_TESTS


@pytest.mark.parametrize("plugin", PLUGINS_WITH_TESTS, ids=[p.name for p in PLUGINS_WITH_TESTS])
def test_every_test_of_each_plugin_passes(plugin):
    ran = _pytest("-m", "slow or not slow", "-q", plugin=plugin)
    assert ran.returncode == 0, ran.stdout[-5000:]
    last = ran.stdout.strip().splitlines()[-1]
    assert " passed" in last and "skipped" not in last and "deselected" not in last, last
