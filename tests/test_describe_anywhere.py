"""A plan and a dry run work on any machine (issue 43): on a login node without GPUs, ``llmb plan`` with any
option of ``llmb run`` and ``llmb run --dry-run`` of every documented command exit 0 and show the run; what
this machine could not run is one line each, naming what can. A real run is still refused, writing
nothing."""

from __future__ import annotations

import json

import pytest
from llmb.cli.run_options import parameter_names
from test_plan_as_run import LINES, RUN_ONLY

FULL = ["llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8"]
NO_GPUS = "llama31 8b at full size needs 8 GPUs and this machine has none"

# one use of each option of llmb run (its click parameter's name), as a user would type it
OPTION_USES = {
    "backend": ["--backend", "local"],
    "proxy": ["--proxy", "tiny"],
    "layers": ["--layers", "2"],
    "fit": ["--fit"],
    "memory_check": ["--no-memory-check"],
    "steps": ["--steps", "20"],
    "window_check": ["--steps", "20", "--no-window-check"],
    "seed": ["--seed", "3"],
    "compile_": ["--compile"],
    "profile": ["--profile"],
    "profile_start": ["--profile", "--profile-start", "10", "--profile-stop", "12"],
    "profile_stop": ["--profile", "--profile-stop", "48"],
    "gpu_metrics": ["--gpu-metrics"],
    "nccl_trace": ["--nccl-trace"],
    "checkpoint_save": ["--checkpoint-save"],
    "checkpoint_dir": ["--checkpoint-dir", "/tmp/llmb-checkpoints"],
    "env_items": ["--env", "FOO=1"],
    "framework_args": ["--engine", "production", "--framework-arg", "train.manual_gc=true"],
    "engine": ["--engine", "production"],
    "account": ["--account", "acct"],
    "partition": ["--partition", "batch"],
    "time_limit": ["--time-limit", "45"],
    "nodelist": ["--nodelist", "n1"],
    "exclude": ["--exclude", "n2"],
    "reservation": ["--reservation", "r"],
    "qos": ["--qos", "q"],
    "constraint": ["--constraint", "c"],
    "segment": ["--segment", "2"],
    "gres": ["--gres", "gpu:8"],
    "numa_binding": ["--numa-binding"],
    "dump_env": ["--dump-env"],
    "retries": ["--retries", "2"],
    "requeue": ["--requeue"],
    "image": ["--image", "nvcr.io#nvidia/nemo:25.11.01"],
    "mounts": ["--mount", "/tmp:/tmp"],
    "bare": ["--bare"],
    "secrets": ["--secret", "LLMB_TEST_SECRET"],
    "additional_slurm_params": ["--additional-slurm-params", "x=y"],
    "backend_opts": ["--backend-opt", "a=b"],
    "kube_context": ["--backend", "kubernetes", "--context", "other"],
}
# options whose value must name something that exists: a checkpoint, a preflight file (their own tests)
NEEDS_INPUT = {"checkpoint_load", "exclude_from"}


@pytest.fixture
def no_gpus(monkeypatch):
    monkeypatch.setenv("LLMB_FORCE_CPU", "1")
    monkeypatch.setenv("LLMB_TEST_SECRET", "s3cret")
    monkeypatch.delenv("LLMB_BACKEND", raising=False)


def test_every_run_option_has_a_use_here():
    assert set(parameter_names().values()) == set(OPTION_USES) | NEEDS_INPUT


@pytest.mark.parametrize("option", sorted(OPTION_USES))
def test_a_plan_with_any_run_option_shows_the_run_without_gpus(cli, no_gpus, option):
    planned = cli("plan", *FULL, *OPTION_USES[option])
    assert planned.code == 0, planned.err
    if (
        option == "fit"
    ):  # 8 CPU ranks do not fit here: plan says why, where llmb run would refuse it
        assert "llmb run --fit here would refuse it: " in " ".join(planned.out.split())
        assert "this run (llmb run" not in planned.out
        return
    if option == "proxy":  # the reduced model, and the run that runs it
        assert "CPU proxy: llmb run --proxy tiny runs a tiny model" in planned.out
    assert "this run (llmb run with these options; plan writes and submits nothing):" in planned.out
    if option not in (
        "layers",
        "proxy",
        "kube_context",  # a Kubernetes run's GPUs are the cluster's
    ):  # a full-size run: this machine cannot, and the plan says so
        [line] = [line for line in planned.out.splitlines() if NO_GPUS in line]
        assert line.startswith("  - a real run would stop here: ") and "--backend slurm" in line


@pytest.mark.parametrize(("where", "words"), LINES, ids=[w for w, _ in LINES])
def test_every_documented_run_line_dry_runs_without_gpus(cli, no_gpus, monkeypatch, where, words):
    if "--gpu" not in words:  # the docs' lines that take the GPU type from the cluster file
        monkeypatch.setenv("GPU_TYPE", "h100")
    ran = cli("run", *[w for w in words if w not in RUN_ONLY], "--dry-run")
    assert ran.code == 0, (where, ran.err)
    assert "llmb run --dry-run: " in ran.err and "nothing was written or sent" in ran.err, where
    assert "Traceback" not in ran.err


def test_a_full_size_dry_run_names_what_stops_it_and_a_real_run_is_refused(
    cli, no_gpus, install_root
):
    described = cli("run", *FULL, "--dry-run", "--json")
    assert described.code == 0, described.err
    stops = [
        line
        for line in described.err.splitlines()
        if line.startswith("llmb: warning: a real submission would stop here: ")
    ]
    assert len(stops) == 2 and NO_GPUS in stops[0], described.err  # the GPUs, then the memory
    assert "needs ~" in stops[1] and "--fit fits" in stops[1]
    problems = json.loads(described.out)["problems"]
    assert NO_GPUS in problems[0] and len(problems) == 2
    assert not install_root.exists()  # nothing written

    refused = cli("run", *FULL)
    assert refused.code == 2 and NO_GPUS in refused.err
    assert not (install_root / "jobs").exists() or not any((install_root / "jobs").iterdir())


def test_a_runai_dry_run_without_its_settings_shows_the_requests_with_their_names(
    cli, no_gpus, monkeypatch, tmp_path
):
    for variable in (
        "BASE_URL",
        "APP_ID",
        "APP_SECRET",
        "PROJECT_NAME",
        "PVC_DIR",
        "RUN_CONF_MOUNTS",
    ):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("LLMB_RUNAI_CONFIG", str(tmp_path / "none.yaml"))
    args = ["nemotron4", "--size", "340b", "--gpu", "h100", "--dtype", "fp8", "--gpus", "256"]
    ran = cli("run", *args, "--backend", "runai", "--dry-run")
    assert ran.code == 0, ran.err
    assert "a real submission would stop here: the runai backend needs BASE_URL" in ran.err
    assert "POST https://<BASE_URL>/api/v1/workloads/distributed" in ran.out
    assert '"projectId": "<id of project <PROJECT_NAME>>"' in ran.out
    # a setting given wrong is still an error, not a placeholder
    monkeypatch.setenv("BASE_URL", "https://runai.example.com/api/v2")
    wrong = cli("run", *args, "--backend", "runai", "--dry-run")
    assert wrong.code == 2 and "expected https://<host>/api/v1" in wrong.err
