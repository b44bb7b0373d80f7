"""Warnings on stderr: one plain ``llmb: warning:`` line per distinct warning,
however many tasks meet it, and never a made-up job id; structlog JSON lines
only where asked (``llmb --log-format json`` or ``LLMB_LOG_FORMAT=json``).
The failing cluster is a real command on PATH: an ``sinfo`` that exits 1."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from private_slurm import wrapper
from test_plugins import install_fake_distribution

SINFO = "the nodes' GPUs could not be read (sinfo failed: Unable to contact slurm controller"
CERTIFY = (
    "certify",
    "--gpu",
    "h100",
    "--dry-run",
    "--backend",
    "slurm",
    "--account",
    "acct",
    "--partition",
    "batch",
)
SWEEP = (
    "sweep",
    "llama31",
    "--size",
    "8b",
    "--dtype",
    "bf16,fp8",
    "--gpus",
    "8,16",
    "--gpu",
    "h100",
    "--backend",
    "slurm",
    "--dry-run",
    "--account",
    "acct",
    "--partition",
    "batch",
)


@pytest.fixture
def env(tmp_path):
    """A PATH whose sinfo fails, and a fresh install."""
    sinfo = wrapper(
        tmp_path / "shims",
        "sinfo",
        'echo "sinfo: error: Unable to contact slurm controller (connect failure)" >&2; exit 1',
    )
    return {
        "PATH": f"{sinfo.parent}{os.pathsep}{os.environ['PATH']}",
        "LLMB_NO_CACHE": "1",
        "LLMB_INSTALL": str(tmp_path / "install"),
    }


def warnings_of(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("llmb: warning: ")]


def json_lines(err: str) -> list[dict]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


def test_certify_dry_run_with_a_failing_sinfo_says_so_once_in_one_plain_line(llmb_proc, env):
    result = llmb_proc(*CERTIFY, env=env)
    assert result.code == 0, result.err
    assert "nothing was submitted (--dry-run)" in result.err  # twelve jobs were described
    said = [line for line in warnings_of(result.err) if SINFO in line]
    assert len(said) == 1, result.err
    assert said[0].startswith(
        f"llmb: warning: {SINFO} (connect failure)): the GPU type is not checked"
    )
    assert not [line for line in result.err.splitlines() if line.lstrip().startswith("{")], (
        result.err
    )
    # no job id: nothing was submitted
    assert not re.search(r"slurm-[0-9a-f]{6}", result.err), result.err
    assert len(warnings_of(result.err)) == len(set(warnings_of(result.err)))


@pytest.mark.parametrize("asked", ["option", "variable"])
def test_json_lines_only_where_asked_and_each_warning_once(llmb_proc, env, asked):
    args, extra = (
        (("--log-format", "json", *CERTIFY), {})
        if asked == "option"
        else (CERTIFY, {"LLMB_LOG_FORMAT": "json"})
    )
    result = llmb_proc(*args, env={**env, **extra})
    assert result.code == 0, result.err
    assert not warnings_of(result.err), result.err
    logged = json_lines(result.err)
    said = [line for line in logged if SINFO in line["event"]]
    assert len(said) == 1, result.err
    assert said[0]["level"] == "warning" and "timestamp" in said[0] and "job" not in said[0]
    assert len({line["event"] for line in logged}) == len(logged)


def test_the_option_wins_over_the_variable(llmb_proc, env):
    result = llmb_proc("--log-format", "console", *CERTIFY, env={**env, "LLMB_LOG_FORMAT": "json"})
    assert result.code == 0 and not json_lines(result.err)
    assert len([line for line in warnings_of(result.err) if SINFO in line]) == 1


def test_a_bad_log_format_is_refused_naming_the_variable(llmb_proc):
    result = llmb_proc("list", env={"LLMB_LOG_FORMAT": "xml"})
    assert result.code == 2 and "'xml' is not one of 'console', 'json'" in result.err
    assert "environment variable LLMB_LOG_FORMAT" in result.err


def test_a_sweep_says_a_warning_its_tasks_share_once(llmb_proc, env):
    result = llmb_proc(*SWEEP, env=env)
    assert result.code == 0, result.err
    assert "4 jobs; nothing was submitted (--dry-run)" in result.err
    assert len([line for line in warnings_of(result.err) if SINFO in line]) == 1, result.err
    assert not json_lines(result.err)


def test_run_dry_run_says_the_cluster_warning_plainly(llmb_proc, env):
    result = llmb_proc(
        "run",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "fp8",
        "--gpus",
        "16",
        "--backend",
        "slurm",
        "--dry-run",
        env=env,
    )
    assert result.code == 0 and "#SBATCH --nodes=2" in result.out
    assert len([line for line in warnings_of(result.err) if SINFO in line]) == 1, result.err


def test_a_plugin_warning_is_one_plain_line_with_its_fields(llmb_proc, tmp_path):
    install_fake_distribution(tmp_path, "broken", "import nvidia_secret_sauce  # not installed\n")
    result = llmb_proc("list", env={"PYTHONPATH": str(tmp_path)})
    assert result.code == 0 and "llama31" in result.out
    (said,) = warnings_of(result.err)
    assert said.startswith(
        "llmb: warning: plugin failed to load; its workloads are unavailable (plugin: broken; "
        "provider: llmb-plugin-broken 0.3.0; error: "
    )
    assert "No module named 'nvidia_secret_sauce'" in said and not json_lines(result.err)


def test_log_level_error_hides_warnings(llmb_proc, env):
    result = llmb_proc(*CERTIFY, env={**env, "LLMB_LOG_LEVEL": "error"})
    assert result.code == 0 and SINFO not in result.err


def test_in_one_process_each_command_says_its_warnings_afresh(cli, monkeypatch, tmp_path, capsys):
    from llmb.log import warn

    warn("the same thing", n=1)
    warn("the same thing", n=1)
    warn("the same thing", n=2)
    assert capsys.readouterr().err.splitlines() == [
        "llmb: warning: the same thing (n: 1)",
        "llmb: warning: the same thing (n: 2)",
    ]
    monkeypatch.setenv("STAGE_PATH", str(tmp_path))
    monkeypatch.delenv("LLMB_INSTALL", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    for _ in range(2):  # a command, then the same command again in this process: said by each
        result = cli("install", "--dry-run", "--no-images", "--no-huggingface")
        assert len([line for line in warnings_of(result.err) if "STAGE_PATH" in line]) == 1, (
            result.err
        )


@pytest.mark.slurm
def test_a_real_slurm_sweep_says_the_failing_sinfo_once(llmb_proc, slurm, env, tmp_path):
    """Submitted for real (held, then cancelled): each job's log has the warning; the terminal has it once."""
    env = {**env, **slurm.env(), "ADDITIONAL_SLURM_PARAMS": "hold"}
    result = llmb_proc(
        "sweep",
        "llama31",
        "--size",
        "8b",
        "--dtype",
        "bf16,fp8",
        "--gpus",
        "2",
        "--gpu",
        "h100",
        "--proxy",
        "tiny",
        "--bare",
        "--steps",
        "3",
        "--no-window-check",
        "--backend",
        "slurm",
        "--detach",
        "--json",
        env=env,
        timeout=300,
    )
    try:
        assert result.code == 0, result.err
        assert len([line for line in warnings_of(result.err) if SINFO in line]) == 1, result.err
    finally:
        jobs = Path(env["LLMB_INSTALL"]) / "jobs"
        for job in sorted(jobs.iterdir()) if jobs.is_dir() else ():
            llmb_proc("cancel", job.name, env=env, timeout=120)
    logs = [json.loads((job / "job.json").read_text())["log"] for job in sorted(jobs.iterdir())]
    assert len(logs) == 2 and all(SINFO in Path(log).read_text() for log in logs)
