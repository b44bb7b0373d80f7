"""One local job per GPU (``llmb.backends.local_gpus``): a local job that needs a GPU another llmb
job holds waits, QUEUED, and ``llmb status`` names the GPU and the job that holds it; jobs on
different GPUs run at once; a killed holder frees its GPU. Real processes and real ``flock``.

No GPU is needed. Stand-ins, for the GPU only:

- a fake ``nvidia-smi`` on ``PATH`` lists two H100s, so ``llmb run`` plans a GPU job (its run
  says ``device: cuda``) and its supervisor takes the GPU's lock. Its rank then fails at once on
  this CPU machine (no CUDA): these jobs are the waiters, whose GPU is what the test watches;
- a holder job, whose one rank stands in for training on GPU 0: it is submitted through the local
  backend itself (``LocalBackend.submit``, the supervisor that ``llmb run`` starts), with the run
  a ``--dry-run`` of the same command plans, and a rank command (the run's ``wrapper``) that waits
  until the test lets it end, instead of the worker that would need CUDA.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shlex
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import _SEED_VARS, _llmb_executable
from llmb.backends import local_gpus, local_slots
from waiting import wait_for

GPU_RUN = [
    "run",
    "nemotronh",
    "--gpus",
    "1",
    "--proxy",
    "tiny",
    "--gpu",
    "h100",
    "--steps",
    "1",
    "--no-window-check",
]
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")

# nvidia-smi as a node with two H100s answers (the lines real H100 nodes print)
FAKE_SMI = """#!/bin/sh
case "$*" in
  *--query-gpu=name,driver_version*) printf '%s' {query} ;;
  *-L*) printf '%s' {listing} ;;
  *) exit 0 ;;
esac
"""
QUERY = "NVIDIA H100 80GB HBM3, 550.54.15\n" * 2
LISTING = "".join(
    f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i}1111111-2222-3333-4444-555555555555)\n"
    for i in range(2)
)

# The holder's rank: it holds its GPU (the lock it inherits) until the file it is given appears.
HOLD = """import os, sys, time
deadline = time.monotonic() + 600  # a hang guard: a test that fails never releases it
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.05)
"""

# Submits a holder job the way llmb run does (the job record, then the local backend's submit).
SUBMIT_HOLDER = """import json, os, sys
from llmb.backends.local import LocalBackend
from llmb.runs.jobs import Job, new_job_dir, now, save_job
from llmb.runs.runspec import RunSpec, SubmitOptions
spec, wrapper = json.loads(sys.argv[1]), json.loads(sys.argv[2])
job_id, directory = new_job_dir("local")
log = os.path.join(directory, "log.out")
spec.update(job_id=job_id, log=log, run_dir=directory, inner_dir=directory, wrapper=wrapper)
job = Job(job_id, "local", spec["workload"], spec["experiment"], directory, log, spec["ranks"], now(),
          proxy=spec.get("proxy"))
save_job(job)
LocalBackend().submit(RunSpec.from_dict(spec), job, SubmitOptions())
print(job_id)
"""


@pytest.fixture
def gpus(tmp_path):
    """(install, environment) of a machine with two fake H100s; whatever of the install's jobs still
    lives when the test ends is killed (a job that hangs must not outlive its test)."""
    install = tmp_path / "install"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(query=shlex.quote(QUERY), listing=shlex.quote(LISTING)))
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (*_SEED_VARS, local_slots.LIMIT_VARIABLE, "CUDA_VISIBLE_DEVICES")
    }
    env.update(
        {
            "LLMB_LOG_FORMAT": "json",
            "LLMB_INSTALL": str(install),
            "LLMB_NO_CACHE": "1",
            "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    env.pop("LLMB_FORCE_CPU", None)
    yield install, env
    for pid in job_processes(install):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def job_processes(install: Path, job_id: str | None = None) -> list[int]:
    """The living processes of the install's jobs (of ``job_id``), by their ``LLMB_JOB_DIR``."""
    jobs = install / "jobs"
    dirs = [jobs / job_id] if job_id else (list(jobs.glob("*")) if jobs.exists() else [])
    tags = {f"LLMB_JOB_DIR={os.path.realpath(d)}".encode() for d in dirs}
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] in "ZX":
                    continue
            with open(f"/proc/{name}/environ", "rb") as handle:
                variables = set(handle.read().split(b"\0"))
        except OSError:
            continue
        if variables & tags:
            found.append(int(name))
    return found


