"""The example third-party plugin's own tests (examples/llmb-plugin-qwen3/tests), run as its author runs
them, in its directory with its own pytest settings (issue 43, item 7): its default run leaves out the
slow tests (a plugin author's loop stays short), and CI runs every one of them, slow ones included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "llmb-plugin-qwen3"

pytestmark = pytest.mark.slow


def _pytest(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
        cwd=EXAMPLE,
        capture_output=True,
        text=True,
        timeout=1800,
    )


def test_a_plain_pytest_there_leaves_the_slow_tests_out():
    listed = _pytest("--collect-only", "-q")
    assert listed.returncode == 0, listed.stdout[-3000:]
    assert "deselected" in listed.stdout.splitlines()[-1], listed.stdout[-500:]
    assert "test_a_tiny_proxy_runs_and_its_log_is_read" not in listed.stdout


def test_every_test_of_the_example_plugin_passes():
    ran = _pytest("-m", "slow or not slow", "-q")
    assert ran.returncode == 0, ran.stdout[-5000:]
    last = ran.stdout.strip().splitlines()[-1]
    assert " passed" in last and "skipped" not in last and "deselected" not in last, last
