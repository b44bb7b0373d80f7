"""How many local jobs run at once on this machine, and the slots they take.

A local job's supervisor takes a slot before it starts any rank, and gives
it back when every rank has ended. A slot is a lock file,
``<install>/.local-jobs/<host>/slot-K.lock`` for K below the limit, held
with ``flock``: the kernel releases it when the last process holding it
ends, so a killed job never keeps its slot. The ranks inherit the lock, so
a job whose supervisor was killed keeps its slot while its ranks still
train. The directory is per host name: installs on a shared file system do
not share one machine's slots.

When every slot is taken the job waits, in order of arrival: it holds a
ticket (``queue/<time>-<job>.lock``, also flocked, so a killed waiter
leaves no live ticket) and only the oldest waiting ticket takes a slot as
one frees. ``llmb status`` says the job is QUEUED, waiting for a local
slot (the supervisor records that in the job's ``slot.json``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from llmb.errors import UsageError

LIMIT_VARIABLE = "LLMB_LOCAL_JOBS"
MAX_LIMIT = 1024
DIRECTORY = ".local-jobs"
QUEUE = "queue"
SLOT_FILE = "slot.json"  # in the job's directory: its wait and its slot, recorded by its supervisor
POLL_S = 0.2


def machine_cores() -> int:
    """The cores this process may run on (its affinity, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_limit(cores: int | None = None) -> int:
    """Half the cores, at least one. A local CPU run is a set of processes, one
    per rank, each busy on one thread (``engines/torch/train.cpu_threads``), and
    the usual local run (the docs', the tests', a proxy sweep's) has two ranks:
    half the cores as jobs keeps about one busy rank per core. A 2-core machine
    runs one job at a time, as a local sweep does."""
    return max(1, (machine_cores() if cores is None else cores) // 2)


def job_limit() -> int:
    """The most local jobs that run at once here: ``LLMB_LOCAL_JOBS``, else ``default_limit()``."""
    raw = os.environ.get(LIMIT_VARIABLE, "").strip()
    if not raw:
        return default_limit()
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_LIMIT:
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise UsageError(
            f"{LIMIT_VARIABLE}={shown!r} is not valid: give a whole number from 1 to {MAX_LIMIT}, the "
            f"most local jobs that run at once on this machine (unset: {default_limit()} here, half "
            f"the cores), e.g. {LIMIT_VARIABLE}=1."
        )
    return int(raw)


def host_key(name: str | None = None) -> str:
    """This machine's name as a directory name."""
    key = re.sub(r"[^A-Za-z0-9._-]", "_", name if name is not None else socket.gethostname())[:200]
    return key if key.strip(".") else "localhost"


def slots_dir(install: str) -> str:
    return os.path.join(install, DIRECTORY, host_key())


def stamp() -> str:
    """Now, to the microsecond (records of waits and slots are compared with each other)."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def waiting_reason(limit: int, ahead: int) -> str:
    running = f"{limit} local job{'s' if limit != 1 else ''} running"
    if os.environ.get(LIMIT_VARIABLE, "").strip():
        source = f"{LIMIT_VARIABLE}={limit}"
    else:
        source = f"half its {machine_cores()} cores; {LIMIT_VARIABLE} changes it"
    queued = f"; {ahead} job{'s' if ahead != 1 else ''} queued before this one" if ahead else ""
    return f"waiting for a local slot: {running}, the most this machine runs at once ({source}){queued}"


def queued_reason(record: dict | None) -> str | None:
    """What ``slot.json`` says of a job still waiting for its slot; None once it has one (or never waited)."""
    if not isinstance(record, dict) or "acquired_at" in record:
        return None
    reason = record.get("waiting")
    return reason if isinstance(reason, str) else None


def _open(path: str) -> int:
    return os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)


def _lock(fd: int, flags: int) -> bool:
    try:
        fcntl.flock(fd, flags | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@dataclass
class Slot:
    index: int
    fd: int  # flocked; passed on to the ranks
    # stamped while the job still holds its place in the queue: the next one starts later
    acquired_at: str

    def release(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def _free_slot(directory: str, limit: int) -> Slot | None:
    for index in range(limit):
        fd = _open(os.path.join(directory, f"slot-{index}.lock"))
        try:
            if _lock(fd, fcntl.LOCK_EX):
                return Slot(index, fd, stamp())
        except OSError:  # no locks on this file system (ENOLCK): said by the caller
            os.close(fd)
            raise
        os.close(fd)
    return None


class _Ticket:
    """A place in the queue: a flocked file, named so that the oldest sorts first."""

    def __init__(self, queue: str, job_id: str):
        self.name = f"{time.time_ns():020d}-{host_key(job_id)}.lock"
        self.path = os.path.join(queue, self.name)
        # never seen unlocked: locked, then renamed
        hidden = os.path.join(queue, f".{self.name}.{os.getpid()}")
        self.fd = _open(hidden)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            os.rename(hidden, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(hidden)
            os.close(self.fd)
            raise

    def leave(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(self.fd)


def _live_tickets(queue: str, before: str | None = None) -> list[str]:
    """The tickets of jobs waiting (older than ``before``, when given); a dead waiter's ticket is removed."""
    live = []
    for name in sorted(os.listdir(queue)):
        if (
            name.startswith(".")
            or not name.endswith(".lock")
            or (before is not None and name >= before)
        ):
            continue
        path = os.path.join(queue, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # it left the queue meanwhile
        try:
            if not _lock(fd, fcntl.LOCK_SH):
                live.append(name)
                continue
            with contextlib.suppress(OSError):
                os.unlink(path)  # its holder is gone (or just left)
        finally:
            os.close(fd)
    return live


def take(
    install: str,
    job_id: str,
    limit: int,
    stop: Callable[[], bool],
    waiting: Callable[[str], None],
    poll: float = POLL_S,
) -> Slot | None:
    """A slot for ``job_id`` (at most ``limit`` are held at once), once one is free and no job that
    came earlier waits for one; None when ``stop()`` says the job is no longer wanted. ``waiting``
    is told why the job waits, each time that changes. OSError when the slots cannot be kept."""
    directory = slots_dir(install)
    queue = os.path.join(directory, QUEUE)
    os.makedirs(queue, exist_ok=True)
    if not _live_tickets(queue) and (slot := _free_slot(directory, limit)) is not None:
        return slot
    ticket = _Ticket(queue, job_id)
    try:
        said = None
        while not stop():
            ahead = _live_tickets(queue, before=ticket.name)
            if not ahead and (slot := _free_slot(directory, limit)) is not None:
                return slot
            reason = waiting_reason(limit, len(ahead))
            if reason != said:
                waiting(reason)
                said = reason
            time.sleep(poll)
        return None
    finally:
        ticket.leave()
