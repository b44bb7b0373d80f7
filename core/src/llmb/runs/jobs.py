"""Jobs: a submitted run, its state, and where that state lives on disk.

Every job has a directory ``<install>/jobs/<job id>/`` holding ``job.json``
(the ``Job`` record) and whatever its backend needs to answer for it later
from another shell: the local backend keeps the supervisor's pid, the ranks'
pids, a cancel marker and the final ``exit.json`` there.

The store reports its own troubles truthfully: a record that cannot be read
names the file and why (not JSON, a field of the wrong type), and a write
that fails names the cause (``no space left on device``, ``read-only file
system``) as a ``JobStoreError`` rather than a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from llmb.errors import LlmbError, UsageError
from llmb.paths import install_dir
from llmb.runs.experiment import (
    StateFileError,
    json_kind,
    load_json_state,
    read_json,
    record_fields,
    write_json,
)

# Every backend maps its own states onto these.
STATES = (
    "QUEUED",
    "RUNNING",
    "SUCCEEDED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "INFRA_FAILED",
    "UNKNOWN",
)
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT", "INFRA_FAILED")

JOB_FILE = "job.json"
RUN_FILE = "run.json"  # the RunSpec every rank reads, as the backend writes it (a retry's is read back by the core)
EXIT_FILE = "exit.json"
# llmb asked for the job to stop (so its end is a cancel, not a failure)
CANCEL_FILE = "cancel-requested"
# the process submitting the job, until the job's own processes take over
SUBMITTER_FILE = "submitter.json"
EXIT_RESERVE_FILE = "exit.reserve"  # room kept for exit.json: freed to write it on a full disk
EXIT_RESERVE_BYTES = 16384


class JobStoreError(LlmbError):
    """The job store could not be written or read (a full disk, a read-only
    file system, a corrupt record). Exit code 1."""


class NothingSubmitted(LlmbError):
    """A backend's submission that left nothing on the cluster (a refusal is a ``UsageError``): the core
    removes the job's directory. Exit code 1."""


class Unconfirmed(LlmbError):
    """Whether the cluster took the job is not known yet (its answer was lost, and it cannot be asked
    now): the core keeps ``job``, the record as far as it is known, so that status finds the job later."""

    def __init__(self, message: str, job: Job):
        super().__init__(message)
        self.job = job


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
    # backend-specific (e.g. Slurm job ids); details["attempts"], where a backend keeps one record per
    # attempt, gets the core's ``ended`` (why the attempt was retried) on each retried one
    details: dict = field(default_factory=dict)
    # how many times a failure worth retrying is resubmitted (``llmb run --retries``)
    retries: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    def retry_limit(self) -> int:
        """``retries``; for a record written before the core kept it, what the Slurm backend kept."""
        return self.retries or int((self.details.get("slurm") or {}).get("retries") or 0)


@dataclass(frozen=True)
class Ending:
    """How a backend saw a job end, for the core to judge (``llmb.lifecycle.reconcile``): retried, or
    recorded with its result in ``exit.json``. A backend never records a job's end itself."""

    state: str  # one of TERMINAL, as the backend maps its own states
    reason: str | None = None
    # a FAILED job's reason comes from its log when the log names one
    prefer_log_reason: bool = True
    # an infrastructure cause (a node failure, ...): retried like a flaky one
    infrastructure: str | None = None
    nodes: str = ""  # where the attempt ran, as the cluster names them
    label: str | None = None  # the attempt as the cluster knows it, for the log ("Slurm job 41")
    # the attempt's id on the cluster (a retry's recipe.json names it)
    cluster_id: str | None = None
    # what exit.json gets beside state and reason (the cluster's view)
    record: dict = field(default_factory=dict)


@dataclass(frozen=True)
class JobStatus:
    # the record as the backend knows it now: when it changed (an id found), the core saves it
    job: Job
    state: str
    reason: str | None = None
    progress: str | None = None  # e.g. "iteration 37/50"
    exit: dict | None = None  # what the job recorded when it ended
    ending: Ending | None = None  # a backend's status of a job that ended and is not recorded yet


def state_text(state: str, reason: str | None) -> str:
    """``CANCELLED - by the user``: a job's state and, where it says more than the state, its reason
    (``CANCELLED``, not ``CANCELLED - cancelled``)."""
    said = (reason or "").strip()
    return f"{state} - {said}" if said and said.lower() != state.lower() else state


@dataclass(frozen=True)
class BrokenJob:
    """A job directory whose record cannot be read: its id and why."""

    id: str
    problem: str


def describe_os_error(exc: OSError) -> str:
    """``no space left on device``, ``read-only file system``...: the cause in words."""
    words = os.strerror(exc.errno).lower() if exc.errno else str(exc)
    return words


def store_error(what: str, exc: OSError) -> JobStoreError:
    return JobStoreError(f"{what}: {describe_os_error(exc)}")


