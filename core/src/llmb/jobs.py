"""Jobs: a submitted run, its state, and where that state lives on disk.

Every job has a directory ``<install>/jobs/<job id>/`` holding ``job.json``
(the ``Job`` record) and whatever its backend needs to answer for it later
from another shell: the local backend keeps the supervisor's pid, the ranks'
pids, a cancel marker and the final ``exit.json`` there.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from llmb.errors import UsageError
from llmb.experiment import read_json, write_json
from llmb.paths import install_dir

# Every backend maps its own states onto these.
STATES = ("QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT", "INFRA_FAILED", "UNKNOWN")
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT", "INFRA_FAILED")

JOB_FILE = "job.json"
EXIT_FILE = "exit.json"
CANCEL_FILE = "cancel-requested"  # llmb asked for the job to stop (so its end is a cancel, not a failure)


@dataclass(frozen=True)
class Job:
    """A submitted run."""

    id: str
    backend: str
    workload: str
    experiment: str
    run_dir: str
    log: str
    ranks: int
    submitted_at: str
    proxy: str | None = None
    attempts: int = 1
    details: dict = field(default_factory=dict)  # backend-specific (e.g. Slurm job ids)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class JobStatus:
    job: Job
    state: str
    reason: str | None = None
    progress: str | None = None  # e.g. "iteration 37/50"
    exit: dict | None = None  # what the job recorded when it ended


def jobs_root() -> str:
    return os.path.join(install_dir(), "jobs")


def job_dir(job_id: str) -> str:
    return os.path.join(jobs_root(), job_id)


def new_job_id(backend: str) -> str:
    """A job id for a job that will not be created (a dry run)."""
    return f"{backend}-{secrets.token_hex(3)}"


def new_job_dir(backend: str) -> tuple[str, str]:
    """A fresh (job id, directory): ``<backend>-<6 hex>``."""
    os.makedirs(jobs_root(), exist_ok=True)
    while True:
        job_id = new_job_id(backend)
        path = job_dir(job_id)
        try:
            os.mkdir(path)
            return job_id, path
        except FileExistsError:
            continue


@contextlib.contextmanager
def job_lock(job_id: str):
    """Exclusive, across processes: one shell at a time ends or retries a job
    (two shells following the same job must not both resubmit it)."""
    import fcntl

    with open(os.path.join(job_dir(job_id), "lock"), "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def save_job(job: Job) -> None:
    write_json(os.path.join(job_dir(job.id), JOB_FILE), job.to_dict())


def load_job(job_id: str) -> Job:
    data = read_json(os.path.join(job_dir(job_id), JOB_FILE))
    if data is None:
        known = list_job_ids()[:5]
        hint = f"recent jobs: {', '.join(known)}" if known else "there are no jobs yet"
        raise UsageError(f"no job {job_id!r} in {jobs_root()} ({hint}; llmb status lists them).")
    return Job(**data)


def list_job_ids() -> list[str]:
    """Job ids, most recently submitted first."""
    root = jobs_root()
    try:
        entries = [e for e in os.scandir(root) if e.is_dir() and os.path.exists(os.path.join(e.path, JOB_FILE))]
    except OSError:
        return []
    entries.sort(key=lambda e: e.stat().st_mtime, reverse=True)
    return [e.name for e in entries]


def read_exit(job_id: str) -> dict | None:
    return read_json(os.path.join(job_dir(job_id), EXIT_FILE))


def write_exit(job_id: str, data: dict) -> None:
    write_json(os.path.join(job_dir(job_id), EXIT_FILE), data)


def request_cancel(job_id: str) -> None:
    with open(os.path.join(job_dir(job_id), CANCEL_FILE), "w", encoding="utf-8") as handle:
        handle.write(now() + "\n")


def cancel_requested(job_id: str) -> bool:
    return os.path.exists(os.path.join(job_dir(job_id), CANCEL_FILE))


def wait_until_ended(status, timeout: float, interval: float, after: str) -> JobStatus:
    """Poll ``status()`` until the job ended; if it has not within ``timeout`` seconds,
    the last status with a reason saying so (``after``: what was done to end it)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        current = status()
        if current.state in TERMINAL:
            return current
        if time.monotonic() >= deadline:
            return JobStatus(current.job, current.state, f"still {current.state} {timeout:.0f} s after {after}",
                             current.progress)
        time.sleep(interval)


def last_iteration(log: str, tail: int = 65536) -> str | None:
    """``iteration i/N`` of the last iteration line in the log's tail (a job's progress)."""
    import re

    try:
        with open(log, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - tail))
            data = handle.read()
    except OSError:
        return None
    found = re.findall(rb"iteration\s+(\d+)\s*/\s*(\d+)", data)
    return f"iteration {int(found[-1][0])}/{int(found[-1][1])}" if found else None


# ---------------------------------------------------------------- processes


def process_start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None
    when there is no such process: with the pid, it names a process even
    after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    if fields and fields[0] == "Z":
        return None  # a zombie has ended
    return int(fields[19]) if len(fields) > 19 else None


def alive(pid: int | None, start_time: int | None) -> bool:
    if not pid:
        return False
    started = process_start_time(pid)
    return started is not None and (start_time is None or started == start_time)
