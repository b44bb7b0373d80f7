"""The one stage every log reader takes its lines from: a line less what launchers put before it.

Between a training tool and its log, launchers and loggers put text before each
line: srun -l's task label (``3: ``, right-aligned), torchrun's ``[rank3]:`` and
``[default3]:``, NeMo-Run's task prefix (``pretrain_llama3_8b/0 ``; Slurm's
``job/3``), AMD Primus's header (``[20260515 17:09:52][rank-0/8][INFO] [patch_runner.py:126] : ``),
ezpz's (``[2025-09-11 14:09:46,954794][I][components/metrics:437:log] ``), a
loguru header (``2025-08-01 12:00:00.123 | INFO | module:function:12 - ``),
kubectl's ``--timestamps`` (``2025-08-01T12:00:00.123456789Z ``), and colour
codes anywhere. ``split`` takes them off, in any order and number (at most
``MAX_PREFIXES`` of them, within the line's first ``PREFIX_SPAN`` bytes: its
work is bounded whatever the line holds), and says which writer the line is
from (``Line.key``: its rank prefixes, so that one rank's lines are paired with
each other and not with another's) and the time a header stamped on it
(``Line.stamp``, seconds, where one did). A tool's own stamp (Megatron's
``[2025-12-22 15:18:33] iteration``, torchtitan's ``[titan] 2025-...``, NeMo's
``[NeMo I ...]``) is the tool's text and stays.

Readers find the few lines they want with ``find_lines`` (a literal search in
C, so megabytes of other output cost little) and read only ``Line.body``.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import NamedTuple

MAX_SAMPLES = 100_000  # distinct iterations kept; a real run logs tens
MAX_MESSAGE = 400
MAX_PREFIXES = 8  # prefixes taken off one line at most (a launcher under a launcher under ...)
PREFIX_SPAN = 1024  # bytes at a line's start prefixes are looked for in

# A terminal's colour and style codes (a log written through a pseudo-terminal, or coloured on purpose).
_ANSI = re.compile(rb"\x1b\[[0-9;]{0,32}[A-Za-z]")

# One launcher prefix at the line's start. Each alternative starts with a fixed kind of token, and every
# repeat is bounded: linear in the line's length.
_PREFIX = re.compile(
    rb"(?:"
    # srun -l: "3: ", right-aligned with blanks for ten tasks or more (" 3: "); the line's own text follows
    rb" {0,6}(?P<label>\d{1,7}): "
    # torchrun's redirects: "[rank3]: ", "[default3]:" (one space after the colon, or none)
    rb"|(?P<torchrun>\[(?:rank|default)\d{1,7}\]): ?"
    # AMD Primus's logger: "[20260515 17:09:52][rank-0/8][INFO]     [----patch_runner.py:126] : " (its
    # colour codes are gone by now; the source tag and its " : " may be left out)
    rb"|(?:\[(?P<primus_time>\d{8} \d\d:\d\d:\d\d(?:[.,]\d{1,9})?)\])?\[(?P<primus_rank>rank-\d{1,7}/\d{1,7})\]"
    rb"\[[A-Za-z]{1,16}\] {0,16}(?:\[[^\]\n]{1,256}\] : )?"
    # ezpz's logger (torchtitan on Aurora): "[2025-09-11 14:09:46,954794][I][components/metrics:437:log] "
    rb"|\[(?P<ezpz_time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,9})?)\]\[[A-Z]\]\[[^\]\n]{1,256}\] ?"
    # loguru's default: "2025-08-01 12:00:00.123 | INFO     | module:function:12 - "
    rb"|(?P<loguru_time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,9})?) {1,8}\| {0,8}[A-Za-z]{1,16} {0,8}\|"
    rb" {0,8}[^\s|]{1,256} {1,8}- "
    # kubectl logs --timestamps: RFC 3339 in UTC, then a space
    rb"|(?P<k8s_time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z) "
    # NeMo-Run's task prefix "name/0 ", Slurm's "job/3 " (a word, a slash, a number, one space)
    rb"|(?P<task>[\w.-]{1,128}/\d{1,7}) "
    rb")"
)
_TIME_FORMATS = {
    "primus_time": "%Y%m%d %H:%M:%S",
    "ezpz_time": "%Y-%m-%d %H:%M:%S",
    "loguru_time": "%Y-%m-%d %H:%M:%S",
    "k8s_time": "%Y-%m-%dT%H:%M:%S",
}
_EPOCH = datetime(1970, 1, 1)
_KEY_GROUPS = ("label", "torchrun", "primus_rank", "task")


class Line(NamedTuple):
    """A line as readers see it: where it starts in the chunk, who wrote it, when a header says, and
    its text without launchers' prefixes and colour codes. (A named tuple: a log's every line of
    interest is made one, and a frozen dataclass takes four times as long to make.)"""

    start: int  # offset of the line's first byte in the chunk it was found in
    key: bytes  # its rank prefixes (b"" where it has none): lines of one writer share it
    stamp: float | None  # seconds (naive local time: differences only) a prefix's header gave
    body: bytes


def plain(line: bytes) -> bytes:
    """``line`` without colour codes."""
    return _ANSI.sub(b"", line) if b"\x1b" in line else line


def split(line: bytes, start: int = 0) -> Line:
    """``line`` (one line, no line end) less every launcher prefix at its start, and colour codes."""
    text = plain(line)
    m = _PREFIX.match(text, 0, PREFIX_SPAN)  # an end past the text is the text's end
    if m is None or not m.end():
        return Line(start, b"", None, text)  # most lines: no launcher's prefix
    keys: list[bytes] = []
    stamp = None
    position = 0
    for _ in range(MAX_PREFIXES):
        if m is None or m.end() == position:
            break
        keys.extend(m.group(g) for g in _KEY_GROUPS if m.group(g) is not None)
        for group, fmt in _TIME_FORMATS.items():
            if m.group(group) is not None:
                stamp = _seconds(m.group(group), fmt)
        position = m.end()
        m = _PREFIX.match(text, position, position + PREFIX_SPAN)
    return Line(start, b"|".join(keys), stamp, text[position:] if position else text)


def _seconds(text: bytes, fmt: str) -> float | None:
    whole, _, fraction = text.replace(b",", b".").rstrip(b"Z").partition(b".")
    try:
        when = datetime.strptime(whole.decode("ascii"), fmt)
    except ValueError:
        return None
    return (when - _EPOCH).total_seconds() + (float(b"0." + fraction) if fraction else 0.0)


def find_lines(chunk: bytes, *needles: bytes) -> list[Line]:
    """Every line of ``chunk`` that holds one of the literal ``needles`` (in its text or its prefixes),
    in order, each once, through ``split``. ``bytes.find`` does the searching in C, so a few
    interesting lines in megabytes of noise cost next to nothing; a reader then runs its regular
    expressions on ``Line.body``."""
    return [split(line, start) for start, line in raw_lines_containing(chunk, *needles)]


def raw_lines_containing(chunk: bytes, *needles: bytes) -> list[tuple[int, bytes]]:
    """(start, line) of every line of ``chunk`` that holds one of ``needles``, in order, each once, as
    written (``find_lines`` takes the prefixes off: readers use that)."""
    found: dict[int, bytes] = {}
    size = len(chunk)
    for needle in needles:
        # the lines found for the needles before, in order: a match inside one of them skips to its end
        # (most lines that hold one of a reader's needles hold the others too)
        known = sorted(found) if found else ()
        ends = [start + len(found[start]) for start in known]
        k = 0
        position = chunk.find(needle)  # a Chunk's own find: linear on any text (llmb.results.scan)
        while position >= 0:
            while k < len(known) and ends[k] < position:
                k += 1
            if k < len(known) and known[k] <= position:
                position = chunk.find(needle, ends[k])
                continue
            # a line end is one byte, which CPython finds with memchr on any text
            start = bytes.rfind(chunk, b"\n", 0, position) + 1
            end = bytes.find(chunk, b"\n", position)
            end = size if end < 0 else end
            found[start] = chunk[start:end]
            position = chunk.find(needle, end)
    return sorted(found.items()) if len(needles) > 1 else list(found.items())


def line_at(chunk: bytes, position: int) -> tuple[int, bytes]:
    """(start, text as written) of the line of ``chunk`` that holds ``position``."""
    start = chunk.rfind(b"\n", 0, position) + 1
    end = chunk.find(b"\n", position)
    return start, chunk[start : end if end >= 0 else len(chunk)]


def lines_from(chunk: bytes, position: int, count: int) -> list[bytes]:
    """The (at most) ``count`` lines of ``chunk`` from ``position`` on, as written."""
    lines = []
    while len(lines) < count and position < len(chunk):
        end = chunk.find(b"\n", position)
        end = len(chunk) if end < 0 else end
        lines.append(chunk[position:end])
        position = end + 1
    return lines


def number(text: bytes) -> float | None:
    """A printed number; the first of a ``this/average`` pair or of ``this (avg average)`` (Megatron-LM
    under AMD's Primus prints ``434.5/515.4`` and ``400.0 (avg 280.0)``: the iteration's own, then the
    running average); None where it is none."""
    try:
        return float(text)  # the common case: what follows reads the same number from it
    except ValueError:
        pass
    head = text.split(None, 1)[0] if b" " in text.strip() else text
    head = head.split(b"/", 1)[0] if b"/" in head else head
    try:
        return float(head)
    except ValueError:
        return None


def whole(text: bytes) -> int | None:
    value = number(text)
    return int(value) if value is not None and math.isfinite(value) else None


def fields(text: bytes) -> dict[bytes, bytes]:
    """``| key: value | key: value |`` -> {key: value} (keys lower-cased)."""
    out = {}
    for part in text.split(b"|"):
        key, sep, value = part.partition(b":")
        if sep:
            out[key.strip().lower()] = value.strip()
    return out
