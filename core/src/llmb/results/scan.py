"""Read a log once, in large chunks, and hand each chunk to every parser.

Memory stays flat however large the log is: the scanner holds one chunk
(``CHUNK`` bytes) plus at most one partial line. A line longer than
``MAX_LINE`` (a binary blob, a runaway print) is skipped and counted, never
buffered. Chunks always end at a line end, so parsers can run
``re.findall`` over a whole chunk: the regular-expression engine does the
per-line work in C, which is what makes gigabyte NCCL traces readable at a
few hundred MB/s.

Most chunks concern few parsers, so the literal each parser tests first
(``b"..." in chunk``) is most of the work on ordinary output: on Linux a
chunk is a ``Chunk``, whose ``in`` is the C library's ``memmem``, three
times as fast as CPython's search on log text.

Parsers read chunks in registration order, and a parser may hand on the
chunk without the text it alone accounts for (see ``LogReader.feed``).
A parser that raises is switched off for the rest of the log and its error
is reported; the scan itself never fails on content, only on I/O.

A large log may be read by several processes (``scan``'s ``jobs``): the
leading parsers whose readers can be merged (the NCCL parsers, most of a
trace's work) read it in segments in forked workers, and the others read
what those hand on, in order, in this process: the same report as one
reading gives (see ``_scan_in_segments``). Every reader's work is linear in
the length of a line, whatever the line holds
(tests/test_parse_adversarial_lines.py).

Only regular files are read (``llmb.files.open_regular``): a FIFO, a device
or a directory is refused before it is opened, so nothing can block the scan
or feed it without end, and no more than the file's size at opening is read.
(``open_regular``, ``read_regular``, ``read_tail``, ``why_unreadable`` and
``NotRegularFile`` live in ``llmb.files``, shared with every other reader of
files llmb does not control; they are still importable from here.)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from llmb.files import NotRegularFile, open_regular, read_regular, read_tail, why_unreadable

__all__ = [
    "CHUNK",
    "MAX_LINE",
    "Chunk",
    "LogParser",
    "LogReader",
    "NotRegularFile",
    "ScanReport",
    "as_chunk",
    "open_regular",
    "read_regular",
    "read_tail",
    "scan",
    "why_unreadable",
]

CHUNK = 1 << 20  # bytes read at once: fits in a CPU cache, so each parser's pass over it is cheap
MAX_LINE = 1 << 20
SMALL = 4096  # bytes: below this, CPython's own search is cheaper than a call into the C library
NEAR = 2048  # bytes from where a search starts that CPython's search takes (``Chunk.find``)


class Chunk(bytes):
    """What the parsers read (see ``as_chunk``): bytes whose literal test,
    ``b"..." in chunk``, the first thing each parser does with a chunk, is
    the C library's ``memmem``. glibc's is about three times as fast on log
    text as CPython's own search, and a chunk that concerns no parser still
    has a dozen literals looked for in it. Everything else is ``bytes``' own
    (and returns plain ``bytes``)."""

    __slots__ = ()

    def __contains__(self, needle) -> bool:
        if type(needle) is bytes:
            return bool(_MEMMEM(self, len(self), needle, len(needle)))
        return bytes.__contains__(self, needle)

    def find(self, needle, start: int = 0, end: int | None = None) -> int:  # type: ignore[override]
        """``bytes.find``, by ``memmem`` past the next ``NEAR`` bytes for a needle of several bytes:
        CPython's own search, on a run of a character the needle holds (a line of blanks, for
        ``Step Time :``), tries every position, ten times as slow as on prose; ``memmem`` (two-way)
        takes the same time on any text, but a call into it costs a microsecond, three times
        CPython's search of the next line. So the next ``NEAR`` bytes (where the next of many
        matches is) are CPython's, the rest ``memmem``'s: no byte is searched by both more than a
        needle's length, and no more than ``NEAR`` bytes a call are searched the slower way."""
        if type(needle) is not bytes or len(needle) < 2 or end is not None or start < 0:
            return bytes.find(self, needle, start, len(self) if end is None else end)
        near = start + NEAR
        if near >= len(self):
            return bytes.find(self, needle, start)
        found = bytes.find(self, needle, start, near)
        if found >= 0:
            return found
        # a match that begins in the near bytes and ends past them is memmem's to find
        start = max(start, near - len(needle) + 1)
        base = _ADDRESS(self).value
        found = _MEMMEM_AT(base + start, len(self) - start, needle, len(needle))
        return -1 if not found else found - base


