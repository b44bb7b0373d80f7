"""Shared helpers: the installed ``llmb`` command, run with a throw-away install directory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def llmb_command() -> str:
    beside = Path(sys.executable).parent / "llmb"
    found = str(beside) if beside.exists() else shutil.which("llmb")
    if found is None:
        pytest.fail("the llmb command is not installed beside this Python (pip install llmb)")
    return found


@pytest.fixture
def llmb(tmp_path):
    """``llmb(*args)`` runs the installed CLI with LLMB_INSTALL in a temporary directory: the
    CompletedProcess; ``.json()`` of it parses stdout."""
    env = {**os.environ, "LLMB_INSTALL": str(tmp_path / "install"), "COLUMNS": "200"}

    def run(*args: str, timeout: float = 120, check: bool = True):
        done = subprocess.run(
            [llmb_command(), *args], env=env, capture_output=True, text=True, timeout=timeout
        )
        if check:
            assert done.returncode == 0, f"llmb {' '.join(args)}: {done.stderr[-3000:]}"
        done.json = lambda: json.loads(done.stdout)
        return done

    run.env = env
    return run
