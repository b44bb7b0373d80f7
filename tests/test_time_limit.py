"""A cluster job gets a time limit derived from the run when none is given (issue 23): the plan shows it
and how it was derived, the sbatch script carries it, and a flag, SBATCH_TIMELIMIT or the cluster file
replace it. Real recipes, real dry runs of the Slurm backend."""

from __future__ import annotations

import json

import pytest
from llmb.recipes import time_limit

LLAMA4_H100 = ("llama4", "--gpu", "h100", "--dtype", "bf16", "--gpus", "512")
LLAMA31_8B_H100 = ("llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8")


def test_the_rule_floor_margin_and_rounding():
    # nothing to go by: the floor
    assert time_limit.derive(50, None, "none", 8e9).slurm == "00:30:00"
    assert time_limit.derive(50, 1.0, "published", 8e9).minutes == 30  # 10.8 + 1.7 min: the floor
    # 10 + 40 min start-up for 400e9 parameters, 2 x 50 x 4.426 s = 7.4 min: 57.4 -> 60 min
    limit = time_limit.derive(50, 4.426, "published", 400e9)
    assert (limit.minutes, limit.slurm) == (60, "01:00:00")
    # 10 + 2 x 50 x 1000 s = 1,676.7 min -> 1,680: hours beyond a day stay hours
    assert time_limit.derive(50, 1000.0, "estimate", 0).slurm == "28:00:00"
    # the estimate: FLOPs of a step over the GPUs' peak at 30% MFU
    assert time_limit.estimated_step_s(1e15, 128, 8, 1000.0) == pytest.approx(
        1e15 * 128 / (8 * 300e12)
    )
    assert time_limit.estimated_step_s(None, 128, 8, 1000.0) is None


def test_the_plan_derives_it_from_the_published_step_time(cli):
    plan = json.loads(cli("plan", *LLAMA4_H100, "--json").out)
    assert plan["expected"]["step_time_s"] == 4.426
    assert (
        plan["time_limit"]["step_s"] == 4.426 and plan["time_limit"]["step_source"] == "published"
    )
    # 400B parameters: 50 min start-up + 7.4 min of steps
    assert plan["time_limit"]["slurm"] == "01:00:00"
    text = cli("plan", *LLAMA4_H100).out
    assert "time limit   01:00:00 on a cluster (" in text and "x 4.43 s (published)" in text
    # the margin says what it is for (issue 43: "2 x 50 steps" was not explained)
    assert (
        "+ 50 steps x 4.43 s (published), x 2 for steps slower than that, at least 30 min"
        in " ".join(text.split())
    )


def test_without_a_figure_of_its_own_the_plan_takes_another_documents_or_an_estimate(cli):
    other = json.loads(cli("plan", *LLAMA31_8B_H100, "--json").out)
    assert other["expected"] is None and other["other_figures"]
    assert other["time_limit"]["step_s"] == pytest.approx(
        other["other_figures"][0]["step_time_ms"] / 1000
    )
    assert other["time_limit"]["step_source"] == other["other_figures"][0]["label"]
    tuned = json.loads(cli("plan", *LLAMA31_8B_H100, "--set", "tp=2", "--json").out)
    assert tuned["time_limit"]["step_source"] == "estimate"
    per_sample, gbs, gpus = tuned["model_flops_per_sample"], tuned["gbs"], tuned["gpus"]
    assert tuned["time_limit"]["step_s"] == pytest.approx(per_sample * gbs / (gpus * 989e12 * 0.30))


def _script(cli, *extra: str) -> str:
    result = cli("run", *LLAMA4_H100, "--backend", "slurm", "--dry-run", "--bare", *extra)
    assert result.code == 0, result.err
    return result.out


@pytest.fixture
def slurm_commands_absent(monkeypatch, tmp_path):
    """No sinfo here: a dry run says what a real submission would check, and goes on."""
    monkeypatch.setenv("PATH", str(tmp_path))


def test_the_sbatch_script_carries_it_and_each_source_replaces_it(
    cli, monkeypatch, tmp_path, slurm_commands_absent
):
    assert "#SBATCH --time=01:00:00" in _script(cli)
    assert "#SBATCH --time=20" in _script(cli, "--time-limit", "20")
    monkeypatch.setenv("SBATCH_TIMELIMIT", "2:00:00")
    assert "#SBATCH --time=2:00:00" in _script(cli)
    monkeypatch.delenv("SBATCH_TIMELIMIT")
    install = tmp_path / "install"
    install.mkdir()
    (install / "cluster.yaml").write_text("slurm:\n  time: '45'\n")
    monkeypatch.setenv("LLMB_INSTALL", str(install))
    assert "#SBATCH --time=45" in _script(cli)


def test_a_proxy_on_a_cluster_gets_the_floor(cli, slurm_commands_absent):
    out = cli(
        "run",
        *LLAMA4_H100[:-1],
        "2",
        "--proxy",
        "tiny",
        "--backend",
        "slurm",
        "--dry-run",
        "--bare",
    )
    assert out.code == 0, out.err
    assert "#SBATCH --time=00:30:00" in out.out