_MEMMEM: Any = False  # the C library's memmem once looked up (None: none to use)
_MEMMEM_AT: Any = None  # the same, taking the haystack as an address (Chunk.find's offset)
_ADDRESS: Any = None  # bytes -> the address of its first byte


def _c_memmem():
    """The C library's ``memmem`` on Linux (glibc's or musl's), else None."""
    global _MEMMEM_AT, _ADDRESS
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        # two handles on the library: each holds its own function object, with its own argument types
        function, at = ctypes.CDLL(None).memmem, ctypes.CDLL(None).memmem
    except Exception:  # noqa: BLE001 - no ctypes, no C library, no memmem: CPython's search it is
        return None
    function.restype = ctypes.c_void_p
    function.argtypes = (ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t)
    at.restype = ctypes.c_void_p
    at.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t)
    _MEMMEM_AT = at

    def address(data: bytes):
        return ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p)

    _ADDRESS = address
    return function


def as_chunk(data: bytes) -> bytes:
    """``data`` as a ``Chunk`` (a copy: cheaper than the searches it speeds
    up), or as it is where it is small or there is no memmem."""
    global _MEMMEM
    if _MEMMEM is False:
        _MEMMEM = _c_memmem()
    if _MEMMEM is None or len(data) < SMALL or type(data) is Chunk:
        return data
    return Chunk(data)


class LogReader(Protocol):
    """Per-log state of one parser."""

    def feed(self, chunk: bytes) -> bytes | None:
        """Whole lines (ending in ``\\n``), in file order. Most chunks do not
        concern a given parser: test a literal first (``b"..." in chunk``).

        Return None to pass the chunk on unchanged, or the chunk without the
        text this parser alone accounts for (whole lines, or the middles of
        lines, keeping every line end): the parsers after it read only what
        is left. The NCCL parser does this, so that the rest scan a gigabyte
        trace's few interesting lines instead of the whole trace."""

    def finish(self) -> Any:
        """What this parser found, once the log has been read.

        A reader may also have ``merge(other)``: take in what ``other``, a
        reader of the same parser, found in the text that follows this one's,
        so that it is as if this one had read both. The leading parsers whose
        readers have it may read a large log in segments, in worker processes
        (their readers are sent back pickled)."""


@dataclass(frozen=True)
class LogParser:
    """A registered parser: ``start()`` makes the state for one log."""

    name: str
    description: str
    start: Callable[[], LogReader]


@dataclass
class ScanReport:
    path: str
    bytes_read: int = 0
    long_lines: int = 0
    binary: bool = False
    findings: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def scan(
    path: str,
    parsers: list[LogParser],
    chunk_size: int = CHUNK,
    max_line: int = MAX_LINE,
    jobs: int = 1,
) -> ScanReport:
    """Every parser's findings in the log at ``path``. With ``jobs`` of 2 or
    more, a log of at least ``SEGMENTED_MIN`` bytes is read by that many
    worker processes in segments (see ``_scan_in_segments``): the same
    report, sooner."""
    handle, size = open_regular(path)
    with handle:
        if jobs >= 2 and size >= SEGMENTED_MIN and _may_fork():
            report = _scan_in_segments(
                handle.fileno(), size, str(path), parsers, chunk_size, max_line, jobs
            )
            if report is not None:
                return report
        return _scan_whole(handle, size, str(path), parsers, chunk_size, max_line)


def _start(parsers: list[LogParser], report: ScanReport) -> dict[str, LogReader]:
    readers: dict[str, LogReader] = {}
    for parser in parsers:
        try:
            readers[parser.name] = parser.start()
        except Exception as exc:  # noqa: BLE001 - a broken parser must not stop the scan
            report.errors[parser.name] = f"{type(exc).__name__}: {exc}"
    return readers


