"""Text as a terminal shows it: control sequences made inert, the width output should fit, long
lines cut or wrapped. No dependency, fast to import: logging (``llmb.log``) uses it for the warnings
every stage prints, and the CLI's tables (``llmb.cli.output``) build on it.

Text that llmb did not write itself - log lines, failure messages, file and directory names, a
plugin's data (its document titles, descriptions, errata) - goes through ``terminal_safe`` before it
reaches a terminal in human output: ``fit_text``, which every block of human text goes through, and a
table's cells (``llmb.cli.output.render_table``) apply it.
"""

from __future__ import annotations

import os
import re
import sys

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
    # not a real file (a test's capture), or no size known
    except (AttributeError, OSError, ValueError):
        return None
    return max(width, MIN_WIDTH) if width > 0 else None


ELLIPSIS = "\u2026"


def shorten(text: str, width: int, cut: str = "end") -> str:
    """``text`` in at most ``width`` characters: cut at the end, or in the middle, with an ellipsis."""
    if len(text) <= width:
        return text
    if width <= 1:
        return text[:width]
    if cut == "middle":  # a little more of the head: a name's first parts say the most
        head = (width * 3) // 5
        return text[:head] + ELLIPSIS + text[len(text) - (width - 1 - head) :]
    return text[: width - 1] + ELLIPSIS


_AUTO = object()

# Where a word too long for a line (a path, a long name) is broken: after a ``/`` that leaves the line
# at least half full, else after the last of these that leaves it a third full, else at the width.
_BREAK_AFTER = "/_-,.:"


def _break_at(word: str, room: int) -> int:
    """How many of ``word``'s characters go on a line with ``room`` columns left: up to a separator
    there (a path's ``/`` first); the pieces joined again are the word."""
    room = max(room, 1)
    if len(word) <= room:
        return len(word)
    slash = word.rfind("/", 0, room) + 1
    if slash > room // 2:
        return slash
    cut = max(word.rfind(c, 0, room) for c in _BREAK_AFTER) + 1
    return cut if cut > room // 3 else room


def wrap_cell(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters, none of it left out: broken at a space (which
    the break takes), else after a path's ``/`` (or ``_ - , . :``), else at the width. A path's lines
    joined again are the path."""
    width = max(width, 1)
    lines = []
    while len(text) > width:
        space = text.rfind(" ", 0, width + 1)
        if space > width // 3:
            lines.append(text[:space].rstrip(" "))
            text = text[space + 1 :].lstrip(" ")
            continue
        end = _break_at(text, width)
        lines.append(text[:end])
        text = text[end:]
    return [*lines, text] if text or not lines else lines


_LABELLED = re.compile(r"^( *(?:- |\S+(?: \S+)?  +)?)")


def is_path(word: str) -> bool:
    """Whether a word of text is a path (or a URL): one a user copies whole, so never broken."""
    return "/" in word


# A continuation line's words this short (``->``, ``in``) stay with the path that follows them.
_CONNECTOR = 3


def _wrapped(line: str, limit: int) -> list[str]:
    """One line too long for ``limit``, as lines that fit: broken at spaces, the continuation lines
    indented under the line's text (after its label, its bullet or its own indentation). A path that does
    not fit where it stands starts a line of its own, whole (after a connector such as ``->`` that
    began the line), and a path longer than that line ends it: the terminal wraps it and a
    triple-click copies it whole. Another word longer than a line is broken
    after a separator (``_BREAK_AFTER``)."""
    leading = len(line) - len(line.lstrip(" "))
    head = _LABELLED.match(line).group(1)  # the line's indentation, and its label or bullet
    indent = len(head)
    if indent == leading or indent > limit // 2:
        indent = leading + 2
    pad = " " * indent
    out: list[str] = []
    current = head
    fresh = True  # nothing after the label or indentation yet

    def flush() -> None:
        nonlocal current, fresh
        out.append(current.rstrip(" "))
        current, fresh = pad, True

    for spaces, word in re.findall(r"( *)(\S+)", line[len(head) :]):
        space = spaces or " "  # the line's own spacing between words on one line (aligned columns)
        room = limit - len(current) - (0 if fresh else len(space))
        if len(word) <= room:
            current += word if fresh else space + word
            fresh = False
            continue
        if is_path(word):
            glued = out and not fresh and len(current) - indent <= _CONNECTOR
            if not glued and (not fresh or current.strip()):
                flush()  # what stands before it (a label too) keeps its own line
            current += word if fresh else space + word
            fresh = False
            if len(current) > limit:
                flush()  # over-long on its own line: nothing follows it there
            continue
        if not fresh and len(word) <= limit - indent:
            flush()
            current += word
            fresh = False
            continue
        # a word longer than a whole line: broken after a separator, never cut
        while word:
            room = limit - len(current) - (0 if fresh else 1)
            if not fresh and room < (limit - indent) // 3:
                flush()
                continue
            end = _break_at(word, room)
            current += word[:end] if fresh else " " + word[:end]
            fresh = False
            word = word[end:]
            if word:
                flush()
    if not fresh or not out:
        out.append(current.rstrip(" "))
    return out


def fit_text(text: str, width: int | None | object = _AUTO) -> str:
    """``text`` as a terminal may show it: made inert (``terminal_safe``: it may quote a plugin's data,
    a document title, a log line, a file name), and each line longer than ``width`` (default
    ``output_width()``) wrapped at spaces; the continuation lines are indented under the line's text:
    after its label (``  memory       ...``), its bullet (``  - ...``) or its own indentation. A path is
    never broken: one that does not fit starts a line of its own (``_wrapped``). Every block of human
    text a command prints (``llmb plan``'s, ``list``'s notes, ``plugins``' errors, warnings and errors)
    goes through here or through a table's cells (``render_table``), which are made inert too; so is a
    pipe's or a file's, which are not wrapped."""
    text = terminal_safe(text)
    limit = output_width() if width is _AUTO else width
    if not limit or all(len(line) <= limit for line in text.split("\n")):
        return text
    out = []
    for line in text.split("\n"):
        out += [line] if len(line) <= limit else _wrapped(line, limit)
    return "\n".join(out)