def jobs_root() -> str:
    return os.path.join(install_dir(), "jobs")


def job_dir(job_id: str) -> str:
    return os.path.join(jobs_root(), job_id)


def new_job_id(backend: str) -> str:
    """A fresh job id, not yet claimed (``claim_job_dir``): a dry run's, or a run's being prepared."""
    return f"{backend}-{secrets.token_hex(3)}"


# job ids this process created, oldest first (to undo an interrupted submission)
_created_here: list[str] = []


def created_job_ids() -> list[str]:
    return list(_created_here)


def new_job_dir(backend: str) -> tuple[str, str]:
    """A fresh (job id, directory): ``<backend>-<6 hex>``. It names this
    process as the job's submitter until the job's own processes run."""
    while True:
        job_id = new_job_id(backend)
        path = claim_job_dir(job_id)
        if path is not None:
            return job_id, path


def claim_job_dir(job_id: str) -> str | None:
    """Create the directory of job ``job_id`` (an id from ``new_job_id``), naming this process as the
    job's submitter; None when another job has that id."""
    try:
        os.makedirs(jobs_root(), exist_ok=True)
    except OSError as exc:
        raise store_error(f"cannot create the jobs directory {jobs_root()}", exc) from None
    path = job_dir(job_id)
    try:
        os.mkdir(path)
    except FileExistsError:
        return None
    except OSError as exc:
        raise store_error(f"cannot create a job directory in {jobs_root()}", exc) from None
    _created_here.append(job_id)
    try:
        write_json(
            os.path.join(path, SUBMITTER_FILE),
            {"pid": os.getpid(), "start_time": process_start_time(os.getpid())},
        )
    except OSError as exc:
        discard_job_dir(job_id)
        raise store_error(f"cannot write in the job directory {path}", exc) from None
    return path


def discard_job_dir(job_id: str) -> None:
    """Remove a job's directory (a submission that never completed)."""
    shutil.rmtree(job_dir(job_id), ignore_errors=True)


def submitter_alive(job_id: str) -> bool:
    """Whether the process that submitted the job still runs (it may still be submitting)."""
    found = read_json(os.path.join(job_dir(job_id), SUBMITTER_FILE)) or {}
    return alive(found.get("pid"), found.get("start_time"))


@contextlib.contextmanager
def job_lock(job_id: str):
    """Exclusive, across processes: one shell at a time ends or retries a job
    (two shells following the same job must not both resubmit it). On a
    read-only job directory the directory itself is locked."""
    import fcntl

    try:
        handle = open(os.path.join(job_dir(job_id), "lock"), "a+")  # noqa: SIM115 - closed below
    except OSError:
        handle = open(job_dir(job_id))  # noqa: SIM115 - a directory opened read-only can be locked too
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def save_job(job: Job) -> None:
    path = os.path.join(job_dir(job.id), JOB_FILE)
    try:
        write_json(path, job.to_dict())
    except OSError as exc:
        raise store_error(f"cannot save the record of job {job.id} ({path})", exc) from None


def read_record(path: str) -> tuple[dict | None, str | None]:
    """(the JSON object in ``path``, None); (None, None) when there is no
    such file; (None, what is wrong) when it cannot be read or is no object
    (``load_json_state``: a regular file only, bounded, never waited on)."""
    try:
        return load_json_state(path), None
    except StateFileError as exc:
        return None, exc.short


def job_from_dict(data: dict) -> tuple[Job | None, str | None]:
    """A ``Job`` from its record, or what is wrong with the record."""
    try:
        return Job(**record_fields(Job, data, JOB_FILE)), None
    except ValueError as exc:
        return None, str(exc)


def read_job(job_id: str) -> Job | BrokenJob | None:
    """The job's record; a ``BrokenJob`` naming what is wrong with it; None when there is no such job."""
    directory = job_dir(job_id)
    data, problem = read_record(os.path.join(directory, JOB_FILE))
    if data is None and problem is None:
        return (
            BrokenJob(
                job_id, "its directory holds no job.json (a submission that did not complete)"
            )
            if os.path.isdir(directory)
            else None
        )
    if problem is None:
        job, problem = job_from_dict(data)
        if job is not None:
            return job
    return BrokenJob(job_id, f"its record is unreadable: {problem} ({directory})")


def load_job(job_id: str) -> Job:
    found = read_job(job_id)
    if isinstance(found, Job):
        return found
    if isinstance(found, BrokenJob):
        raise JobStoreError(f"job {job_id}: {found.problem}")
    known = list_job_ids()[:5]
    hint = f"recent jobs: {', '.join(known)}" if known else "there are no jobs yet"
    raise UsageError(f"no job {job_id!r} in {jobs_root()} ({hint}; llmb status lists them).")


