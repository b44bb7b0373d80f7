"""One vocabulary for a run's result: a run shorter than the statistics
window is ``too_short`` (warned before it starts), a cancelled job's run is
``cancelled``, and results and compare say the same word."""

from __future__ import annotations

import json
from pathlib import Path

import loggen
import pytest
from experiment_dirs import make_run

MB8 = "pretrain_llama3_8b_fp8_gpus8_tp1_pp1_cp1_vpNone_ep1_etpNone_mbs2_gbs128"


@pytest.fixture
def install(install_root):
    return install_root


def _experiments(install: Path) -> Path:
    return install / "workloads" / "llama31" / "experiments"


def test_a_short_run_is_warned_before_it_starts(cli, install):
    result = cli(
        "run",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        "8",
        "--backend",
        "slurm",
        "--steps",
        "20",
        "--no-window-check",
        "--dry-run",
    )
    assert result.code == 0, result.err
    assert (
        "20 steps end before the statistics window's end (44): the run's result will be too_short"
        in result.err
    )


def test_the_warning_and_the_result_ask_for_the_same_steps_on_nemo2(cli, install):
    """NeMo 2 counts iterations from 0: a run reaches iteration 44 in 45 steps. The warning before the
    run said 44 while the result said 45 (issue 34); both now say what the log format needs."""
    result = cli(
        "run",
        *("llama31", "--variant", "nemo2", "--size", "8b", "--gpu", "h100", "--dtype", "bf16"),
        *("--gpus", "8", "--backend", "slurm", "--steps", "20", "--no-window-check", "--dry-run"),
    )
    assert result.code == 0, result.err
    assert "window's end (44)" in result.err and "run at least 45 steps." in result.err


def test_a_run_that_ended_before_the_window_is_too_short_everywhere(cli, install):
    make_run(_experiments(install), MB8, loggen.megatron_bridge_lines(range(1, 21), last=20))
    [row] = cli("results", "--json").json()
    assert row["status"] == "too_short"
    assert (
        "ended normally at iteration 20, before the end of the statistics window 35-44"
        in row["failure_reason"]
    )
    compared = cli("compare", "--json")
    assert compared.code == 1
    [verdict] = json.loads(compared.out)[0]["verdicts"]
    assert verdict["outcome"] == "too_short"
    text = cli("compare").out
    assert "TOO_SHORT" in text and "FAILED" not in text


def test_a_cancelled_jobs_run_is_cancelled_not_incomplete(cli, install):
    job_id = "local-abc123"
    run = make_run(
        _experiments(install),
        MB8,
        loggen.megatron_bridge_lines(range(1, 13)),
        recipe={
            "workload": "llama31",
            "size": "8b",
            "gpu": "h100",
            "dtype": "fp8",
            "gpus": 8,
            "gbs": 128,
            "seq_len": 8192,
            "job_id": job_id,
        },
    )
    job = install / "jobs" / job_id
    job.mkdir(parents=True)
    (job / "exit.json").write_text(
        json.dumps({"state": "CANCELLED", "reason": "cancelled by the user"})
    )
    [row] = cli("results", "--json", "--rescan").json()
    assert (row["status"], row["failure_reason"]) == (
        "cancelled",
        "the job was cancelled at iteration 12",
    )
    [verdict] = json.loads(cli("compare", str(run), "--json").out)[0]["verdicts"]
    assert verdict["outcome"] == "cancelled"
    assert "CANCELLED" in cli("compare", str(run)).out


def test_the_same_log_without_a_job_record_is_incomplete(cli, install):
    make_run(_experiments(install), MB8, loggen.megatron_bridge_lines(range(1, 13)))
    [row] = cli("results", "--json").json()
    assert row["status"] == "incomplete"
