"""What a terminal of a given width shows of an llmb command, and the checks issue 43 asks of it.

``under_pty`` runs llmb under a real pseudo-terminal (util-linux ``script``) with ``COLUMNS`` set, as a
user's terminal would; ``too_wide`` and ``path_problems`` say what breaks the promise: no line of
llmb's own wider than the terminal except a path, and every path printed whole on a line of its own
(a triple-click copies it; the terminal wraps it).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess

from conftest import _SEED_VARS

ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
# A continuation line's connector before a path (``-> /path``): fit_text keeps them together.
CONNECTOR = 3
# Where a path starts: absolute, under the install, or under home.
_PATH_START = ("/", "$LLMB_INSTALL/", "~/")


def environment(install: str) -> dict[str, str]:
    """This process's environment without what would change the output: a width, a log format, or a
    variable that picks a recipe; the install given."""
    drop = {"COLUMNS", "LINES", "LLMB_LOG_FORMAT", *_SEED_VARS}
    return {
        **{k: v for k, v in os.environ.items() if k not in drop},
        "LLMB_INSTALL": install,
        "TERM": "dumb",
    }


def screen_lines(text: str) -> list[str]:
    """The lines a terminal shows of ``text``: escapes gone, what a carriage return leaves."""
    text = ESCAPES.sub("", text)
    return [raw.rsplit("\r", 1)[-1] for raw in text.replace("\r\n", "\n").split("\n")]


def under_pty(
    llmb: str,
    args: list[str],
    install: str,
    columns: int | None = 80,
    stty: int | None = None,
    timeout: float = 300,
    env: dict[str, str] | None = None,
) -> list[str]:
    """The lines a terminal shows for ``llmb ARGS`` run under a pseudo-terminal (stdout and stderr both)."""
    command = shlex.join([llmb, *args])
    if stty:
        command = f"stty cols {stty} rows 50; {command}"
    full = {**environment(install), **(env or {})}
    if columns:
        full["COLUMNS"] = str(columns)
    proc = subprocess.run(
        ["script", "-qefc", command, "/dev/null"],
        capture_output=True,
        text=True,
        env=full,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in proc.stdout, proc.stdout
    return screen_lines(proc.stdout)


def _a_path(word: str) -> bool:
    return word.strip("('\",;:.").startswith(_PATH_START)


def _path_alone(line: str) -> bool:
    """A line that is one path (after a short connector such as ``->``, or a bullet)."""
    words = line.split()
    if len(words) == 2 and len(words[0]) <= CONNECTOR and "/" not in words[0]:
        words = words[1:]
    return len(words) == 1 and "/" in words[0]


def too_wide(lines: list[str], width: int = 80) -> list[str]:
    """Lines wider than ``width`` that are not a path alone."""
    return [f"{len(line)}: {line}" for line in lines if len(line) > width and not _path_alone(line)]


def path_problems(lines: list[str], install: str, width: int = 80) -> list[str]:
    """Paths that are not whole: each path printed (absolute, ``$LLMB_INSTALL/...``, ``~/...``) must
    name what is there - a path broken across lines names nothing - and one longer than its line must
    stand alone on it."""
    problems = []
    for line in lines:
        for word in line.split():
            if not _a_path(word):
                continue
            path = word.strip("('\",;:.)").replace("$LLMB_INSTALL", install)
            if not os.path.lexists(os.path.expanduser(path)):
                problems.append(f"{path!r} (on {line!r}) does not exist: a path broken or cut?")
        if len(line) > width and not _path_alone(line):
            problems.append(f"{len(line)} columns, not a path alone: {line!r}")
    return problems