def list_job_ids() -> list[str]:
    """Job ids, most recently submitted first (a directory deleted meanwhile is left out)."""
    found = []
    try:
        entries = list(os.scandir(jobs_root()))
    except OSError:
        return []
    for entry in entries:
        try:
            if entry.is_dir() and os.path.exists(os.path.join(entry.path, JOB_FILE)):
                found.append((entry.stat().st_mtime, entry.name))
        except OSError:
            continue
    found.sort(reverse=True)
    return [name for _, name in found]


def read_exit(job_id: str) -> dict | None:
    return read_json(os.path.join(job_dir(job_id), EXIT_FILE))


def read_exit_checked(job_id: str) -> tuple[dict | None, str | None]:
    """(exit record, None); (None, None) when the job has not recorded its end;
    (None, what is wrong) when ``exit.json`` is unreadable or malformed."""
    data, problem = read_record(os.path.join(job_dir(job_id), EXIT_FILE))
    if data is None:
        return None, problem
    state, reason = data.get("state"), data.get("reason")
    if state not in STATES:
        return None, f"exit.json's state is {state!r:.40}, not one of {', '.join(STATES)}"
    if reason is not None and not isinstance(reason, str):
        return None, f"exit.json's reason is {json_kind(reason)}, not a string"
    return data, None


def reserve_exit_space(job_id: str) -> None:
    """Keep room for ``exit.json``: ``write_exit`` frees it when the disk is full."""
    with (
        contextlib.suppress(OSError),
        open(os.path.join(job_dir(job_id), EXIT_RESERVE_FILE), "wb") as handle,
    ):
        handle.write(b"\0" * EXIT_RESERVE_BYTES)


def write_exit(job_id: str, data: dict) -> None:
    """Record the job's end; on a full disk, the space reserved for it is used."""
    path = os.path.join(job_dir(job_id), EXIT_FILE)
    reserve = os.path.join(job_dir(job_id), EXIT_RESERVE_FILE)
    try:
        write_json(path, data)
    except OSError as exc:
        if exc.errno != errno.ENOSPC or not os.path.exists(reserve):
            raise
        os.remove(reserve)
        write_json(path, data)
    with contextlib.suppress(OSError):
        os.remove(reserve)


def request_cancel(job_id: str) -> None:
    """Leave the cancel marker (an empty file is enough on a full disk)."""
    with open(os.path.join(job_dir(job_id), CANCEL_FILE), "w", encoding="utf-8") as handle:
        with contextlib.suppress(OSError):
            handle.write(now() + "\n")
            handle.flush()


def withdraw_cancel(job_id: str) -> None:
    """Remove the cancel marker (a stop request that failed: an end that follows is not a cancel)."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(job_dir(job_id), CANCEL_FILE))


def cancel_requested(job_id: str) -> bool:
    return os.path.exists(os.path.join(job_dir(job_id), CANCEL_FILE))


def store_trouble(job_id: str) -> str | None:
    """Why the job directory may not take writes now, if it cannot: deleted,
    read-only, full. For a job that ended without recording its exit."""
    directory = job_dir(job_id)
    if not os.path.isdir(directory):
        return f"its job directory {directory} was deleted"
    if not os.access(directory, os.W_OK):
        try:
            read_only = os.statvfs(directory).f_flag & os.ST_RDONLY
        except OSError:
            read_only = False
        return (
            "its job directory is on a read-only file system"
            if read_only
            else "its job directory is not writable"
        )
    try:
        full = os.statvfs(directory).f_bavail == 0
    except OSError:
        full = False
    return "its job directory's file system is full (no space left on device)" if full else None


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
            return JobStatus(
                current.job,
                current.state,
                f"still {current.state} {timeout:.0f} s after {after}",
                current.progress,
            )
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


def startup_progress(log: str, tail: int = 4096) -> str:
    """What a running job whose log has no iteration yet is doing: the log's last line (start-up:
    containers, data, compilation can take minutes), or that it has written nothing yet."""
    from llmb.terminal import terminal_safe

    try:
        with open(log, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - tail))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return "starting: no log yet"
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    if not last:
        return "starting: the log is empty so far"
    shown = terminal_safe(last)
    return f"starting, no step yet; the log's last line: {shown[:100]}{'...' if len(shown) > 100 else ''}"


# ---------------------------------------------------------------- processes


def process_stat(pid: int) -> tuple[int, int] | None:
    """(start time in clock ticks since boot, session id) of the living
    process ``pid``; None when there is none (or only a zombie). With the
    pid, the start time names a process even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            stat = handle.read()
    except OSError:
        return None
    parts = stat[stat.rfind(")") + 2 :].split()
    if len(parts) < 20 or parts[0] in ("Z", "X"):
        return None  # a zombie has ended
    return int(parts[19]), int(parts[3])


def process_start_time(pid: int) -> int | None:
    found = process_stat(pid)
    return found[0] if found else None


def alive(pid: int | None, start_time: int | None) -> bool:
    if not pid:
        return False
    started = process_start_time(pid)
    return started is not None and (start_time is None or started == start_time)
