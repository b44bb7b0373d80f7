"""Finding and stopping a local job's processes, safely against pid reuse.

A local job's processes are its supervisor and every rank (and whatever a
rank starts). All carry ``LLMB_JOB_DIR=<job directory>`` in their
environment, and all start in the supervisor's session. A process counts
as the job's when its environment says so or it is one the job recorded
(same pid and start time), or when it is in the job's session while a
process identified either way is in it too (the kernel keeps a session's
id from being reused while any of its processes live).

Each process is named by (pid, start time from ``/proc/<pid>/stat``), and is
signalled through a pidfd opened before its start time is checked again, so
a pid reused meanwhile is never signalled.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from llmb.runs.jobs import process_stat

JOB_DIR_VARIABLE = "LLMB_JOB_DIR"


@dataclass(frozen=True)
class Proc:
    pid: int
    start_time: int
    session: int


def job_tag(job_dir: str) -> str:
    """The value of ``LLMB_JOB_DIR`` for the job in ``job_dir`` (symbolic links resolved)."""
    return os.path.realpath(job_dir)


def _stat(pid: int) -> Proc | None:
    found = process_stat(pid)
    return Proc(pid, *found) if found else None


def _tagged(pid: int, tag: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return tag in handle.read().split(b"\0")
    except OSError:
        return False


def job_processes(
    job_dir: str, session: int | None = None, recorded: tuple[tuple[int, int], ...] = ()
) -> list[Proc]:
    """The job's living processes. ``session``: the supervisor's session id,
    when known (only its members' environments are then read); ``recorded``:
    the (pid, start time) of processes the job recorded as its own."""
    tag = f"{JOB_DIR_VARIABLE}={job_tag(job_dir)}".encode()
    me = os.getpid()
    candidates = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            found = _stat(int(name))
            if found is not None and (session is None or found.session == session):
                candidates.append(found)
    tagged = [p for p in candidates if (p.pid, p.start_time) in recorded or _tagged(p.pid, tag)]
    if session is None or not tagged:
        return tagged
    return candidates  # a process of the job is in the session: the session is the job's


def signal_process(proc: Proc, sig: int) -> bool:
    """Send ``sig`` to ``proc`` if it is still that process; whether it was sent."""
    try:
        fd = os.pidfd_open(proc.pid)
    except OSError:
        return False
    try:
        current = _stat(proc.pid)
        if current is None or current.start_time != proc.start_time:
            return False  # ended, or the pid now names another process
        signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
