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

Only regular files are read (``llmb.files.open_regular``): a FIFO, a device
or a directory is refused before it is opened, so nothing can block the scan
or feed it without end, and no more than the file's size at opening is read.
(``open_regular``, ``read_regular``, ``read_tail``, ``why_unreadable`` and
``NotRegularFile`` live in ``llmb.files``, shared with every other reader of
files llmb does not control; they are still importable from here.)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
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


_MEMMEM: Any = False  # the C library's memmem once looked up (None: none to use)


def _c_memmem():
    """The C library's ``memmem`` on Linux (glibc's or musl's), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        function = ctypes.CDLL(None).memmem
    except Exception:  # noqa: BLE001 - no ctypes, no C library, no memmem: CPython's search it is
        return None
    function.restype = ctypes.c_void_p
    function.argtypes = (ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t)
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
        """What this parser found, once the log has been read."""


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
    path: str, parsers: list[LogParser], chunk_size: int = CHUNK, max_line: int = MAX_LINE
) -> ScanReport:
    report = ScanReport(path=str(path))
    readers: dict[str, LogReader] = {}
    for parser in parsers:
        try:
            readers[parser.name] = parser.start()
        except Exception as exc:  # noqa: BLE001 - a broken parser must not stop the scan
            report.errors[parser.name] = f"{type(exc).__name__}: {exc}"

    def feed(chunk: bytes) -> None:
        for name, reader in list(readers.items()):
            try:
                rest = reader.feed(chunk)
            except Exception as exc:  # noqa: BLE001
                report.errors[name] = f"{type(exc).__name__}: {exc}"
                del readers[name]
                continue
            if rest is not None:
                chunk = as_chunk(rest)

    carry = b""
    skipping = False  # inside an over-long line: drop bytes up to its end
    first = True
    handle, remaining = open_regular(path)
    with handle:
        while remaining > 0:
            block = handle.read(min(chunk_size, remaining))
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
            # The partial line before, and the block up to its last line end (then a copy into a Chunk).
            chunk = as_chunk(
                b"".join((carry, memoryview(block)[:cut])) if carry or cut < len(block) else block
            )
            carry = block[cut:]
            if len(carry) > max_line:  # the block ends inside an over-long line
                report.long_lines += 1
                carry, skipping = b"", True
            feed(chunk)
    if carry and not skipping:
        feed(carry + b"\n")  # a last line without its newline (a truncated log)
    for name, reader in readers.items():
        try:
            report.findings[name] = reader.finish()
        except Exception as exc:  # noqa: BLE001
            report.errors[name] = f"{type(exc).__name__}: {exc}"
    return report
