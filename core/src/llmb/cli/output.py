"""Plain-text tables and JSON on stdout: no dependency, fast to import.

Human output fits the width ``output_width`` gives: ``COLUMNS`` where set,
else the terminal's; output to a pipe or a file has no width and is never
cut or wrapped. Tables fit it by cutting their long cells (``Column.squeeze``)
and then leaving out their least needed columns (``Column.drop``), said in a
line under the table; text fits it by ``fit_text``, wrapped under its labels.

Text that llmb did not write itself - log lines, failure messages, file
and directory names - goes through ``terminal_safe`` before it reaches a
terminal in human output; JSON needs nothing, ``json`` escapes it.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click

# A whole escape sequence: CSI (ESC [ or C1 0x9b, parameters, a final byte);
# OSC, DCS, SOS, PM, APC (ESC ] P X ^ _ or their C1 forms) up to BEL, ST or
# the line's end; any other ESC sequence (intermediates, then a final byte).
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]"
)
# What is left of the C0 and C1 controls (tab and newline are text).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _visible(match: re.Match) -> str:
    char = match.group()
    return "\n" if char == "\r" else f"\\x{ord(char):02x}"


def terminal_safe(text: str) -> str:
    """``text`` as it may be printed on a terminal: escape sequences (which
    could set the window title, clear the screen, move the cursor or worse)
    are removed, a carriage return starts a new line instead of overwriting
    the last, and any other control character is shown as ``\\xNN``."""
    if text.isprintable():  # the common case: nothing to do
        return text
    return _CONTROL.sub(_visible, _SEQUENCE.sub("", text.replace("\r\n", "\n")))


def _one_line(cell: str) -> str:
    return cell if cell.isprintable() else terminal_safe(cell).replace("\n", " ").replace("\t", " ")


def emit_json(data: Any) -> None:
    import json  # only when asked for: keeps table output's start-up lean

    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


# The narrowest width fitting is attempted for: below it, output is left as it is.
MIN_WIDTH = 40


def output_width(stream=None) -> int | None:
    """The columns human output should fit: ``COLUMNS`` where it is set to a number (whatever the output
    is, as ``ls`` and ``git`` do), else the width of the terminal ``stream`` (stdout) is; None when it is a
    pipe or a file, where nothing is cut or wrapped."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return max(int(columns), MIN_WIDTH)
    stream = sys.stdout if stream is None else stream
    try:
        if not stream.isatty():
            return None
        width = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture), or no size known
        return None
    return max(width, MIN_WIDTH) if width > 0 else None


@dataclass(frozen=True)
class Column:
    """A table column. ``squeeze``: the width its cells may be cut to (with an ellipsis, ``cut`` at the
    "end" or in the "middle", which keeps both ends of a name) when the table is wider than the output;
    0: never cut. ``drop``: 0, always shown; otherwise left out when cutting is not enough, the highest
    first, and named under the table."""

    title: str
    squeeze: int = 0
    drop: int = 0
    cut: str = "end"


ELLIPSIS = "\u2026"


def shorten(text: str, width: int, cut: str = "end") -> str:
    """``text`` in at most ``width`` characters: cut at the end, or in the middle, with an ellipsis."""
    if len(text) <= width:
        return text
    if width <= 1:
        return text[:width]
    if cut == "middle":  # a little more of the head: a name's first parts say the most
        head = (width * 3) // 5
        return text[:head] + ELLIPSIS + text[len(text) - (width - 1 - head):]
    return text[: width - 1] + ELLIPSIS


_AUTO = object()


def render_table(headers: Sequence[str | Column], rows: Sequence[Sequence[Any]], gap: str = "  ",
                 width: int | None | object = _AUTO) -> str:
    """Left-aligned columns sized to their widest cell; None shows as '-'.
    Cells are made ``terminal_safe`` and kept on one line. Wider than ``width``
    (default ``output_width()``), droppable columns with no value in any row
    are left out, then the others, highest ``drop`` first, until cutting
    the squeezable columns (to no less than their ``squeeze`` widths) makes
    the table fit; a line under the table names the columns left out."""
    columns = [h if isinstance(h, Column) else Column(h) for h in headers]
    cells = [["-" if c is None else _one_line(str(c)) for c in row] for row in rows]
    widths = [len(c.title) for c in columns]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    limit = output_width() if width is _AUTO else width
    shown = list(range(len(columns)))
    left_out: list[str] = []

    def total() -> int:
        return sum(widths[i] for i in shown) + len(gap) * (len(shown) - 1)

    if limit and total() > limit:
        natural = list(widths)
        empty = [i for i, c in enumerate(columns) if c.drop and all(row[i] in ("-", "") for row in cells)]
        for i in sorted(empty, key=lambda i: -columns[i].drop):  # a column with no value goes before any cut
            if total() <= limit:
                break
            shown.remove(i)
            left_out.append(columns[i].title)
        for i in sorted((i for i in shown if columns[i].drop), key=lambda i: -columns[i].drop):
            if total() - sum(widths[j] - max(columns[j].squeeze, len(columns[j].title))
                             for j in shown if columns[j].squeeze) <= limit:
                break  # cutting the squeezable columns is enough now
            shown.remove(i)
            left_out.append(columns[i].title)
        for i in sorted((i for i in shown if columns[i].squeeze), key=lambda i: -natural[i]):
            least = max(columns[i].squeeze, len(columns[i].title))
            widths[i] -= max(0, min(total() - limit, widths[i] - least))
    lines = [gap.join(columns[i].title.ljust(widths[i]) for i in shown).rstrip(),
             gap.join("-" * widths[i] for i in shown)]
    lines += [gap.join(shorten(row[i], widths[i], columns[i].cut).ljust(widths[i]) for i in shown).rstrip()
              for row in cells]
    if left_out:
        them = "them" if len(left_out) > 1 else "it"
        lines.append(fit_text(f"(left out at {limit} columns: {', '.join(left_out)}; a wider terminal, "
                              f"COLUMNS=200 or --json shows {them})", limit))
    return "\n".join(lines)


_LABELLED = re.compile(r"^( *(?:- |\S+(?: \S+)?  +)?)")


def fit_text(text: str, width: int | None | object = _AUTO) -> str:
    """``text`` with each line longer than ``width`` (default ``output_width()``) wrapped at spaces; the
    continuation lines are indented under the line's text: after its label (``  memory       ...``), its
    bullet (``  - ...``) or its own indentation."""
    limit = output_width() if width is _AUTO else width
    if not limit or all(len(line) <= limit for line in text.split("\n")):
        return text
    import textwrap

    out = []
    for line in text.split("\n"):
        if len(line) <= limit:
            out.append(line)
            continue
        leading = len(line) - len(line.lstrip(" "))
        indent = len(_LABELLED.match(line).group(1))
        if indent == leading or indent > limit // 2:
            indent = leading + 2
        out += textwrap.wrap(line, limit, subsequent_indent=" " * indent, break_long_words=False,
                             break_on_hyphens=False, drop_whitespace=True) or [line]
    return "\n".join(out)
