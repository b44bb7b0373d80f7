"""``llmb run`` on the local backend, end to end, with real processes:
every workload as a 2-rank CPU proxy, job state from other shells, cancel,
a killed rank, a raising rank, checkpoints, profiling, NCCL trace."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from fault_plugin import ENV as FAULTS  # loads tests/fault_plugin.py in the ranks
from waiting import wait_for

pytest.importorskip(
    "torch", reason="the torch engine needs torch (./dev.sh installs torch==2.13.0)"
)

RUNS = {
    # workload, its CLI arguments (small-GA recipes, so 50 CPU steps stay short), window
    "llama31": (["llama31", "--size", "8b", "--gpu", "b200", "--dtype", "fp8"], "35-44"),
    "llama4": (["llama4", "--gpu", "gb200", "--dtype", "bf16"], "11-44"),
    "nemotron4": (["nemotron4", "--gpu", "h100", "--dtype", "bf16"], "35-44"),
    "nemotronh": (["nemotronh"], "11-44"),
}


@pytest.fixture
def install(tmp_path):
    return {"LLMB_INSTALL": str(tmp_path / "install"), "LLMB_NO_CACHE": "1"}


def run_json(llmb_proc, *args, env, timeout=600):
    result = llmb_proc(*args, "--json", env=env, timeout=timeout)
    return result, (json.loads(result.out) if result.out.strip() else None)


def status(llmb_proc, job_id, env):
    return json.loads(llmb_proc("status", job_id, "--json", env=env).out)


def pids(install, job_id):
    jobs = Path(install["LLMB_INSTALL"]) / "jobs" / job_id
    supervisor = json.loads((jobs / "supervisor.json").read_text())["pid"]
    ranks = [r["pid"] for r in json.loads((jobs / "ranks.json").read_text())["ranks"]]
    return supervisor, ranks


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("workload", RUNS)
def test_every_workload_runs_as_a_two_rank_proxy(llmb_proc, install, workload):
    args, window = RUNS[workload]
    result, summary = run_json(
        llmb_proc, "run", *args, "--gpus", "2", "--proxy", "tiny", env=install
    )
    assert result.code == 0, result.err[-3000:]
    assert summary["state"] == "SUCCEEDED" and summary["result"]["status"] == "success"
    # The same parser reads the engine's log; every window iteration is there.
    parsed = json.loads(llmb_proc("results", summary["experiment_dir"], "--json", env=install).out)
    (row,) = parsed
    first, last = (int(x) for x in window.split("-"))
    assert (row["status"], row["window"], row["samples_in_window"]) == (
        "success",
        window,
        last - first + 1,
    )
    # never compared with published
    assert row["proxy"] is True and row["reference_step_time_ms"] is None
    assert row["tflops_per_gpu_mean"] > 0 and row["tokens_per_s"] > 0
    recipe = json.loads((Path(summary["experiment_dir"]) / "recipe.json").read_text())
    assert (recipe["gpus"], recipe["device"], recipe["compute_dtype"], recipe["proxy_kind"]) == (
        2,
        "cpu",
        "float32",
        "tiny",
    )
    assert recipe["dtype"] == row["dtype"]  # the recipe's precision is kept beside the computed one
    log = Path(summary["log"]).read_text()
    assert "Total number of parameters in billions" in log and "memory (GB)" in log


def test_detach_then_status_logs_and_cancel_from_other_processes(llmb_proc, install):
    result, started = run_json(
        llmb_proc,
        "run",
        *RUNS["nemotronh"][0],
        "--gpus",
        "2",
        "--proxy",
        "tiny",
        "--detach",
        env=install,
    )
    assert result.code == 0 and set(started) >= {"job_id", "experiment_dir"}
    job = started["job_id"]
    wait_for(lambda: (status(llmb_proc, job, install)["progress"] or "").startswith("iteration"))
    assert status(llmb_proc, job, install)["state"] == "RUNNING"
    supervisor, ranks = pids(install, job)
    cancelled = json.loads(llmb_proc("cancel", job, "--json", env=install).out)
    assert cancelled == {"job_id": job, "state": "CANCELLED", "reason": "cancelled", "ended": True}
    assert not any(alive(p) for p in (supervisor, *ranks))
    assert status(llmb_proc, job, install)["state"] == "CANCELLED"
    assert "[llmb] cancelled" in llmb_proc("logs", job, env=install).out
    listed = json.loads(llmb_proc("status", "--json", env=install).out)
    assert [j["job_id"] for j in listed] == [job]


def test_a_killed_rank_fails_the_job_and_stops_the_others(llmb_proc, install):
    _, started = run_json(
        llmb_proc,
        "run",
        *RUNS["nemotronh"][0],
        "--gpus",
        "2",
        "--proxy",
        "tiny",
        "--detach",
        env=install,
    )
    job = started["job_id"]
    wait_for(lambda: (status(llmb_proc, job, install)["progress"] or "").startswith("iteration"))
    supervisor, ranks = pids(install, job)
    os.kill(ranks[1], signal.SIGKILL)
    final = wait_for(
        lambda: (s := status(llmb_proc, job, install))["state"] in ("FAILED", "SUCCEEDED") and s
    )
    assert final["state"] == "FAILED"
    assert final["reason"] == "rank 1 was killed by SIGKILL"
    wait_for(lambda: not any(alive(p) for p in (supervisor, *ranks)), timeout=30)


def test_a_rank_that_raises_fails_the_job_with_the_reason_from_its_log(llmb_proc, install):
    env = {**install, **FAULTS, "LLMB_FAIL_AT_STEP": "2:1"}
    result, summary = run_json(
        llmb_proc,
        "run",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "b200",
        "--dtype",
        "fp8",
        "--gpus",
        "2",
        "--proxy",
        "tiny",
        "--steps",
        "4",
        "--no-window-check",
        env=env,
    )
    assert result.code == 1
    assert summary["state"] == "FAILED"
    assert (
        summary["reason"]
        == "python exception: RuntimeError: injected failure at step 2 on rank 1 (LLMB_FAIL_AT_STEP)"
    )
    assert "[rank1]: Traceback (most recent call last):" in Path(summary["log"]).read_text()


def test_checkpoint_save_then_load_restores_identical_weights(llmb_proc, install):
    args = [
        "run",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "b200",
        "--dtype",
        "fp8",
        "--gpus",
        "2",
        "--proxy",
        "tiny",
    ]
    saved, first = run_json(
        llmb_proc, *args, "--steps", "3", "--no-window-check", "--checkpoint-save", env=install
    )
    # The job succeeded; its result is too_short: 3 steps end before the window.
    assert (
        saved.code == 0
        and first["state"] == "SUCCEEDED"
        and first["result"]["status"] == "too_short"
    )
    checkpoint = next(Path(first["experiment_dir"]).rglob("iter_0000003"))
    assert checkpoint.parent.parts[-4:] == ("code", "nemo_experiments", "default", "checkpoints")
    assert sorted(p.name for p in checkpoint.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    loaded, second = run_json(llmb_proc, *args, "--checkpoint-load", str(checkpoint), env=install)
    digest = "weights sha256 after save: "
    saved_digest = Path(first["log"]).read_text().split(digest)[1].split()[0]
    load_log = Path(second["log"]).read_text()
    assert f"weights sha256 after load: {saved_digest}" in load_log
    assert "iteration        1/       1" in load_log  # one step after loading, as the seeds do
    assert first["result"]["checkpoint_save_s"] > 0 and second["result"]["checkpoint_load_s"] > 0


def test_profile_falls_back_to_torch_profiler_without_nsys(llmb_proc, install):
    result, summary = run_json(
        llmb_proc,
        "run",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "b200",
        "--dtype",
        "fp8",
        "--gpus",
        "2",
        "--proxy",
        "tiny",
        "--steps",
        "3",
        "--profile",
        env={**install, "PROFILE_START_STEP": "2", "RUN_CONF_PROFILE_STOP_STEP": "3"},
    )
    traces = sorted(p.name for p in Path(summary["experiment_dir"]).rglob("torch_profile/*.json"))
    assert traces == ["rank0_trace.json", "rank1_trace.json"]
    assert "torch.profiler trace per rank" in result.err


def test_nccl_trace_stops_after_five_steps_with_the_variables_set(llmb_proc, install):
    result, summary = run_json(
        llmb_proc,
        "run",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "b200",
        "--dtype",
        "fp8",
        "--gpus",
        "2",
        "--proxy",
        "tiny",
        "--nccl-trace",
        env=install,
    )
    recipe = json.loads((Path(summary["experiment_dir"]) / "recipe.json").read_text())
    assert recipe["steps"] == 5
    run = json.loads(
        (Path(install["LLMB_INSTALL"]) / "jobs" / summary["job_id"] / "run.json").read_text()
    )
    assert run["env"]["NCCL_DEBUG"] == "INFO" and run["env"]["NCCL_DEBUG_SUBSYS"] == "COLL"


def test_a_cpu_machine_refuses_full_size_runs_and_oversized_proxies(llmb_proc, install):
    env = {**install, "LLMB_FORCE_CPU": "1"}
    full = llmb_proc(
        "run", "llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8", env=env
    )
    assert full.code == 2 and "--proxy tiny" in full.err and "cluster backend" in full.err
    many = llmb_proc("run", "nemotronh", "--gpus", "512", "--proxy", "tiny", env=env)
    assert many.code == 2 and "cores can carry" in many.err
    both = llmb_proc("run", "nemotronh", "--gpus", "2", "--proxy", "tiny", "--layers", "4", env=env)
    assert both.code == 2 and "each reduce the run; give one of them" in both.err
    unknown = llmb_proc("status", "local-nosuch", env=env)
    assert unknown.code == 2 and "no job 'local-nosuch'" in unknown.err
