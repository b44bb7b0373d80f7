"""One local job per GPU: the GPUs a local job's ranks use, and the locks that keep them its own.

A local job that computes on GPUs (its run's device is ``cuda``) takes, before
any rank starts, one lock per GPU its ranks will use:
``<install>/.local-jobs/<host>/gpu-<index>.lock`` beside the local slots
(``local_slots``), held with ``flock`` under the same rules: only regular files
and real directories, the ranks inherit the locks (a job whose supervisor was
killed keeps its GPUs while its ranks still train), the kernel frees them when
the job's last process ends. The job takes all of its GPUs at once or none
(never one while waiting for another: two jobs can never hold each other up).
The lock file names the job that holds it, so that a waiting job can say who.

While one of its GPUs is held (or a job that came earlier waits for it) the
job waits, QUEUED, in order of arrival: it holds a ticket in each of its GPUs'
queues (``gpu-<index>.queue/``, ``local_slots``' tickets), all with one name,
so that the order of two jobs is the same on every GPU they share. Its
``slot.json`` says what it waits for ("waiting for GPU 0, held by job
local-3f9a1c"), which ``llmb status`` shows.

A job on GPUs takes no local slot: the GPUs are what it must not share, and
``LLMB_LOCAL_JOBS`` keeps CPU jobs (one busy core per rank) to the machine's
cores. A CPU job takes a slot as before.

Which GPUs: rank r computes on the r-th GPU it sees (``LOCAL_RANK``,
``engines/torch/runtime``), so the first ``ranks`` entries of
``CUDA_VISIBLE_DEVICES`` when it is set, else GPUs 0 to ``ranks`` - 1. An
index is CUDA's (as ``CUDA_VISIBLE_DEVICES`` numbers the GPUs); a GPU's UUID is
turned into its index through ``nvidia-smi -L``, so that one GPU has one lock
whichever way a job names it. A UUID that listing does not name is no GPU of
this machine and names its own lock (MIG instances are locked by their own
names). When ``nvidia-smi -L`` cannot list the GPUs (not installed, failing,
hung) a UUID cannot be resolved: the job is refused (``GpuNameError``, a
UsageError: by ``llmb run`` before anything is submitted, by the supervisor
before any rank starts), since its lock would be another file than the one
a job naming the same GPU by its index takes. nvidia-smi numbers GPUs in PCI
order, CUDA fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``: on a
machine of one GPU type the two usually agree.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from llmb.backends import local_slots
from llmb.files import open_regular_at

# which GPUs a job computes on (its indices): a run's part, shared with llmb run's checks before submitting
from llmb.runs.job_gpus import VISIBLE_VARIABLE, GpuNameError, job_gpus, visible_devices  # noqa: F401

HOLDER_LIMIT = 4096  # bytes of a lock file read for its holder
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def lock_name(gpu: str) -> str:
    return f"gpu-{local_slots.host_key(gpu)}.lock"


def queue_name(gpu: str) -> str:
    return f"gpu-{local_slots.host_key(gpu)}.queue"


def shown_gpus(gpus: list[str]) -> str:
    return ("GPU " if len(gpus) == 1 else "GPUs ") + ", ".join(gpus)


def unenforceable(install: str, gpus: list[str]) -> str | None:
    """Why ``gpus`` cannot be kept to one local job each (found before the job is submitted,
    without making anything); None when nothing is known to stand in the way."""
    for gpu in gpus:
        if reason := local_slots.locks_unusable(install, queue_name(gpu), [lock_name(gpu)]):
            return reason
    return None


def holder(slots: int, gpu: str) -> str | None:
    """The job the lock file of ``gpu`` names as its holder (None: unreadable or unnamed)."""
    try:
        fd = open_regular_at(lock_name(gpu), slots)
    except OSError:
        return None
    try:
        data = os.pread(fd, HOLDER_LIMIT, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        job = json.loads(data.decode("utf-8")).get("job")
    except (ValueError, AttributeError):
        return None
    return job if isinstance(job, str) and _JOB_ID.fullmatch(job) else None


def _record_holder(slots: int, gpu: str, locked: int, job_id: str) -> None:
    """Write into the lock file (``locked``, flocked) which job holds it. A second descriptor, for
    writing, opened without following a link or blocking, and written only when it is the very
    file locked; a record that cannot be written only leaves waiting jobs without the name."""
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(lock_name(gpu), flags, dir_fd=slots)
    except OSError:
        return
    try:
        mine, theirs = os.fstat(fd), os.fstat(locked)
        if not stat.S_ISREG(mine.st_mode) or (mine.st_dev, mine.st_ino) != (
            theirs.st_dev,
            theirs.st_ino,
        ):
            return
        record = json.dumps({"job": job_id, "since": local_slots.stamp(), "pid": os.getpid()})
        os.ftruncate(fd, 0)
        os.pwrite(fd, (record + "\n").encode(), 0)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass
class GpuLocks:
    """The locks of a job's GPUs, all held."""

    gpus: list[str]
    fds: tuple[int, ...]  # flocked; passed on to the ranks
    acquired_at: str
    released: bool = field(default=False)

    def release(self) -> None:
        if not self.released:
            for fd in self.fds:
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            self.released = True
            self.fds = ()


