"""``llmb sweep --skip-invalid``: the tasks that cannot run are listed with
their reason and skipped, the others are planned or run; without the flag
the refusal says it exists; when nothing can run it exits 2 with every
reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# 70b needs at least 64 GPUs: of these four only 70b on 8 GPUs cannot run (on a cluster backend).
MIXED = (
    "sweep",
    "llama31",
    "--size",
    "8b,70b",
    "--gpu",
    "h100",
    "--dtype",
    "bf16",
    "--gpus",
    "8,64",
    "--backend",
    "slurm",
)
SKIPPED_LINE = (
    "skipped llama31 70b h100 bf16 on 8 GPUs: llama31 70b bf16 on h100 needs at least 64 GPUs"
)
PLANNED = [
    "llama31 8b h100 bf16 8 GPUs",
    "llama31 8b h100 bf16 64 GPUs",
    "llama31 70b h100 bf16 64 GPUs",
]


@pytest.fixture
def install(tmp_path):
    return {"LLMB_INSTALL": str(tmp_path / "install"), "LLMB_NO_CACHE": "1"}


def test_dry_run_lists_the_skipped_with_their_reason_and_plans_the_rest(cli):
    result = cli(*MIXED, "--skip-invalid", "--dry-run")
    assert result.code == 0, result.err
    skipped = [line for line in result.err.splitlines() if line.startswith("skipped ")]
    assert len(skipped) == 1 and skipped[0].startswith(SKIPPED_LINE), result.err
    assert "3 jobs, 1 skipped; nothing was submitted (--dry-run)." in result.err
    assert all(task in result.out for task in PLANNED), result.out
    assert "70b h100 bf16 8 GPUs" not in result.out


def test_dry_run_json_has_the_jobs_and_a_skipped_list(cli):
    result = cli(*MIXED, "--skip-invalid", "--dry-run", "--json")
    assert result.code == 0, result.err
    shown = result.json()
    assert [j["task"] for j in shown["jobs"]] == PLANNED
    [skipped] = shown["skipped"]
    assert {
        k: skipped[k] for k in ("task", "workload", "size", "gpu", "dtype", "gpus", "source")
    } == {
        "task": "llama31 70b h100 bf16 8 GPUs",
        "workload": "llama31",
        "size": "70b",
        "gpu": "h100",
        "dtype": "bf16",
        "gpus": 8,
        "source": "command line",
    }
    assert "needs at least 64 GPUs; 8 is below the smallest tested scale" in skipped["reason"]


def test_without_the_flag_nothing_runs_and_the_refusal_names_the_flag(llmb_proc, install):
    result = llmb_proc(*MIXED, "--dry-run", env=install)
    assert result.code == 2 and "Traceback" not in result.err
    assert "1 of 4 sweep tasks cannot run; nothing was submitted:" in result.err
    assert "  - llama31 70b h100 bf16 8 GPUs (command line): " in result.err
    assert "Pass --skip-invalid to run the 3 valid ones." in result.err
    assert not Path(install["LLMB_INSTALL"]).exists()


@pytest.mark.parametrize("dry_run", [("--dry-run",), ()], ids=["dry-run", "run"])
def test_when_nothing_can_run_it_exits_2_with_every_reason(llmb_proc, install, dry_run):
    result = llmb_proc(
        "sweep",
        "llama31",
        "--size",
        "70b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        "8,16",
        "--backend",
        "slurm",
        "--skip-invalid",
        *dry_run,
        env=install,
    )
    assert result.code == 2 and "Traceback" not in result.err
    assert "2 of 2 sweep tasks cannot run; nothing was submitted:" in result.err
    reasons = [line for line in result.err.splitlines() if line.startswith("  - ")]
    assert len(reasons) == 2 and all("needs at least 64 GPUs" in line for line in reasons)
    assert "--skip-invalid leaves nothing to run." in result.err
    assert "Pass --skip-invalid" not in result.err
    assert not (Path(install["LLMB_INSTALL"]) / "sweeps").exists()


def test_a_real_sweep_runs_the_valid_tasks_and_never_starts_the_skipped(
    llmb_proc, install, monkeypatch
):
    pytest.importorskip("torch", reason="the torch engine needs torch")
    # nvfp4 is no published dtype of llama31 and no machine carries 4096 CPU-proxy ranks: one of four runs.
    result = llmb_proc(
        "sweep",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16,nvfp4",
        "--gpus",
        "1,4096",
        "--proxy",
        "tiny",
        "--steps",
        "3",
        "--no-window-check",
        "--skip-invalid",
        "--json",
        env=install,
        timeout=600,
    )  # a hang guard only
    assert result.code == 0, result.err
    shown = json.loads(result.out)
    assert [(j["task"], j["state"]) for j in shown["jobs"]] == [
        ("llama31 8b h100 bf16 1 GPU", "SUCCEEDED")
    ]
    skipped = {s["task"]: s["reason"] for s in shown["skipped"]}
    assert set(skipped) == {
        "llama31 8b h100 bf16 4096 GPUs",
        "llama31 8b h100 nvfp4 1 GPU",
        "llama31 8b h100 nvfp4 4096 GPUs",
    }
    assert "has no dtype 'nvfp4'" in skipped["llama31 8b h100 nvfp4 1 GPU"]
    assert "4096" in skipped["llama31 8b h100 bf16 4096 GPUs"]
    # Each skipped one is listed on stderr before the sweep submits anything.
    lines = result.err.splitlines()
    listed = [n for n, line in enumerate(lines) if line.startswith("skipped llama31 8b h100 ")]
    started = next(
        n for n, line in enumerate(lines) if line.startswith(f"{shown['sweep_id']}: 1 job on local")
    )
    assert len(listed) == 3 and max(listed) < started
    # Only the valid task is in the sweep, and only its job was ever made.
    monkeypatch.setenv("LLMB_INSTALL", install["LLMB_INSTALL"])
    from llmb.runs.sweeps import load_sweep

    sweep = load_sweep(shown["sweep_id"])
    assert [t.label for t in sweep.tasks] == ["llama31 8b h100 bf16 1 GPU"]
    jobs = sorted(p.name for p in (Path(install["LLMB_INSTALL"]) / "jobs").iterdir())
    assert jobs == [shown["jobs"][0]["job_id"]]