def _feeder(readers: dict[str, LogReader], report: ScanReport) -> Callable[[bytes], bytes]:
    """``feed(chunk)``: the chunk to each reader in turn (a reader may hand on
    less of it), what is left after the last returned. A reader that raises is
    switched off and its error reported."""

    def feed(chunk: bytes) -> bytes:
        for name, reader in list(readers.items()):
            try:
                rest = reader.feed(chunk)
            except Exception as exc:  # noqa: BLE001
                report.errors[name] = f"{type(exc).__name__}: {exc}"
                del readers[name]
                continue
            if rest is not None:
                chunk = as_chunk(rest)
        return chunk

    return feed


def _finish(readers: dict[str, LogReader], report: ScanReport) -> ScanReport:
    for name, reader in readers.items():
        try:
            report.findings[name] = reader.finish()
        except Exception as exc:  # noqa: BLE001
            report.errors[name] = f"{type(exc).__name__}: {exc}"
    return report


def _scan_whole(
    handle, size: int, path: str, parsers: list[LogParser], chunk_size: int, max_line: int
) -> ScanReport:
    report = ScanReport(path=path)
    readers = _start(parsers, report)
    feed = _feeder(readers, report)
    for chunk in _chunks(handle.read, size, chunk_size, max_line, report, first=True, last=True):
        feed(chunk)
    return _finish(readers, report)


def _chunks(
    read: Callable[[int], bytes],
    remaining: int,
    chunk_size: int,
    max_line: int,
    report: ScanReport,
    first: bool,
    last: bool,
    wrap: Callable[[bytes], bytes] = as_chunk,
) -> Iterator[bytes]:
    """The text ``read`` gives, up to ``remaining`` bytes, as chunks of whole
    lines (``wrap``, ``as_chunk`` by default): a line longer than
    ``max_line`` (its line end not counted) is skipped and counted in ``report.long_lines``, never buffered,
    wherever the blocks read happen to cut it (so a log read in segments skips
    the same lines: see ``_scan_in_segments``; with ``chunk_size`` at most
    ``max_line + 1``, as by default, a line no block ends in is no longer
    than a block). ``first``: the text starts the file (``report.binary`` is
    set from it); ``last``: it ends the file (a last line without its line
    end is read as one). A segment's worker passes ``bytes`` as ``wrap``: its
    leading parsers test a literal or two per chunk, which a trace's chunk
    holds near its start, so the copies into a ``Chunk`` (about 0.2 ms per
    MB, a twentieth of a worker's time) would not pay."""
    carry = b""
    skipping = False  # inside an over-long line: drop bytes up to its end
    while remaining > 0:
        block = read(min(chunk_size, remaining))
        if not block:
            break
        report.bytes_read += len(block)
        remaining -= len(block)
        if first:
            report.binary = b"\x00" in block[:65536]
            first = False
        if skipping:
            end = block.find(b"\n")
            if end < 0:
                continue
            block, skipping = block[end + 1 :], False
        cut = block.rfind(b"\n") + 1
        if cut == 0:  # no line ends in this block
            carry += block
            if len(carry) > max_line:
                report.long_lines += 1
                carry, skipping = b"", True
            continue
        if carry and len(carry) + block.find(b"\n") > max_line:  # the line it ends is over-long
            report.long_lines += 1
            end = block.find(b"\n") + 1
            block, cut, carry = block[end:], cut - end, b""
        carry_before = carry
        carry = block[cut:]
        if cut:
            # The partial line before, and the block up to its last line end (then a copy into a Chunk).
            yield wrap(
                b"".join((carry_before, memoryview(block)[:cut]))
                if carry_before or cut < len(block)
                else block
            )
        if len(carry) > max_line:  # the block ends inside an over-long line
            report.long_lines += 1
            carry, skipping = b"", True
    if last and carry and not skipping:
        yield wrap(carry + b"\n")  # a last line without its line end (a truncated log)


# ------------------------------------------------------------------ one large log, read in segments

SEGMENTED_MIN = 64 << 20  # a log this large may be read in segments by worker processes
SEGMENT = 8 << 20  # bytes of the log per segment (at line starts): a worker's unit of work
AHEAD = 2  # segments given to each worker at a time: one read while the other is handed over
PROBES, PROBE = 4, 1 << 20  # samples of the log (and their bytes) that decide whether segments pay


def _may_fork() -> bool:
    """Worker processes are forked on Linux only, and not from a process that
    runs threads (a forked copy of a lock another thread held never opens)."""
    import threading

    return sys.platform.startswith("linux") and threading.active_count() == 1


