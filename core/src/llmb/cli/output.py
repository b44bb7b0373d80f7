"""Plain-text tables and JSON on stdout: no dependency, fast to import.

Human output fits the width ``output_width`` gives: ``COLUMNS`` where set,
else the terminal's; output to a pipe or a file has no width and is never
cut or wrapped. Tables fit it by cutting their long cells (``Column.squeeze``)
and then leaving out their least needed columns (``Column.drop``), said in a
line under the table; text fits it by ``fit_text``, wrapped under its labels.
``output_width``, ``fit_text``, ``shorten`` and ``terminal_safe`` live in
``llmb.terminal`` (logging needs them too) and are importable from here.

Text that llmb did not write itself - log lines, failure messages, file
and directory names - goes through ``terminal_safe`` before it reaches a
terminal in human output; JSON needs nothing, ``json`` escapes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click

from llmb.terminal import (  # noqa: F401 - the text primitives, kept importable from here
    _AUTO,
    ELLIPSIS,
    MIN_WIDTH,
    fit_text,
    output_width,
    shorten,
    terminal_safe,
)


def _one_line(cell: str) -> str:
    return cell if cell.isprintable() else terminal_safe(cell).replace("\n", " ").replace("\t", " ")


def emit_json(data: Any) -> None:
    import json  # only when asked for: keeps table output's start-up lean

    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


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


def render_table(
    headers: Sequence[str | Column],
    rows: Sequence[Sequence[Any]],
    gap: str = "  ",
    width: int | None | object = _AUTO,
) -> str:
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
        empty = [
            i for i, c in enumerate(columns) if c.drop and all(row[i] in ("-", "") for row in cells)
        ]
        # a column with no value goes before any cut
        for i in sorted(empty, key=lambda i: -columns[i].drop):
            if total() <= limit:
                break
            shown.remove(i)
            left_out.append(columns[i].title)
        for i in sorted((i for i in shown if columns[i].drop), key=lambda i: -columns[i].drop):
            if (
                total()
                - sum(
                    widths[j] - max(columns[j].squeeze, len(columns[j].title))
                    for j in shown
                    if columns[j].squeeze
                )
                <= limit
            ):
                break  # cutting the squeezable columns is enough now
            shown.remove(i)
            left_out.append(columns[i].title)
        for i in sorted((i for i in shown if columns[i].squeeze), key=lambda i: -natural[i]):
            least = max(columns[i].squeeze, len(columns[i].title))
            widths[i] -= max(0, min(total() - limit, widths[i] - least))
    lines = [
        gap.join(columns[i].title.ljust(widths[i]) for i in shown).rstrip(),
        gap.join("-" * widths[i] for i in shown),
    ]
    lines += [
        gap.join(
            shorten(row[i], widths[i], columns[i].cut).ljust(widths[i]) for i in shown
        ).rstrip()
        for row in cells
    ]
    if left_out:
        them = "them" if len(left_out) > 1 else "it"
        lines.append(
            fit_text(
                f"(left out at {limit} columns: {', '.join(left_out)}; a wider terminal, "
                f"COLUMNS=200 or --json shows {them})",
                limit,
            )
        )
    return "\n".join(lines)
