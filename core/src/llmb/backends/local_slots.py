"""How many local jobs run at once on this machine, and the slots they take.

A local job on CPU takes a slot; a job on GPUs takes the locks of its GPUs
instead (``local_gpus``: one job per GPU, by the same rules and tickets).
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

Only regular files and real directories are used (``llmb.files.open_regular_at``):
no symbolic link is followed (nothing is made outside the install), no FIFO
is waited on. Where the slots cannot be kept (a file where their directory
goes, a directory that cannot be written, no file locks, a slot file that is
no regular file) the job runs without waiting for others: ``unenforceable``
says why before the job is submitted (a warning on the terminal), the
supervisor again in the job's log. A queue entry that is no regular file is
no ticket and is passed over.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from llmb.errors import UsageError
from llmb.files import NotRegularFile, kind_of, open_regular_at

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


class SlotsUnusable(OSError):
    """The slots cannot be kept here; the message says why, in words."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "the local slots cannot be kept"


def why(exc: OSError) -> str:
    """``exc`` from ``take`` as a reason a person can act on."""
    if isinstance(exc, NotRegularFile | SlotsUnusable):
        return str(exc)
    return os.strerror(exc.errno).lower() if exc.errno else str(exc)


def _shown(path: str) -> str:
    from llmb.paths import shown_path

    return shown_path(path)


def _slot_name(index: int) -> str:
    return f"slot-{index}.lock"


def _directory(name: str, shown: str, dir_fd: int | None = None) -> int:
    """The directory ``name`` (in ``dir_fd``), made if missing, opened without following a link."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o777, dir_fd=dir_fd)
    flags = (
        os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (os.O_NOFOLLOW if dir_fd is not None else 0)
    )
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            raise exc from None
        if stat.S_ISDIR(st.st_mode):
            raise
        raise SlotsUnusable(f"{shown} is {kind_of(st)}, not a directory") from None


def open_slots_dir(install: str, queue: str | None = QUEUE) -> tuple[int, int | None]:
    """(slots directory, its directory ``queue``), each made if missing and opened (no link
    followed); no queue directory (None) when ``queue`` is None."""
    os.makedirs(install, exist_ok=True)
    opened: list[int] = []
    try:
        opened.append(_directory(install, _shown(install)))
        path = install
        for name in (DIRECTORY, host_key(), *([queue] if queue else [])):
            path = os.path.join(path, name)
            opened.append(_directory(name, _shown(path), opened[-1]))
    except BaseException:
        for fd in opened:
            os.close(fd)
        raise
    os.close(opened[0])
    os.close(opened[1])
    return opened[2], (opened[3] if queue else None)


def _open_slots(install: str) -> tuple[int, int]:
    """(slots directory, queue directory), each made if missing and opened (no link followed)."""
    slots, queue = open_slots_dir(install)
    assert queue is not None
    return slots, queue


def check_lock_files(slots: int, directory: str, names) -> None:
    """NotRegularFile when one of the lock files ``names`` is there and is no regular file."""
    for name in names:
        try:
            st = os.stat(name, dir_fd=slots, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(_shown(os.path.join(directory, name)), kind_of(st))


def _check_slot_files(slots: int, directory: str, limit: int) -> None:
    """NotRegularFile when a slot file below ``limit`` is there and is no regular file."""
    check_lock_files(slots, directory, [_slot_name(index) for index in range(limit)])


def unenforceable(install: str, limit: int) -> str | None:
    """Why local jobs in ``install`` cannot be kept to ``limit`` at once (found before the job is
    submitted, without making anything); None when nothing is known to stand in the way."""
    return locks_unusable(install, QUEUE, [_slot_name(index) for index in range(limit)])


def locks_unusable(install: str, queue: str, lock_files: list[str]) -> str | None:
    """Why the lock files ``lock_files`` and the queue directory ``queue`` beside them (in
    ``slots_dir(install)``) cannot be kept, found without making anything; None when nothing
    is known to stand in the way (the local slots' and ``local_gpus``' check)."""
    directory = slots_dir(install)
    chain = [install, os.path.join(install, DIRECTORY), directory, os.path.join(directory, queue)]
    existing: list[str] = []
    for depth, path in enumerate(chain):
        try:
            st = os.stat(path) if depth == 0 else os.lstat(path)
        except FileNotFoundError:
            break
        except OSError as exc:
            return f"{_shown(path)} cannot be read ({why(exc)})"
        if not stat.S_ISDIR(st.st_mode):
            return f"{_shown(path)} is {kind_of(st)}, not a directory"
        existing.append(path)
    if not existing:
        return None  # no install yet: the run makes it, or fails saying so
    # where the slot files and tickets are made: the slots' directories, else the deepest one there
    made_in = [p for p in existing if p in chain[2:]]
    if len(existing) < len(chain):
        made_in.append(existing[-1])
    for path in dict.fromkeys(made_in):
        if not os.access(path, os.W_OK | os.X_OK):
            # root passes every mode but not a read-only file system or an immutable directory
            return f"{_shown(path)} cannot be written"
    try:
        fd = os.open(existing[-1], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        return f"{_shown(existing[-1])} cannot be opened ({why(exc)})"
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
    except BlockingIOError:
        pass
    except OSError as exc:  # ENOLCK: a file system without locks
        return f"{_shown(existing[-1])} takes no file locks ({why(exc)})"
    finally:
        os.close(fd)
    if directory in existing:
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                check_lock_files(fd, directory, lock_files)
            finally:
                os.close(fd)
        except OSError as exc:
            return why(exc)
    return None


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

    @property
    def fds(self) -> tuple[int, ...]:
        """The flocked descriptors the ranks inherit."""
        return (self.fd,) if self.fd >= 0 else ()

    def release(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def _free_slot(slots: int, directory: str, limit: int) -> Slot | None:
    for index in range(limit):
        shown = _shown(os.path.join(directory, _slot_name(index)))
        fd = open_regular_at(_slot_name(index), slots, create=True, shown=shown)
        try:
            if _lock(fd, fcntl.LOCK_EX):
                return Slot(index, fd, stamp())
        except OSError:  # no locks on this file system (ENOLCK): said by the caller
            os.close(fd)
            raise
        os.close(fd)
    return None


def ticket_name(job_id: str) -> str:
    """A ticket's name for ``job_id`` arriving now: tickets sort in order of arrival."""
    return f"{time.time_ns():020d}-{host_key(job_id)}.lock"