def _segments(fd: int, size: int, segment: int) -> list[tuple[int, int]]:
    """``(start, end)`` of consecutive segments of the file, each of about
    ``segment`` bytes and starting at a line start (the byte after a line end
    at or after its nominal start); the last ends at ``size``."""
    starts = [0]
    nominal = segment
    while nominal < size:
        position, found = nominal - 1, -1
        while position < size and found < 0:  # the next line end (a line may be long)
            block = os.pread(fd, min(1 << 16, size - position), position)
            if not block:
                break
            found = block.find(b"\n")
            position += len(block) if found < 0 else found
        if found < 0 or position + 1 >= size:
            break
        starts.append(position + 1)
        nominal = max(position + 1, nominal) + segment
    return list(zip(starts, [*starts[1:], size], strict=True))


def _lead(parsers: list[LogParser], readers: dict[str, LogReader]) -> list[LogParser]:
    """The parsers, from the first on, whose readers can be merged: ``merge(other)``
    takes in what ``other`` read from the text that follows. They read the
    segments in the workers; the rest read, in this process and in order, what
    they hand on."""
    lead = []
    for parser in parsers:
        if not callable(getattr(readers.get(parser.name), "merge", None)):
            break
        lead.append(parser)
    return lead


def _leaders_take_most(
    fd: int, segments: list[tuple[int, int]], lead: list[LogParser], chunk_size: int, max_line: int
) -> bool:
    """Whether the leading parsers account for most of the log (an NCCL trace:
    three quarters), judged by ``PROBES`` samples of ``PROBE`` bytes spread over
    it. Where they do not, the other parsers' reading, which stays in this
    process, is most of the work, and segments would only add to it."""
    picks = sorted({segments[len(segments) * i // PROBES] for i in range(PROBES)})
    read = handed_on = 0
    for start, end in picks:
        stats = ScanReport(path="")
        readers = [parser.start() for parser in lead]
        try:
            for chunk in _chunks(
                _Pread(fd, start),
                min(PROBE, end - start),
                chunk_size,
                max_line,
                stats,
                False,
                False,
            ):
                read += len(chunk)
                for reader in readers:
                    rest = reader.feed(chunk)
                    if rest is not None:
                        chunk = rest
                handed_on += len(chunk)
        except Exception:  # noqa: BLE001 - the log is read whole, which reports it
            return False
    return read > 0 and handed_on <= read / 2


class _Pread:
    """``read(n)``: the file's bytes from ``start`` on, ``n`` at a time."""

    def __init__(self, fd: int, start: int):
        self.fd, self.position = fd, start

    def __call__(self, n: int) -> bytes:
        block = os.pread(self.fd, n, self.position)
        self.position += len(block)
        return block


def _segment_worker(conn, fd, size, lead, chunk_size, max_line, hand_on) -> None:
    """In a forked worker: read each segment ``(index, start, end)`` received
    with fresh readers of ``lead``, send what they hand on (``hand_on``: there
    are parsers after them) in one piece (a message per chunk would wake the
    receiver eight times as often), then ``b""`` and ``("read", readers,
    stats)`` (``("error", text)`` if one raised), until None."""
    try:
        while (task := conn.recv()) is not None:
            index, start, end = task
            stats = ScanReport(path="")
            try:
                readers = [parser.start() for parser in lead]
                read = _Pread(fd, start)
                handed_on = []
                for chunk in _chunks(
                    read, end - start, chunk_size, max_line, stats, index == 0, end == size, bytes
                ):
                    for reader in readers:
                        rest = reader.feed(chunk)
                        if rest is not None:
                            chunk = rest
                    if hand_on and chunk:
                        handed_on.append(chunk)
                if handed_on:
                    conn.send_bytes(b"".join(handed_on))
                outcome = ("read", readers, stats)
            except (EOFError, OSError):
                raise
            except Exception as exc:  # noqa: BLE001 - the log is read again in one process, which reports it
                outcome = ("error", f"{type(exc).__name__}: {exc}")
            conn.send_bytes(b"")
            conn.send(outcome)
    except (EOFError, OSError):  # this process gave up on the workers
        pass


def _scan_in_segments(
    fd: int,
    size: int,
    path: str,
    parsers: list[LogParser],
    chunk_size: int,
    max_line: int,
    jobs: int,
) -> ScanReport | None:
    """The report ``_scan_whole`` would give, from ``jobs`` worker processes
    that read the log in segments, or None (the caller then reads it whole):
    when no parser leads that can be merged, when the log has fewer than two
    segments, or when a worker fails (it died, a reader raised).

    The parsers that lead and can be merged (the NCCL parsers: most of a
    trace's work) read each segment in a worker with fresh readers; this
    process merges their readers in the segments' order, so that all comes
    out as from one reading, and the other parsers read, here and in the log's
    order, what the leading ones handed on (a trace's remaining quarter): the
    failures' offsets, the first cause, iterations and their pending Step
    Time lines are found exactly as in one reading. Segments start at line
    starts and lines over ``max_line`` are skipped wherever blocks cut them,
    so no line is read differently. Workers are handed ``AHEAD`` segments at a
    time and this process takes in whatever each sends as it comes (holding
    what is ahead of the segment being read: a few segments at most), so no
    worker waits for another."""
    import multiprocessing
    from multiprocessing.connection import wait

    report = ScanReport(path=path)
    readers = _start(parsers, report)
    lead = _lead(parsers, readers)
    if not lead:
        return None
    segments = _segments(fd, size, SEGMENT)
    if len(segments) < 2 or not _leaders_take_most(fd, segments, lead, chunk_size, max_line):
        return None
    merged = [readers[parser.name] for parser in lead]
    rest = {name: reader for name, reader in readers.items() if name not in {p.name for p in lead}}
    order = list(readers)
    feed = _feeder(rest, report)
    hand_on = bool(rest)
    jobs = min(jobs, len(segments))

    context = multiprocessing.get_context("fork")
    workers, conns = [], []
    finished = False
    try:
        for _ in range(jobs):
            conn, child = context.Pipe()
            conns.append(conn)
            worker = context.Process(
                target=_segment_worker,
                args=(child, fd, size, lead, chunk_size, max_line, hand_on),
                daemon=True,
            )
            try:
                worker.start()
            except (AssertionError, OSError):  # a daemonic process may have none; no process left
                return None
            finally:
                child.close()
            workers.append(worker)
        # each worker's segments, in order; what was received of segments ahead of the one read
        # here, and their outcomes
        queues: list[list[int]] = [[] for _ in range(jobs)]
        held: dict[int, list[bytes]] = {}
        done: dict[int, tuple] = {}
        given = 0

        def give(worker: int) -> None:
            nonlocal given
            if given < len(segments):
                conns[worker].send((given, *segments[given]))
                queues[worker].append(given)
                given += 1

        for _ in range(AHEAD):
            for worker in range(jobs):
                give(worker)
        current = 0  # the segment whose text this process reads now
        while current < len(segments):
            for conn in wait(conns):
                worker = conns.index(conn)
                index = queues[worker][0]
                data = conn.recv_bytes()
                if data:
                    if index == current:
                        feed(as_chunk(data))
                    else:
                        held.setdefault(index, []).append(data)
                    continue
                done[index] = conn.recv()
                queues[worker].pop(0)
                give(worker)
            while current in done:
                outcome = done.pop(current)
                if outcome[0] != "read":
                    return None
                _, segment_readers, stats = outcome
                for reader, part in zip(merged, segment_readers, strict=True):
                    reader.merge(part)
                report.bytes_read += stats.bytes_read
                report.long_lines += stats.long_lines
                report.binary = report.binary or (current == 0 and stats.binary)
                current += 1
                for data in held.pop(current, ()):
                    feed(as_chunk(data))
        finished = True
    except (EOFError, OSError):  # a worker died
        return None
    finally:
        for conn in conns:
            if finished:  # each waits for its next segment: None ends it
                try:
                    conn.send(None)
                except OSError:
                    pass
            conn.close()
        for worker in workers:
            if not finished:  # it may be sending what no one reads now
                worker.kill()
            worker.join()
    # the merged leading readers, and those of the others that raised no error, in the parsers' order
    kept = {**dict(zip((p.name for p in lead), merged, strict=True)), **rest}
    return _finish({name: kept[name] for name in order if name in kept}, report)
