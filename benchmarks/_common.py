"""What the benchmark scripts share (each is run as a script, so this directory is on sys.path)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def llmb_executable() -> str:
    """The ``llmb`` beside this Python (the checkout's .venv), else on PATH; exits saying how to get one."""
    beside = Path(sys.executable).with_name("llmb")
    found = str(beside) if beside.exists() else shutil.which("llmb")
    if not found:
        sys.exit(
            "llmb is not installed in this environment; run ./dev.sh setup and use .venv/bin/python"
        )
    return found