def llmb(env: dict, *args, timeout: float = 180) -> tuple[int, str, str]:
    proc = subprocess.run(
        [_llmb_executable(), *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


def detach(env: dict, **variables: str) -> str:
    code, out, err = llmb({**env, **variables}, *GPU_RUN, "--detach", "--json")
    assert code == 0, err[-3000:]
    return json.loads(out)["job_id"]


def status(env: dict, job_id: str) -> dict:
    return json.loads(llmb(env, "status", job_id, "--json")[1])


def ended(env: dict, job_id: str) -> dict:
    return wait_for(
        lambda: (s := status(env, job_id))["state"] in TERMINAL and s,
        timeout=300,
        what=f"{job_id} to end",
    )


def record(install: Path, job_id: str) -> dict:
    return json.loads((install / "jobs" / job_id / local_slots.SLOT_FILE).read_text())


def hold_gpu(install: Path, env: dict, tmp_path: Path, name: str, **variables: str):
    """A holder job (see the module's docstring): (its id, the file that ends it)."""
    code, out, err = llmb({**env, **variables}, *GPU_RUN, "--dry-run", "--json")
    assert code == 0, err[-3000:]
    spec = json.loads(out)["run_spec"]
    assert spec["device"] == "cuda", spec  # the fake nvidia-smi made it a GPU job
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
    job_id = made.stdout.strip().splitlines()[-1]
    wait_for(
        lambda: (
            (install / "jobs" / job_id / "ranks.json").exists()
            and status(env, job_id)["state"] == "RUNNING"
        ),
        what=f"the holder {job_id} to run",
    )
    return job_id, release


def waits_for_gpu(env: dict, job_id: str, said: str) -> dict:
    """Until ``llmb status`` says the job is QUEUED and waits for what ``said`` says."""
    return wait_for(
        lambda: (s := status(env, job_id))["state"] == "QUEUED" and s["reason"] == said and s,
        what=f"{job_id} to say {said!r}",
    )


def lock_path(install: Path | str, gpu: str) -> Path:
    return Path(local_slots.slots_dir(str(install))) / local_gpus.lock_name(gpu)


def gpu_is_free(install: Path, gpu: str) -> bool:
    path = lock_path(install, gpu)
    if not path.exists():
        return True  # never locked
    fd = os.open(path, os.O_RDONLY)
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def holds_lock(pid: int, install: str, gpu: str) -> bool:
    """Whether process ``pid`` holds the lock of ``gpu``, as the kernel lists locks (/proc/locks):
    looking takes no lock, so the job looked at is not held up by it."""
    path = lock_path(install, gpu)
    try:
        inode = path.stat().st_ino
    except FileNotFoundError:
        return False  # never locked
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()  # 1: FLOCK ADVISORY WRITE <pid> <major>:<minor>:<inode> 0 EOF
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[4] == str(pid):
            if int(fields[5].rsplit(":", 1)[1]) == inode:
                return True
    return False


# ------------------------------------------------------------------ which GPUs a job uses


def test_a_job_uses_the_first_gpus_it_sees():
    """Rank r computes on the r-th GPU it sees: the first of CUDA_VISIBLE_DEVICES, else 0 to N-1."""
    assert local_gpus.job_gpus("cuda", 2, {}) == ["0", "1"]
    assert local_gpus.job_gpus("cuda", 1, {"CUDA_VISIBLE_DEVICES": "3,1"}) == ["3"]
    assert local_gpus.job_gpus("cuda", 2, {"CUDA_VISIBLE_DEVICES": " 3, 01 ,5"}) == ["3", "1"]
    # CUDA reads up to the first entry that names no GPU: -1 hides every one
    assert local_gpus.job_gpus("cuda", 2, {"CUDA_VISIBLE_DEVICES": "2,x,4"}) == ["2"]
    assert local_gpus.job_gpus("cuda", 1, {"CUDA_VISIBLE_DEVICES": "-1"}) == []
    assert local_gpus.job_gpus("cpu", 2, {}) == []  # a CPU job takes a local slot


def test_a_gpu_named_by_its_uuid_is_locked_as_its_index(gpus, monkeypatch):
    """nvidia-smi -L (here the fake) turns a UUID, or the prefix CUDA accepts, into the index; a
    UUID it does not list names its own lock."""
    _, env = gpus
    monkeypatch.setenv("PATH", env["PATH"])
    seen = {"CUDA_VISIBLE_DEVICES": "GPU-11111111-2222-3333-4444-555555555555,GPU-0111,GPU-9"}
    assert local_gpus.job_gpus("cuda", 3, seen) == ["1", "0", "GPU-9"]
    assert local_gpus.lock_name("GPU-9") == "gpu-GPU-9.lock"


# ------------------------------------------------------------------ jobs on GPUs, end to end


def test_a_job_on_a_held_gpu_waits_and_names_the_job_that_holds_it(gpus, tmp_path):
    install, env = gpus
    holder, release = hold_gpu(install, env, tmp_path, "holder")
    waiter = detach(env)
    shown = waits_for_gpu(env, waiter, f"waiting for GPU 0, held by job {holder}")
    assert not (install / "jobs" / waiter / "ranks.json").exists()  # no rank started
    assert record(install, waiter)["gpus"] == ["0"]
    assert "waiting for GPU 0" in Path(shown["log"]).read_text()
    # the lock file says who holds it
    lock = Path(local_slots.slots_dir(str(install))) / "gpu-0.lock"
    assert json.loads(lock.read_text())["job"] == holder
    assert status(env, holder)["state"] == "RUNNING"

    release.touch()
    ended(env, holder)
    # the waiter starts once the holder has ended; on this CPU machine its rank then fails (no CUDA)
    ended(env, waiter)
    held, waited = record(install, holder), record(install, waiter)
    assert "waiting" not in held and held["gpus"] == ["0"]
    assert waited["acquired_at"] >= held["released_at"], (held, waited)
    assert (install / "jobs" / waiter / "ranks.json").exists()
    assert gpu_is_free(install, "0")
    queue = Path(local_slots.slots_dir(str(install))) / local_gpus.queue_name("0")
    assert list(queue.iterdir()) == []  # the waiter's ticket left


def test_jobs_on_different_gpus_run_at_once(gpus, tmp_path):
    """GPU 0 held: a job given GPU 1 (CUDA_VISIBLE_DEVICES=1) starts at once, and no local slot
    (LLMB_LOCAL_JOBS=1) holds it back either: a job on GPUs waits for its GPUs only."""
    install, env = gpus
    holder, release = hold_gpu(install, env, tmp_path, "holder")
    other = detach(env, CUDA_VISIBLE_DEVICES="1", LLMB_LOCAL_JOBS="1")
    ended(env, other)
    taken = record(install, other)
    assert taken["gpus"] == ["1"] and "waiting" not in taken and "acquired_at" in taken, taken
    assert status(env, holder)["state"] == "RUNNING"  # it ran meanwhile
    release.touch()
    ended(env, holder)


def test_a_killed_holder_frees_its_gpu(gpus, tmp_path):
    """The holder's supervisor killed: its rank keeps the GPU (the waiter still names the holder);
    the rank killed too: the GPU is free and the waiter runs."""
    install, env = gpus
    holder, _ = hold_gpu(install, env, tmp_path, "holder")
    waiter = detach(env)
    said = f"waiting for GPU 0, held by job {holder}"
    waits_for_gpu(env, waiter, said)
    directory = install / "jobs" / holder
    supervisor = json.loads((directory / "supervisor.json").read_text())["pid"]
    ranks = [r["pid"] for r in json.loads((directory / "ranks.json").read_text())["ranks"]]
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: supervisor not in job_processes(install, holder), what="the supervisor to die")
    assert status(env, holder)["state"] == "RUNNING"  # its rank trains on
    time.sleep(1)  # a few of the waiter's looks at the GPU
    waits_for_gpu(env, waiter, said)  # the orphaned rank still holds it
    assert not (install / "jobs" / waiter / "ranks.json").exists()
    for pid in ranks:
        os.kill(pid, signal.SIGKILL)
    assert ended(env, holder)["state"] == "FAILED"
    ended(env, waiter)
    assert "acquired_at" in record(install, waiter)
    wait_for(lambda: not job_processes(install), what="every process of the jobs to end")
    assert gpu_is_free(install, "0")


def test_a_job_waiting_for_its_gpu_is_cancelled_before_any_rank_starts(gpus, tmp_path):
    install, env = gpus
    holder, release = hold_gpu(install, env, tmp_path, "holder")
    waiter = detach(env)
    waits_for_gpu(env, waiter, f"waiting for GPU 0, held by job {holder}")
    code, out, err = llmb(env, "cancel", waiter, "--json")
    assert code == 0 and json.loads(out)["state"] == "CANCELLED", (out, err)
    assert not (install / "jobs" / waiter / "ranks.json").exists()
    queue = Path(local_slots.slots_dir(str(install))) / local_gpus.queue_name("0")
    assert list(queue.iterdir()) == []  # its place in the queue is gone
    assert status(env, holder)["state"] == "RUNNING"
    release.touch()
    ended(env, holder)


def test_a_fifo_as_a_gpu_lock_neither_blocks_nor_goes_unsaid(gpus):
    """Where GPU 0's lock cannot be kept (a FIFO where its file goes) the job runs without waiting:
    llmb run says why in one warning line before submitting, the supervisor in the job's log."""
    install, env = gpus
    directory = Path(local_slots.slots_dir(str(install)))
    directory.mkdir(parents=True)
    os.mkfifo(directory / "gpu-0.lock")
    plain = {k: v for k, v in env.items() if k != "LLMB_LOG_FORMAT"}
    code, out, err = llmb(plain, *GPU_RUN, "--json", timeout=300)
    assert code in (0, 1), err[-3000:]
    said = f"$LLMB_INSTALL/.local-jobs/{local_slots.host_key()}/gpu-0.lock is a FIFO (named pipe)"
    warning = [line for line in err.splitlines() if "cannot be enforced" in line]
    assert warning == [
        f"llmb: warning: one local job per GPU cannot be enforced: {said}, not a regular file; "
        "this job runs without waiting for other local jobs."
    ], err
    final = json.loads(out)
    assert final["state"] in TERMINAL
    log = Path(final["log"]).read_text()
    assert f"GPU 0 could not be locked in {directory} ({said}" in log
    assert (directory / "gpu-0.lock").is_fifo()  # left as it was


# ------------------------------------------------------------------ the order of arrival, GPU by GPU

# A job's supervisor as far as its GPUs go: take them (saying why it waits), hold them until told.
TAKER = """import os, sys, time
from llmb.backends import local_gpus
install, job, gpus, release = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4]
said = lambda reason: print("waits", reason, flush=True)
locks = local_gpus.take(install, job, gpus, lambda: False, said, poll=0.02)
print("holds", time.monotonic_ns(), flush=True)
deadline = time.monotonic() + 600
while not os.path.exists(release) and time.monotonic() < deadline:
    time.sleep(0.02)
print("frees", time.monotonic_ns(), flush=True)
locks.release()
"""


class Takers:
    """Jobs' supervisors as far as their GPUs go (``TAKER``), each a real process, and what each says."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.install = str(tmp_path / "install")
        self.taking: dict[str, subprocess.Popen] = {}
        self.lines: dict[str, queue.Queue] = {}

    def take(self, job: str, gpus: str) -> None:
        self.taking[job] = subprocess.Popen(
            [sys.executable, "-c", TAKER, self.install, job, gpus, str(self.tmp_path / job)],
            stdout=subprocess.PIPE,
            text=True,
        )
        lines = self.lines[job] = queue.Queue()
        stdout = self.taking[job].stdout
        threading.Thread(
            target=lambda: [lines.put(line.strip()) for line in stdout], daemon=True
        ).start()

    def said(self, job: str, words: str) -> str:
        try:
            line = self.lines[job].get(timeout=120)  # a hang guard
        except queue.Empty:
            raise AssertionError(f"{job} said nothing in 120 s (expected {words!r})") from None
        assert line.startswith(words), (job, line)
        return line

    def comes_to_say(self, job: str, reason: str) -> None:
        """Until ``job`` says it waits for ``reason``: on its way it may say what held for a moment
        (a job that has just taken its GPU, before its lock file names it and its ticket is gone)."""
        while self.said(job, "waits") != f"waits {reason}":
            pass

    def release(self, job: str) -> int:
        """Lets ``job`` free its GPUs; when it did (monotonic ns)."""
        (self.tmp_path / job).touch()
        return int(self.said(job, "frees").split()[1])

    def __enter__(self):
        return self

    def __exit__(self, *failed) -> None:
        for proc in self.taking.values():
            if not failed[0]:
                assert proc.wait(timeout=60) == 0
            proc.kill()
            proc.wait()


def test_jobs_sharing_a_gpu_start_in_the_order_they_came(tmp_path):
    """A holds GPU 0; B wants GPUs 0 and 1 and waits; C, later, wants only GPU 1, which is free, and
    waits behind B all the same (no job that came later overtakes one waiting for the same GPU);
    D, on GPU 2, starts at once. A job holds none of its GPUs while it waits for one of them."""
    with Takers(tmp_path) as jobs:
        jobs.take("A", "0")
        jobs.said("A", "holds")
        jobs.take("B", "1,0")
        assert jobs.said("B", "waits") == "waits waiting for GPU 0, held by job A"
        assert gpu_is_free(Path(jobs.install), "1")  # B holds none meanwhile
        jobs.take("C", "1")
        assert (
            jobs.said("C", "waits")
            == "waits waiting for GPU 1 (1 job queued for it before this one)"
        )
        jobs.take("D", "2")
        jobs.said("D", "holds")
        jobs.release("D")
        jobs.release("A")
        b_holds = int(jobs.said("B", "holds").split()[1])
        jobs.comes_to_say("C", "waiting for GPU 1, held by job B")
        b_frees = jobs.release("B")
        c_holds = int(jobs.said("C", "holds").split()[1])
        assert b_holds < b_frees < c_holds
        jobs.release("C")
    for gpu in ("0", "1", "2"):
        assert gpu_is_free(Path(jobs.install), gpu)


def test_a_job_that_finds_its_second_gpu_held_keeps_none_of_its_first(tmp_path):
    """All or none: A holds GPU 1; B wants GPUs 0 and 1, locks GPU 0 first (its locks are taken in
    order) and finds GPU 1 held: it lets GPU 0 go at once, and keeps it free however long it waits,
    naming only the GPU that holds it up; once A ends, B takes both."""
    with Takers(tmp_path) as jobs:
        jobs.take("A", "1")
        jobs.said("A", "holds")
        jobs.take("B", "0,1")
        assert jobs.said("B", "waits") == "waits waiting for GPU 1, held by job A"
        # Looked at without taking the lock (the kernel's list of locks), many of B's looks at its
        # GPUs (every 0.02 s): B holds GPU 0 only for the instant between locking it and finding
        # GPU 1 held, so all but a rare look find it free.
        looks = []
        for _ in range(20):
            looks.append(holds_lock(jobs.taking["B"].pid, jobs.install, "0"))
            time.sleep(0.05)
        assert looks.count(True) <= 2, looks
        assert jobs.lines["B"].empty()  # nothing new to say: still only GPU 1
        a_frees = jobs.release("A")
        assert int(jobs.said("B", "holds").split()[1]) > a_frees
        assert not gpu_is_free(Path(jobs.install), "0") and not gpu_is_free(Path(jobs.install), "1")
        jobs.release("B")
    for gpu in ("0", "1"):
        assert gpu_is_free(Path(jobs.install), gpu)
