"""A CPU run fits its host (issue 43, item 2): the memory check and --fit use the memory this machine's
ranks share (its RAM, a container's limit or ulimit -v, whichever is least), not the GPU type's; a run
that needs more is refused before it starts. The host's memory here is a limit the test sets (ulimit -v)."""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import _llmb_executable
from llmb.runs.capability import host_memory

LIMIT_KB = 4 << 20  # 4 GiB of address space: llmb's own process needs far less before it trains


def limited(tmp_path, *args: str, kb: int = LIMIT_KB) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LLMB_INSTALL": str(tmp_path / "install"), "LLMB_FORCE_CPU": "1"}
    return subprocess.run(
        ["bash", "-c", f'ulimit -v {kb} && exec "$0" "$@"', _llmb_executable(), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_the_host_memory_is_the_least_of_what_limits_it():
    found = host_memory()
    assert found is not None and found.gb > 0.1
    with open("/proc/meminfo", encoding="ascii") as handle:
        total_kb = int(next(line for line in handle if line.startswith("MemTotal:")).split()[1])
    assert found.gb <= total_kb / (1 << 20) + 1e-9  # never more than the RAM


def test_a_cpu_run_needing_more_than_the_host_is_refused_before_it_starts(tmp_path):
    # Nemotron-4 340B's one layer: ~236 GB for one CPU rank by the torch engine's estimate
    args = ["run", "nemotron4", "--size", "340b", "--gpu", "h100", "--gpus", "1", "--layers", "1"]
    refused = limited(tmp_path, *args, "--dtype", "bf16")
    assert refused.returncode == 2, refused.stderr
    assert (
        "more than a CPU rank's 4.0 GiB: this machine's 4.0 GiB (the address-space limit, ulimit -v) "
        "over 1 rank" in refused.stderr
    ), refused.stderr
    assert "Nothing was started" in refused.stderr
    assert not (tmp_path / "install" / "jobs").exists()


def test_fit_on_a_cpu_fits_the_hosts_memory_shared_by_the_ranks(tmp_path):
    args = [
        "plan",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        "2",
        "--fit",
    ]
    planned = limited(tmp_path, *args, kb=16 << 20)  # 16 GiB: 8 a rank
    assert planned.returncode == 0, planned.stderr
    assert (
        "of a CPU rank's 8.0 GiB: this machine's 16.0 GiB (the address-space limit, ulimit -v) over 2 "
        "ranks" in planned.stdout
    ), planned.stdout
    assert "80 GiB" not in planned.stdout.split("shallow run:", 1)[1]  # not the H100's memory
    # 2 GB a rank hold not one layer of it: the plan shows what a GPU would hold, and says llmb run here
    # would refuse it, per rank; llmb run refuses it
    small = limited(tmp_path, *args)
    assert small.returncode == 0, small.stderr
    said = " ".join(small.stdout.split())
    assert (
        "llmb run --fit here would refuse it: --fit: no slice of llama 8b fits one CPU rank (2.0 GiB: "
        "this machine's 4.0 GiB" in said
    ), small.stdout
    assert "GiB per rank by the torch engine's estimate" in said
    ran = limited(tmp_path, "run", *args[1:])
    assert ran.returncode == 2 and "no slice of llama 8b fits one CPU rank (2.0 GiB" in ran.stderr


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_cpu_proxy_that_fits_runs_as_before(tmp_path, ranks):
    dry = limited(
        tmp_path,
        "run",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        str(ranks),
        "--proxy",
        "tiny",
        "--dry-run",
    )
    assert dry.returncode == 0 and "stop here" not in dry.stderr, dry.stderr


def _memory_cgroup(tmp_path, limit: int):
    """A memory cgroup of ``limit`` bytes (v1's memory controller, else v2's), and the file a process
    joins it by; None where this machine lets no test make one."""
    import uuid

    name = f"llmb-test-{uuid.uuid4().hex[:8]}"
    for root, limit_file in (
        ("/sys/fs/cgroup/memory", "memory.limit_in_bytes"),
        ("/sys/fs/cgroup", "memory.max"),
    ):
        directory = os.path.join(root, name)
        try:
            os.mkdir(directory)
        except OSError:
            continue
        try:
            with open(os.path.join(directory, limit_file), "w") as handle:
                handle.write(str(limit))
            return directory
        except OSError:
            os.rmdir(directory)
    return None


def test_a_rank_the_oom_killer_ends_is_reported_as_such_with_its_memory(tmp_path):
    """A tiny proxy run in a cgroup of 250 MB: its rank, importing torch, is the process the kernel's
    out-of-memory killer picks."""
    import json
    import time

    cgroup = _memory_cgroup(tmp_path, 250 << 20)
    if cgroup is None:
        pytest.skip("no memory cgroup can be made here (needs root and a writable cgroup mount)")
    try:
        env = {**os.environ, "LLMB_INSTALL": str(tmp_path / "install"), "LLMB_FORCE_CPU": "1"}
        args = [
            "run",
            "nemotronh",
            "--size",
            "56b",
            "--gpu",
            "h100",
            "--dtype",
            "fp8",
            "--gpus",
            "1",
        ]
        done = subprocess.run(
            [
                "bash",
                "-c",
                f'echo $$ > {cgroup}/cgroup.procs && exec "$0" "$@"',
                _llmb_executable(),
                *args,
                "--proxy",
                "tiny",
                "--steps",
                "3",
                "--no-window-check",
                "--json",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert done.returncode != 0, done.stdout
        [job] = os.listdir(tmp_path / "install" / "jobs")
        ended = json.loads((tmp_path / "install" / "jobs" / job / "exit.json").read_text())
        assert ended["state"] == "FAILED", ended
        assert ended["reason"].startswith(
            "rank 0 was killed by the kernel's out-of-memory killer (SIGKILL) at a peak of "
        ), ended["reason"]
        assert (
            "GiB resident (of this machine's 0.2 GiB (its container's memory limit"
            in ended["reason"]
        )
    finally:
        for _ in range(50):  # the cgroup goes once its last process has
            try:
                os.rmdir(cgroup)
                break
            except OSError:
                time.sleep(0.2)
