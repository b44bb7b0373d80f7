"""The README's "A scaling study" commands, run as written in a fresh directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from readme_blocks import walkthrough_commands

pytest.importorskip(
    "torch", reason="the walkthrough trains proxies (./dev.sh installs torch==2.13.0)"
)
pytest.importorskip(
    "matplotlib", reason="the walkthrough draws a report (./dev.sh installs matplotlib)"
)


def test_the_walkthrough_is_the_promised_study():
    commands = walkthrough_commands("A scaling study")
    assert [c.split()[1] for c in commands if c.startswith("llmb ")] == [
        "sweep",
        "sweep",
        "results",
        "report",
        "archive",
    ]


def test_readme_scaling_study_runs_as_written(tmp_path):
    script = "set -euo pipefail\n" + "\n".join(walkthrough_commands("A scaling study")) + "\n"
    env = {k: v for k, v in os.environ.items() if k != "LLMB_INSTALL"}
    # where llmb is installed
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["TMPDIR"] = str(tmp_path)  # the block's `cd "$(mktemp -d)"` lands here
    checkout = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        ["bash", "-c", script], cwd=checkout, env=env, capture_output=True, text=True, timeout=3600
    )  # a hang guard only: a loaded 2-core machine runs 10-100x slower
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # run from the checkout, as a user may: nothing of the study is left there
    left = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--", "scaling-study", "scaling-report"],
        cwd=checkout,
        capture_output=True,
        text=True,
    ).stdout
    assert not left and not (checkout / "scaling-study.tar.gz").exists(), left
    [fresh] = [p.parent for p in tmp_path.glob("*/scaling-study")]  # the block's fresh directory

    study = fresh / "scaling-study"
    [sweep_file] = study.glob("sweeps/*/sweep.json")
    sweep = json.loads(sweep_file.read_text())
    assert len([j for j in sweep["jobs"] if j]) == 4  # the dry run saved no sweep
    assert proc.stdout.count("SUCCEEDED") >= 4  # the sweep's final table
    report = fresh / "scaling-report"
    for name in (
        "index.html",
        "summary.md",
        "step_time.png",
        "tokens_per_s.png",
        "scaling_efficiency.png",
    ):
        assert (report / name).is_file(), name
    assert "4 runs: 4 plotted in 1 series" in (report / "summary.md").read_text()
    with tarfile.open(fresh / "scaling-study.tar.gz") as tar:
        logs = [n for n in tar.getnames() if n.endswith(".out") and "/log-" in n]
    assert len(logs) == 4