def _take_all(slots: int, directory: str, gpus: list[str], job_id: str) -> GpuLocks | None:
    """Every lock of ``gpus``, or none (None) when one is held."""
    taken: list[int] = []
    try:
        for gpu in gpus:
            shown = local_slots._shown(os.path.join(directory, lock_name(gpu)))
            fd = open_regular_at(lock_name(gpu), slots, create=True, shown=shown)
            try:
                locked = local_slots._lock(fd, fcntl.LOCK_EX)
            except BaseException:  # no locks on this file system (ENOLCK): said by the caller
                os.close(fd)
                raise
            if not locked:
                os.close(fd)
                for held in taken:
                    fcntl.flock(held, fcntl.LOCK_UN)
                    os.close(held)
                return None
            taken.append(fd)
    except BaseException:
        for held in taken:
            os.close(held)
        raise
    for gpu, fd in zip(gpus, taken, strict=True):
        _record_holder(slots, gpu, fd, job_id)
    return GpuLocks(list(gpus), tuple(taken), local_slots.stamp())


def waiting_reason(slots: int, gpus: list[str], ahead: dict[str, int]) -> str | None:
    """What the job waits for: each of its GPUs that is held (by which job) or has jobs queued for
    it; None when none is (a GPU freed or taken meanwhile: the next look finds it so)."""
    parts = []
    for gpu in gpus:
        probe = None
        with contextlib.suppress(OSError):
            probe = open_regular_at(lock_name(gpu), slots)
        held = False
        if probe is not None:
            try:
                held = not local_slots._lock(probe, fcntl.LOCK_SH)
            except OSError:
                held = False
            finally:
                os.close(probe)
        count = ahead.get(gpu, 0)
        queued = f"{count} job{'s' if count != 1 else ''} queued for it before this one"
        if held:
            job = holder(slots, gpu)
            part = (
                f"GPU {gpu}, held by job {job}" if job else f"GPU {gpu}, held by another local job"
            )
            parts.append(part + (f" ({queued})" if count else ""))
        elif count:
            parts.append(f"GPU {gpu} ({queued})")
    return "waiting for " + "; ".join(parts) if parts else None


def take(
    install: str,
    job_id: str,
    gpus: list[str],
    stop: Callable[[], bool],
    waiting: Callable[[str], None],
    poll: float = local_slots.POLL_S,
) -> GpuLocks | None:
    """The locks of ``gpus`` for ``job_id``, once none is held and no job that came earlier waits
    for one of them; None when ``stop()`` says the job is no longer wanted. ``waiting`` is told
    why the job waits, each time that changes. OSError when the locks cannot be kept
    (``local_slots.why`` says why)."""
    gpus = sorted(
        dict.fromkeys(gpus), key=lambda g: (not g.isdigit(), int(g) if g.isdigit() else 0, g)
    )
    directory = local_slots.slots_dir(install)
    slots, _ = local_slots.open_slots_dir(install, queue=None)
    queues: dict[str, int] = {}
    try:
        for gpu in gpus:
            shown = local_slots._shown(os.path.join(directory, queue_name(gpu)))
            queues[gpu] = local_slots._directory(queue_name(gpu), shown, slots)
        local_slots.check_lock_files(slots, directory, [lock_name(gpu) for gpu in gpus])
        if not any(local_slots._live_tickets(q) for q in queues.values()) and (
            locks := _take_all(slots, directory, gpus, job_id)
        ):
            return locks
        name = local_slots.ticket_name(job_id)  # one name in every queue: one order on every GPU
        tickets: list[local_slots._Ticket] = []
        try:
            for gpu in gpus:
                tickets.append(local_slots._Ticket(queues[gpu], job_id, name))
            said = None
            while not stop():
                ahead = {
                    gpu: len(local_slots._live_tickets(q, before=name)) for gpu, q in queues.items()
                }
                if not any(ahead.values()) and (locks := _take_all(slots, directory, gpus, job_id)):
                    return locks
                reason = (
                    waiting_reason(slots, gpus, ahead) or said or f"waiting for {shown_gpus(gpus)}"
                )
                if reason != said:
                    waiting(reason)
                    said = reason
                time.sleep(poll)
            return None
        finally:
            for ticket in tickets:
                ticket.leave()
    finally:
        for fd in queues.values():
            os.close(fd)
        os.close(slots)
