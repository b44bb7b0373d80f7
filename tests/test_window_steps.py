"""A run whose steps end before the statistics window is refused before it is submitted (issue 43, item
5), as a certification already refused it; --no-window-check runs it (a smoke test), and a mean over part
of the window is printed with its count beside it."""

from __future__ import annotations

from llmb.lifecycle.follow import summary
from llmb.runs.jobs import Job, JobStatus

LLAMA4 = ["run", "llama4", "--size", "400b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "2"]


def test_steps_before_the_window_are_refused_with_the_steps_needed(cli, install_root):
    refused = cli(*LLAMA4, "--proxy", "tiny", "--steps", "12")
    assert refused.code == 2
    assert (
        "llmb: error: 12 steps end before the statistics window's end (44): the run's result will be "
        "too_short, with no step-time statistics to compare; run at least 44 steps (--steps 44), or "
        "add --no-window-check to run it anyway (a smoke test). Nothing was started."
    ) in refused.err
    assert not (install_root / "jobs").exists() or not any((install_root / "jobs").iterdir())
    # the same by --set steps=12; and a dry run says what a submission would refuse, exit 0
    assert cli(*LLAMA4, "--proxy", "tiny", "--set", "steps=12").code == 2
    described = cli(*LLAMA4, "--proxy", "tiny", "--steps", "12", "--dry-run")
    assert described.code == 0
    assert "a real submission would stop here: 12 steps end before" in described.err
    # a smoke test is warned, once, and described as it would run
    smoke = cli(*LLAMA4, "--proxy", "tiny", "--steps", "12", "--no-window-check", "--dry-run")
    assert smoke.code == 0 and "stop here" not in smoke.err
    assert smoke.err.count("12 steps end before the statistics window's end (44)") == 1
    # a run whose purpose is its profile is warned, not refused (its profile moves to its last steps)
    profiled = cli(*LLAMA4, "--proxy", "tiny", "--steps", "12", "--profile", "--dry-run")
    assert profiled.code == 0 and "stop here" not in profiled.err


def _summary(samples: int) -> str:
    job = Job("local-1", "local", "llama4", "x", "/r", "/r/log", 2, "2026-12-03T00:00:00Z")
    row = {
        "status": "too_short",
        "window": "11-44",
        "samples_in_window": samples,
        "time_mean_ms": 1234.5,
        "time_std_dev_ms": 5.0,
        "tokens_per_s": 100.0,
        "tflops_per_gpu_mean": 1.0,
        "tflops_source": "log",
    }
    return summary(JobStatus(job, "SUCCEEDED", None, None, {"result": row}))


def test_a_mean_over_part_of_the_window_carries_its_count():
    assert (
        "  step time   1,234.5 ms mean of only 2 of the window's 34 steps, 5.00 ms std"
        in _summary(2)
    )
    whole = _summary(34)  # the whole window: no words
    assert "  step time   1,234.5 ms mean, 5.00 ms std" in whole
