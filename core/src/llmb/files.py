"""Opening files llmb does not fully control: regular files only, bounded, never blocking.

Where llmb expects a file, anything may stand: a FIFO (opening one for
reading waits for a writer, and reading it lasts as long as the writer
writes), a device (``/dev/zero`` never ends), a directory, a symbolic link
to any of these, or a regular file of gigabytes. Every file llmb reads that
a user, a job or another tool could have put there goes through here: the
logs the scanner reads (``results/scan.py``), the YAML files users write
(``yamlio.load_user_yaml_file``), llmb's own JSON state files
(``runs/experiment.load_json_state``: suites, sweeps, jobs, recipes).

``open_regular`` refuses anything but a regular file before opening it and
opens without blocking; ``open_regular_at`` does so for a file that llmb
also creates (the local job slots' lock files) and follows no symbolic link; ``read_regular`` and ``read_tail`` read no more
than a limit, and no more than the file's size when it was opened (a file
that grows meanwhile is not followed); ``why_unreadable`` turns their
errors into a reason a person can act on.

Only the standard library's smallest modules are imported: the CLI's
start-up time is measured (benchmarks/cli_startup.py).
"""

from __future__ import annotations

import errno
import os
import stat

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NotRegularFile(OSError):
    """``path`` (or what it links to) is not a regular file; ``kind`` says what it is
    (``a FIFO (named pipe)``, ``a directory``...)."""

    def __init__(self, path: str, kind: str):
        super().__init__(errno.EINVAL, f"{kind}, not a regular file", path)
        self.kind = kind

    def __str__(self) -> str:
        return f"{self.filename} is {self.kind}, not a regular file"


def _require_regular(path: str, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise NotRegularFile(path, kind)


def open_regular(path: str | os.PathLike[str]):
    """``(binary handle, size)`` of the regular file at ``path`` (symbolic
    links followed). Anything else raises OSError without being opened; the
    open itself never blocks (``O_NONBLOCK``, should the file be swapped
    for a FIFO in between) and does not become a controlling terminal."""
    path = os.fspath(path)
    _require_regular(path, os.stat(path))
    flags = (
        os.O_RDONLY
        | getattr(os, "O_NONBLOCK", 0)
        | getattr(os, "O_NOCTTY", 0)
        | getattr(os, "O_CLOEXEC", 0)
    )
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        _require_regular(path, st)
        return os.fdopen(fd, "rb"), st.st_size
    except BaseException:
        os.close(fd)
        raise


def kind_of(st: os.stat_result) -> str:
    """What ``st`` describes, in words: ``a regular file``, ``a FIFO (named pipe)``, ``a symbolic
    link`` (from ``lstat``)..."""
    if stat.S_ISREG(st.st_mode):
        return "a regular file"
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link"
    return next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")


def open_regular_at(
    name: str, dir_fd: int, create: bool = False, exclusive: bool = False, shown: str | None = None
) -> int:
    """A read-only descriptor of the regular file ``name`` in the directory ``dir_fd`` (made there,
    empty, with ``create``; only made, never an existing one, with ``exclusive``). Unlike
    ``open_regular`` a symbolic link is not followed (nothing is made or opened where it points):
    it, and anything else that is no regular file, raises NotRegularFile, after an open that never
    blocks (``O_NONBLOCK``: a FIFO) and is closed again; ``shown`` is its path in that error."""
    flags = (
        os.O_RDONLY
        | os.O_NOFOLLOW
        | getattr(os, "O_NONBLOCK", 0)
        | getattr(os, "O_NOCTTY", 0)
        | getattr(os, "O_CLOEXEC", 0)
        | (os.O_CREAT if create or exclusive else 0)
        | (os.O_EXCL if exclusive else 0)
    )
    try:
        fd = os.open(name, flags, 0o666, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EOPNOTSUPP):
            raise
        try:  # a link (ELOOP), a directory, a socket...: say which
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            raise exc from None
        if stat.S_ISREG(st.st_mode):
            raise
        raise NotRegularFile(shown or name, kind_of(st)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(shown or name, kind_of(st))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """The first ``limit`` bytes of a regular file (``open_regular``'s rules).
    To refuse a file over a bound rather than cut it, ask for one byte more
    than the bound and compare."""
    handle, size = open_regular(path)
    with handle:
        return handle.read(min(size, limit))


def read_tail(path: str | os.PathLike[str], limit: int) -> bytes:
    """The last ``limit`` bytes of a regular file (``open_regular``'s rules;
    its first line may be partial), b"" when it cannot be read: a failed
    job's last words are at the end of its log, however long the log."""
    try:
        handle, size = open_regular(path)
    except OSError:
        return b""
    with handle:
        try:
            start = max(0, size - limit)
            handle.seek(start)
            tail = handle.read(size - start)
        except OSError:
            return b""
    return tail


def why_unreadable(path: str | os.PathLike[str], exc: OSError) -> str:
    """``exc`` (from ``open_regular`` or a read) as a reason a person can act on."""
    path = os.fspath(path)
    name = os.path.basename(path)
    try:
        target = os.readlink(path)
    except OSError:
        target = None
    if isinstance(exc, NotRegularFile):
        what = (
            f"a symbolic link to {target}, which is {exc.kind}" if target is not None else exc.kind
        )
        return f"{name} is {what}, not a regular file; only regular files are read"
    if exc.errno == errno.ELOOP:
        return f"{name} is a symbolic link to {target} that cannot be followed: the links loop"
    if isinstance(exc, FileNotFoundError) and target is not None:
        return f"{name} is a symbolic link to {target}, which does not exist"
    return f"cannot read {name}: {exc.strerror or exc}"