class _Ticket:
    """A place in the queue: a flocked file, named so that the oldest sorts first."""

    def __init__(self, queue: int, job_id: str, name: str | None = None):
        self.queue = queue
        self.name = name or ticket_name(job_id)
        # never seen unlocked: locked, then renamed
        hidden = f".{self.name}.{os.getpid()}"
        self.fd = open_regular_at(hidden, queue, exclusive=True)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            os.rename(hidden, self.name, src_dir_fd=queue, dst_dir_fd=queue)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(hidden, dir_fd=queue)
            os.close(self.fd)
            raise

    def leave(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.name, dir_fd=self.queue)
        os.close(self.fd)


def _live_tickets(queue: int, before: str | None = None) -> list[str]:
    """The tickets of jobs waiting (older than ``before``, when given); a dead waiter's ticket is
    removed, and what is no regular file is no ticket."""
    live = []
    for name in sorted(os.listdir(queue)):
        if (
            name.startswith(".")
            or not name.endswith(".lock")
            or (before is not None and name >= before)
        ):
            continue
        try:
            fd = open_regular_at(name, queue)
        except (FileNotFoundError, NotRegularFile):
            continue  # it left the queue meanwhile, or was never a ticket (a FIFO, a link)
        try:
            if not _lock(fd, fcntl.LOCK_SH):
                live.append(name)
                continue
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=queue)  # its holder is gone (or just left)
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
    is told why the job waits, each time that changes. OSError when the slots cannot be kept
    (``why`` says why)."""
    directory = slots_dir(install)
    slots, queue = _open_slots(install)
    try:
        _check_slot_files(slots, directory, limit)
        if not _live_tickets(queue) and (slot := _free_slot(slots, directory, limit)) is not None:
            return slot
        ticket = _Ticket(queue, job_id)
        try:
            said = None
            while not stop():
                ahead = _live_tickets(queue, before=ticket.name)
                if not ahead and (slot := _free_slot(slots, directory, limit)) is not None:
                    return slot
                reason = waiting_reason(limit, len(ahead))
                if reason != said:
                    waiting(reason)
                    said = reason
                time.sleep(poll)
            return None
        finally:
            ticket.leave()
    finally:
        os.close(slots)
        os.close(queue)
