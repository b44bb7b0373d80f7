"""Issue 41, item 9: one GPU, two locks. When ``nvidia-smi -L`` failed, GPU 0 named as ``0`` took
``gpu-0.lock`` and named by its UUID ``gpu-GPU-….lock``: two jobs shared the GPU. A GPU has one
lock, under its index; a UUID is resolved to it through ``nvidia-smi -L``, and where that cannot
answer the job is refused, with the reason: by ``llmb run`` before anything is submitted, and by
the job's supervisor before any rank starts. Real processes and real ``flock``, as in
tests/test_local_gpu_locks.py, whose stand-ins these are:

- a fake ``nvidia-smi`` that lists two H100s (to plan a GPU run), and a broken one whose ``-L``
  fails as a driver/library mismatch makes it fail;
- holder jobs submitted through the local backend itself (``LocalBackend.submit``, the supervisor
  ``llmb run`` starts), whose one rank holds its GPU until the test lets it end.

Where ``llmb run`` itself is asked, the machine's GPU count (``llmb.runs.capability.detect``, which
reads the driver's /proc files, else the same ``nvidia-smi -L``) is given by the test: no GPU is
here, and with a failing ``nvidia-smi -L`` it would find none."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from llmb.backends import local_gpus, local_slots
from llmb.errors import UsageError
from llmb.runs.capability import Machine
from test_local_gpu_locks import (
    GPU_RUN,
    HOLD,
    SUBMIT_HOLDER,
    ended,
    gpu_is_free,
    gpus,  # noqa: F401 - the fixture: two fake H100s (a working nvidia-smi)
    job_processes,
    llmb,
    record,
    status,
    waits_for_gpu,
)
from waiting import wait_for

GPU0_UUID = "GPU-01111111-2222-3333-4444-555555555555"  # GPU 0 in LISTING
BROKEN_SMI = """#!/bin/sh
case "$*" in
  *-L*) echo "Failed to initialize NVML: Driver/library version mismatch"; exit 18 ;;
  *) exit 18 ;;
esac
"""
REFUSAL = (
    f"CUDA_VISIBLE_DEVICES names GPU {GPU0_UUID} by UUID, but nvidia-smi -L exited with status 18: "
    "Failed to initialize NVML: Driver/library version mismatch, so llmb cannot tell which GPU index "
    "it is: a local job locks each of its GPUs under its index"
)


@pytest.fixture
def broken(gpus, tmp_path):  # noqa: F811 - the imported fixture
    """(install, the environment with the working fake nvidia-smi, the same with a broken one)."""
    install, env = gpus
    bin_dir = tmp_path / "broken-bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(BROKEN_SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    failing = {**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}"}
    assert subprocess.run(["nvidia-smi", "-L"], env=failing, capture_output=True).returncode == 18
    return install, env, failing


def submit(env: dict, spec: dict, tmp_path: Path, name: str, **variables: str) -> tuple[str, Path]:
    """A job of ``spec`` through the local backend's submit, in ``env`` (its supervisor's), whose one
    rank holds what it was given until ``release`` appears: (its id, release)."""
    script, release = tmp_path / f"{name}.py", tmp_path / f"{name}.release"
    script.write_text(HOLD)
    wrapper = [sys.executable, str(script), str(release)]
    made = subprocess.run(
        [sys.executable, "-c", SUBMIT_HOLDER, json.dumps(spec), json.dumps(wrapper)],
        env={**env, **variables},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    return made.stdout.strip().splitlines()[-1], release


def gpu_spec(env: dict) -> dict:
    code, out, err = llmb(env, *GPU_RUN, "--dry-run", "--json")
    assert code == 0, err[-3000:]
    spec = json.loads(out)["run_spec"]
    assert spec["device"] == "cuda", spec
    return spec


def running(env: dict, install: Path, job: str) -> None:
    wait_for(
        lambda: (
            (install / "jobs" / job / "ranks.json").exists()
            and status(env, job)["state"] == "RUNNING"
        ),
        what=f"{job} to run",
    )


def refused(env: dict, install: Path, job: str) -> dict:
    """The job's status once it has ended or started a rank (the base started it beside the holder)."""
    shown = wait_for(
        lambda: (
            (
                (install / "jobs" / job / "ranks.json").exists()
                or status(env, job)["state"] in ("SUCCEEDED", "FAILED", "CANCELLED")
            )
            and status(env, job)
        ),
        timeout=300,
        what=f"{job} to end or start",
    )
    assert not (install / "jobs" / job / "ranks.json").exists(), ("a rank started", shown)
    assert shown["state"] == "FAILED" and REFUSAL in shown["reason"], shown
    return shown


def lock_files(install: Path) -> list[str]:
    return sorted(p.name for p in Path(local_slots.slots_dir(str(install))).glob("gpu-*.lock"))


def test_a_uuid_nvidia_smi_cannot_resolve_is_refused_and_never_shares_gpu_0(broken, tmp_path):
    """GPU 0 held by a job that names it ``0``; nvidia-smi -L fails; a job that names GPU 0 by its
    UUID ends FAILED before any rank starts, saying why, and takes no lock of its own."""
    install, env, failing = broken
    spec = gpu_spec(env)
    holder, release = submit(failing, spec, tmp_path, "holder")
    running(failing, install, holder)
    other, other_release = submit(failing, spec, tmp_path, "other", CUDA_VISIBLE_DEVICES=GPU0_UUID)
    try:
        shown = refused(failing, install, other)  # no rank started
        assert f"the job does not start: {REFUSAL}" in Path(shown["log"]).read_text()
        assert status(failing, holder)["state"] == "RUNNING"
        assert lock_files(install) == ["gpu-0.lock"]  # one GPU, one lock
        assert not gpu_is_free(install, "0")
    finally:
        other_release.touch()
        release.touch()
    ended(failing, holder)
    wait_for(lambda: not job_processes(install), what="every process of the jobs to end")
    assert gpu_is_free(install, "0")


