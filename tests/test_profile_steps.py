"""Issue 41, item 7: ``--steps 10 --profile`` on the production engine silently ran 50 steps (the
seed's profile window, 45-50, set the framework's train_iters), and neither ``llmb plan`` nor
``llmb run --dry-run`` said so. Through the real ``llmb`` in a subprocess: the steps asked for
(``--steps``, ``--set steps``) are the steps the framework is told to run, on both engines; the
default window moves into them, and plan and the dry run say so; a window asked for that ends after
the run's last step is refused, saying why, before anything is submitted. A real submission (to a
stand-in sbatch) writes the framework configuration with train_iters 10."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

H100_8B = ("llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8")
PRODUCTION = (*H100_8B, "--engine", "production", "--backend", "slurm", "--bare")
ASKED = ("--steps", "10", "--profile")
MOVED = (
    "--profile on a run of 10 steps: the profile window moves from the published recipe's "
    "steps 45-50, past the run's end, to steps 5-10"
)


@pytest.fixture
def fake_sbatch(tmp_path) -> tuple[Path, Path]:
    """(a bin directory whose sbatch records each job it is given and answers job 4242, the log)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "sbatch.log"
    bin_dir.mkdir()
    script = bin_dir / "sbatch"
    script.write_text(
        f'#!/bin/sh\nif [ "$1" = --parsable ]; then echo "$@" >> {log}; echo 4242; fi\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bin_dir, log


@pytest.fixture
def llmb(llmb_proc, tmp_path):
    install = tmp_path / "install"

    def run(*args: str, path: Path | None = None):
        found = f"{path}{os.pathsep}{os.environ['PATH']}" if path else str(tmp_path / "no-bin")
        result = llmb_proc(*args, env={"LLMB_INSTALL": str(install), "PATH": found}, timeout=120)
        assert "Traceback" not in result.err and "internal error" not in result.err, result.err
        return result

    run.install = install
    return run


def framework_config(result) -> dict:
    assert result.code == 0, result.err
    spec = json.loads(result.out)["run_spec"]
    return spec


def window(config: dict) -> tuple[int, int]:
    return config["profiling"]["start_step"], config["profiling"]["stop_step"]


def test_the_steps_asked_for_are_the_steps_the_production_framework_runs(llmb):
    for steps in (ASKED, ("--set", "steps=10", "--profile")):
        dry = llmb("run", *PRODUCTION, *steps, "--dry-run", "--json")
        spec = framework_config(dry)
        config = spec["framework_config"]
        assert spec["steps"] == 10
        assert config["training"]["train_iters"] == 10
        assert config["overrides"]["train.train_iters"] == 10
        # the window lies within the run, and Megatron-Bridge is told so
        assert window(config) == (5, 10)
        assert (
            config["overrides"]["profiling.profile_step_start"],
            config["overrides"]["profiling.profile_step_end"],
        ) == (5, 10)
        assert f"llmb: warning: {MOVED}" in dry.err, dry.err
    text = llmb("run", *PRODUCTION, *ASKED, "--dry-run")
    assert text.code == 0 and MOVED in text.err, text.err


def test_plan_shows_the_steps_and_says_the_window_moved(llmb):
    shown = llmb("plan", *PRODUCTION, *ASKED)
    assert shown.code == 0, shown.err
    assert "32 layers, 10 steps" in shown.out, shown.out
    assert MOVED in shown.out
    run = json.loads(llmb("plan", *PRODUCTION, *ASKED, "--json").out)["run"]
    assert run["steps"] == 10 and any(MOVED in w for w in run["warnings"]), run


def test_the_nemo2_recipe_runs_the_steps_asked_for_too(llmb):
    config = framework_config(
        llmb("run", *PRODUCTION, "--variant", "nemo2", *ASKED, "--dry-run", "--json")
    )["framework_config"]
    assert (
        config["training"]["train_iters"] == 10 and config["overrides"]["trainer.max_steps"] == 10
    )
    assert window(config) == (5, 10)  # the seed's 20-25, moved into the run


def test_a_window_asked_for_past_the_runs_end_is_refused_before_anything_is_submitted(
    llmb, fake_sbatch
):
    bin_dir, log = fake_sbatch
    past = (*ASKED, "--profile-start", "45", "--profile-stop", "50")
    said = (
        "the profile window 45-50 (--profile-start/--profile-stop, or PROFILE_START_STEP/"
        "PROFILE_STOP_STEP) ends after the run's last step: the run asked for (--steps or --set "
        "steps) has steps 1-10. Profile steps within them (e.g. --profile-start 5 --profile-stop 10), "
        "or run at least 50 steps."
    )
    for command in (
        ("run", *PRODUCTION, *past, "--dry-run"),
        ("plan", *PRODUCTION, *past),
        ("run", *PRODUCTION, *past, "--detach"),
    ):
        refused = llmb(*command, path=bin_dir)
        assert refused.code == 2 and said in refused.err, (command, refused.err)
    assert not log.exists()
    assert not (llmb.install / "jobs").exists() or not list((llmb.install / "jobs").iterdir())
    # within the run, the window asked for stands and the run keeps its steps
    inside = framework_config(
        llmb(
            "run",
            *PRODUCTION,
            *ASKED,
            "--profile-start",
            "3",
            "--profile-stop",
            "6",
            "--dry-run",
            "--json",
        )
    )["framework_config"]
    assert window(inside) == (3, 6) and inside["training"]["train_iters"] == 10


def test_the_submitted_runs_framework_configuration_has_the_steps(llmb, fake_sbatch):
    bin_dir, log = fake_sbatch
    started = llmb("run", *PRODUCTION, *ASKED, "--detach", "--json", path=bin_dir)
    assert started.code == 0, started.err
    assert MOVED in started.err
    job = json.loads(started.out)["job_id"]
    assert log.read_text().startswith("--parsable")
    run = json.loads((llmb.install / "jobs" / job / "run.json").read_text())
    assert run["steps"] == 10
    assert run["framework_config"]["training"]["train_iters"] == 10
    assert run["framework_config"]["overrides"]["train.train_iters"] == 10
    assert window(run["framework_config"]) == (5, 10)


def test_without_steps_a_profiled_run_ends_at_its_window_as_the_published_launchers_do(llmb):
    config = framework_config(llmb("run", *PRODUCTION, "--profile", "--dry-run", "--json"))[
        "framework_config"
    ]
    assert config["training"]["train_iters"] == 50 and window(config) == (45, 50)


def test_the_torch_engine_profiles_within_the_steps_asked_for(llmb):
    proxy = ("llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "2")
    dry = llmb("run", *proxy, "--proxy", "tiny", "--steps", "3", "--profile", "--dry-run", "--json")
    spec = framework_config(dry)
    assert spec["steps"] == 3
    assert (spec["profile"]["start"], spec["profile"]["stop"]) == (1, 3)
    assert "the profile window moves from the published recipe's steps 45-50" in dry.err
    refused = llmb(
        "run",
        *proxy,
        "--proxy",
        "tiny",
        "--steps",
        "3",
        "--profile",
        "--profile-start",
        "2",
        "--profile-stop",
        "5",
        "--dry-run",
    )
    assert refused.code == 2, refused.err
    assert "the profile window 2-5 (--profile-start/--profile-stop" in refused.err
    assert "has steps 1-3" in refused.err and "--profile-start 2 --profile-stop 3" in refused.err
