"""Plain-text tables and JSON on stdout: no dependency, fast to import.

Text that llmb did not write itself - log lines, failure messages, file
and directory names - goes through ``terminal_safe`` before it reaches a
terminal in human output; JSON needs nothing, ``json`` escapes it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
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


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], gap: str = "  ") -> str:
    """Left-aligned columns sized to their widest cell; None shows as '-'.
    Cells are made ``terminal_safe`` and kept on one line."""
    cells = [["-" if c is None else _one_line(str(c)) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = [gap.join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append(gap.join("-" * w for w in widths))
    lines += [gap.join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)