def test_the_uuid_job_is_refused_whichever_comes_first(broken, tmp_path):
    """The job naming GPU 0 by its UUID first: refused at once; the one naming it 0 then runs."""
    install, env, failing = broken
    spec = gpu_spec(env)
    first, first_release = submit(failing, spec, tmp_path, "first", CUDA_VISIBLE_DEVICES=GPU0_UUID)
    try:
        refused(failing, install, first)
        second, release = submit(failing, spec, tmp_path, "second", CUDA_VISIBLE_DEVICES="0")
        running(failing, install, second)
        assert record(install, second)["gpus"] == ["0"] and lock_files(install) == ["gpu-0.lock"]
        release.touch()
        ended(failing, second)
    finally:
        first_release.touch()


def test_with_nvidia_smi_answering_the_uuid_and_the_index_share_one_lock(gpus, tmp_path):  # noqa: F811
    """The control: nvidia-smi -L resolves the UUID, so the second job waits for GPU 0's lock."""
    install, env = gpus
    spec = gpu_spec(env)
    holder, release = submit(env, spec, tmp_path, "holder")
    running(env, install, holder)
    other, other_release = submit(env, spec, tmp_path, "other", CUDA_VISIBLE_DEVICES=GPU0_UUID)
    try:
        waits_for_gpu(env, other, f"waiting for GPU 0, held by job {holder}")
        assert record(install, other)["gpus"] == ["0"] and lock_files(install) == ["gpu-0.lock"]
        release.touch()
        ended(env, holder)
        running(env, install, other)
    finally:
        other_release.touch()
        release.touch()
    ended(env, other)


def test_llmb_run_refuses_a_uuid_it_cannot_resolve_before_anything_is_submitted(
    broken, cli, monkeypatch
):
    """Through the CLI, CUDA_VISIBLE_DEVICES in the shell or given with --env: exit 2, the reason, no
    job. The machine's two GPUs are given (the driver's /proc files are not here)."""
    install, _, failing = broken
    monkeypatch.setenv("LLMB_INSTALL", str(install))
    monkeypatch.setenv("PATH", failing["PATH"])
    monkeypatch.delenv("LLMB_FORCE_CPU", raising=False)
    two = Machine(gpus=2, gpu_names=("NVIDIA H100 80GB HBM3",) * 2, cpus=os.cpu_count() or 1)
    monkeypatch.setattr("llmb.runs.capability.detect", lambda: two)
    monkeypatch.setattr("llmb.lifecycle.prepare.detect", lambda: two)
    for args, shell in (
        (("--dry-run",), {"CUDA_VISIBLE_DEVICES": GPU0_UUID}),
        (("--detach",), {"CUDA_VISIBLE_DEVICES": GPU0_UUID}),
        (("--dry-run", "--env", f"CUDA_VISIBLE_DEVICES={GPU0_UUID}"), {}),
        (("--detach", "--env", f"CUDA_VISIBLE_DEVICES={GPU0_UUID}"), {}),
    ):
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        for name, value in shell.items():
            monkeypatch.setenv(name, value)
        out = cli(*GPU_RUN, *args)
        assert out.code == 2, (args, out.code, out.err)
        assert REFUSAL in out.err and "Name the GPUs by index" in out.err, out.err
        assert "Traceback" not in out.err
    assert not (install / "jobs").exists() or not list((install / "jobs").iterdir())
    # named by index, the same run is planned
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert cli(*GPU_RUN, "--dry-run").code == 0


def test_which_gpus_with_nvidia_smi_failing(broken, monkeypatch):
    _, _, failing = broken
    monkeypatch.setenv("PATH", failing["PATH"])
    # indices need no nvidia-smi
    assert local_gpus.job_gpus("cuda", 2, {"CUDA_VISIBLE_DEVICES": "1,0"}) == ["1", "0"]
    assert local_gpus.job_gpus("cuda", 2, {}) == ["0", "1"]
    for seen in (GPU0_UUID, "GPU-0111", f"1,{GPU0_UUID}"):
        with pytest.raises(UsageError, match="by UUID, but nvidia-smi -L exited with status 18"):
            local_gpus.job_gpus("cuda", 2, {"CUDA_VISIBLE_DEVICES": seen})
    # no nvidia-smi at all
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(UsageError, match="by UUID, but nvidia-smi is not on PATH"):
        local_gpus.job_gpus("cuda", 1, {"CUDA_VISIBLE_DEVICES": GPU0_UUID})


def test_a_uuid_the_listing_resolves_is_its_index(gpus, monkeypatch):  # noqa: F811
    _, env = gpus
    monkeypatch.setenv("PATH", env["PATH"])
    assert local_gpus.job_gpus("cuda", 2, {"CUDA_VISIBLE_DEVICES": f"{GPU0_UUID},1"}) == ["0", "1"]
