"""Plain-text tables and JSON on stdout: no dependency, fast to import.

Human output fits the width ``output_width`` gives: ``COLUMNS`` where set,
else the terminal's; output to a pipe or a file has no width and is never
cut or wrapped. Each command gives its table's priorities: a table fits by
leaving out its least needed columns (``Column.drop``), said in a line under
the table, and by narrowing its long columns (``Column.squeeze``): a name is
cut at its end but keeps the parts that identify a row and those that tell
it from the others (``cut="name"``); a path or a sentence is wrapped onto
more lines, never cut (``cut="wrap"``). Text fits by ``fit_text``, wrapped
under its labels (a path broken after a ``/``); ``echo_err`` wraps what goes
to stderr. ``output_width``, ``fit_text``, ``shorten``, ``wrap_cell`` and
``terminal_safe`` live in ``llmb.terminal`` (logging needs them too) and are
importable from here.

Text that llmb did not write itself - log lines, failure messages, file
and directory names - goes through ``terminal_safe`` before it reaches a
terminal in human output; JSON needs nothing, ``json`` escapes it.
"""

from __future__ import annotations

import re
import sys
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
    wrap_cell,
)


def _one_line(cell: str) -> str:
    return cell if cell.isprintable() else terminal_safe(cell).replace("\n", " ").replace("\t", " ")


def say(text: str, err: bool = False) -> None:
    """A line (or lines) of human text on stdout, or stderr with ``err``, each wrapped to that stream's
    width, a path kept whole (``fit_text``): what every message of llmb's own that is not a table goes
    through."""
    click.echo(fit_text(text, output_width(sys.stderr if err else sys.stdout)), err=err)


def echo_err(text: str) -> None:
    """``text`` on stderr, each line wrapped to stderr's width (a closing line, a ``note:``)."""
    say(text, err=True)


def emit_json(data: Any) -> None:
    import json  # only when asked for: keeps table output's start-up lean

    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


# Columns of this ``drop`` or less are worth a narrower space between columns before they are left out.
KEPT_LONGEST = 2


@dataclass(frozen=True)
class Column:
    """A table column, with what the command says of it for a narrow output.

    ``drop``: 0, always shown; otherwise the column may be left out when the table does not fit, the
    highest first, and is named under the table; before a column of ``drop`` 1 or 2 (those a command
    keeps longest) is, the space between columns narrows to one. ``squeeze``: the narrowest its cells
    may be made, 0: never. ``cut`` says how a cell is made narrower:

    - "end" (an ellipsis at the end) or "middle" (in the middle, keeping both ends);
    - "name": a name of parts (``llama31_8b_bf16_gpus2_tp1_pp1_mbs1_gbs64``, ``8b h100 bf16 2 GPUs``) is
      cut at its end, at a part's edge, never where the rows' names differ: its first ``keep`` parts and
      any part in ``keep_parts`` (what identifies a run: workload, size, dtype, GPU count, ``tuned``)
      stay, and so does a part that tells it from another row's name that would read the same. The
      column stays as wide as that needs until nothing else is left to make the table fit;
    - "wrap": a sentence is continued on the next lines of its row, never cut;
    - "path": a path, whole in its cell where the table fits it; else the cell holds a mark (``[1]``) and
      the path follows the table, whole on a line of its own after its mark, for a triple-click to copy."""

    title: str
    squeeze: int = 0
    drop: int = 0
    cut: str = "end"
    keep: int = 0
    keep_parts: tuple[str, ...] = ()


def experiment_column(
    full_names: bool = False, title: str = "EXPERIMENT", paths: bool = True
) -> Column:
    """The column of a run's experiment name (``llama31_8b_bf16_gpus2_tp1_pp1_mbs1_gbs64_tuned``): its
    workload, size, dtype and GPU count, and ``tuned``, stay whatever else is cut; with --full-names, a
    path, whole (``cut="path"``), or where the column holds whole names (not ``paths``), each wrapped."""
    if full_names:
        return (
            Column(title, squeeze=6, cut="path") if paths else Column(title, squeeze=30, cut="wrap")
        )
    return Column(title, squeeze=16, cut="name", keep=4, keep_parts=("tuned",))


# A name's parts: what lies between underscores or spaces.
_PART = re.compile(r"[^_ ]+|[_ ]+")


def _parts(name: str) -> tuple[list[str], list[str]]:
    """``name``'s parts and the separator before each (``""`` before the first)."""
    pieces = _PART.findall(name)
    parts, seps, sep = [], [], ""
    for piece in pieces:
        if piece[0] in "_ ":
            sep += piece
        else:
            parts.append(piece)
            seps.append(sep)
            sep = ""
    return parts, seps


def _joined(parts: list[str], seps: list[str], kept: set[int]) -> str:
    """The ``kept`` parts, an ellipsis for each run of parts left out."""
    out, last = [], -1
    for i in sorted(kept):
        out.append((seps[i] if out else "") if i == last + 1 else ELLIPSIS)
        out.append(parts[i])
        last = i
    if last < len(parts) - 1:
        out.append(ELLIPSIS)
    return "".join(out)


class _Names:
    """A "name" column's names, cut to a width (``Column`` "name"). What does not depend on the width is
    worked out once: each name's parts, those that identify it, and the first part where it differs from
    each name with the same identifying parts (a tuned run beside the official one: its mbs2 beside
    their mbs1)."""

    def __init__(self, names: Sequence[str], column: Column):
        self.distinct = list(dict.fromkeys(names))
        self.split = {name: _parts(name) for name in self.distinct}
        self.base: dict[str, set[int]] = {}
        for name, (parts, _) in self.split.items():
            kept = set(range(min(column.keep, len(parts))))
            self.base[name] = kept | {i for i, p in enumerate(parts) if p in column.keep_parts} or {
                0
            }
        self.apart: dict[str, set[int]] = {name: set() for name in self.distinct}
        if column.keep:
            same: dict[tuple, list[str]] = {}
            for name, (parts, _) in self.split.items():
                same.setdefault(tuple(parts[: column.keep]), []).append(name)
            for group in same.values():
                self.apart.update(self._differing(group))

    def _differing(self, group: list[str]) -> dict[str, set[int]]:
        """For each name of ``group``, the first part where it differs from each other one."""
        found: dict[str, set[int]] = {name: set() for name in group}
        if not 1 < len(group) <= 64:  # past that many, the JOB column tells them apart
            return found
        for name in group:
            parts = self.split[name][0]
            for other in group:
                theirs = set(self.split[other][0])
                differing = [i for i, p in enumerate(parts) if p not in theirs]
                if other != name and differing:
                    found[name].add(differing[0])
        return found

    @staticmethod
    def _grown(parts: list[str], seps: list[str], kept: set[int], width: int) -> str:
        """The name with ``kept`` and its next parts, in order, while they fit: cut at its end."""
        kept = set(kept)
        for i in range(len(parts)):
            if i not in kept:
                if len(_joined(parts, seps, kept | {i})) > width:
                    break
                kept.add(i)
        return _joined(parts, seps, kept)

    def at(self, width: int, apart: bool = True) -> tuple[dict[str, str], bool]:
        """Each name in at most ``width`` characters where it can be, and whether every one kept what
        identifies it and no two different names read the same. ``apart`` False: cut at the end only
        (what is left when even that is too wide)."""
        shown: dict[str, str] = {}
        whole = True
        for name in self.distinct:
            if len(name) <= width:
                shown[name] = name
                continue
            parts, seps = self.split[name]
            base = set(self.base[name])
            while len(_joined(parts, seps, base)) > width and len(base) > 1:
                base.discard(max(base))  # too narrow even for what identifies it
                whole = False
            if len(_joined(parts, seps, base)) > width:
                shown[name] = shorten(name, width)
                whole = False
                continue
            more = self.apart[name] if apart else set()
            shown[name] = self._grown(parts, seps, base | more, width)
        if apart:
            # names that still read the same keep the first part where they differ
            alike: dict[str, list[str]] = {}
            for name in self.distinct:
                if len(name) > width:
                    alike.setdefault(shown[name], []).append(name)
            for group in alike.values():
                if len(group) > 1:
                    for name, more in self._differing(group).items():
                        parts, seps = self.split[name]
                        kept = self.base[name] | self.apart[name] | more
                        shown[name] = self._grown(parts, seps, kept, width)
        fits = all(len(text) <= width for text in shown.values())
        return shown, whole and fits and len(set(shown.values())) == len(self.distinct)

    def floor(self, least: int, most: int) -> int:
        """The narrowest width from ``least`` at which the names keep what identifies them and stay apart
        (searched by halves: a wider column never needs to cut more)."""
        if self.at(least)[1]:
            return least
        while most - least > 1:
            middle = (least + most) // 2
            if self.at(middle)[1]:
                most = middle
            else:
                least = middle
        return most

    def fitted(self, width: int) -> dict[str, str]:
        """Each name at ``width``: kept apart where that fits, else cut at its end."""
        shown, _ = self.at(width)
        plain = None
        for name, text in shown.items():
            if len(text) > width:
                plain = plain or self.at(width, apart=False)[0]
                shown[name] = plain[name]
        return shown


def render_table(
    headers: Sequence[str | Column],
    rows: Sequence[Sequence[Any]],
    gap: str = "  ",
    width: int | None | object = _AUTO,
) -> str:
    """Left-aligned columns sized to their widest cell; None shows as '-'. Cells are made
    ``terminal_safe`` and kept on one line (a "wrap" column's on the lines of its row). Wider than
    ``width`` (default ``output_width()``), the table is fitted by its columns' priorities: droppable
    columns with no value in any row are left out; then the others, highest ``drop`` first, until the
    squeezable ones at their narrowest (a "name" column: as narrow as keeps its rows' names identified
    and apart) make it fit; then the gap between columns narrows to one space; only then is a name cut
    further. The squeezable columns are narrowed the droppable ones first, the widest first; a line
    under the table names the columns left out."""
    columns = [h if isinstance(h, Column) else Column(h) for h in headers]
    cells = [["-" if c is None else _one_line(str(c)) for c in row] for row in rows]
    widths = [len(c.title) for c in columns]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    limit = output_width() if width is _AUTO else width
    shown = list(range(len(columns)))
    left_out: list[str] = []

    def total(sizes: list[int]) -> int:
        return sum(sizes[i] for i in shown) + len(gap) * (len(shown) - 1)

    if limit and total(widths) > limit:
        natural = list(widths)

        def least(i: int) -> int:
            c = columns[i]
            if not c.squeeze:
                return natural[i]
            return min(natural[i], max(c.squeeze, len(c.title)))

        floor = [least(i) for i in range(len(columns))]
        for i, c in enumerate(columns):
            if c.cut == "name" and floor[i] < natural[i]:
                floor[i] = _Names([row[i] for row in cells], c).floor(floor[i], natural[i])
        empty = [
            i for i, c in enumerate(columns) if c.drop and all(row[i] in ("-", "") for row in cells)
        ]
        # a column with no value goes before any cut
        for i in sorted(empty, key=lambda i: -columns[i].drop):
            if total(widths) <= limit:
                break
            shown.remove(i)
            left_out.append(columns[i].title)
        for i in sorted((i for i in shown if columns[i].drop), key=lambda i: -columns[i].drop):
            if total(floor) > limit and columns[i].drop <= KEPT_LONGEST:
                gap = " "  # one of the columns kept longest: worth one space between columns
            if total(floor) <= limit:
                break  # narrowing the squeezable columns is enough now
            shown.remove(i)
            left_out.append(columns[i].title)
        if total(floor) > limit and len(shown) > 1:
            gap = " "
        if gap != "  " and sum(floor[i] for i in shown) + 2 * (len(shown) - 1) <= limit:
            gap = "  "  # what was left out made room again
        if total(widths) > limit and sum(widths[i] for i in shown) + len(shown) - 1 <= limit:
            gap = " "  # one space between columns, rather than a cell cut or wrapped
        if total(floor) > limit:  # nothing else is left: names are cut further
            floor = [least(i) for i in range(len(columns))]
        # the droppable columns give first, then the others; in each, the widest column first
        for rank in sorted({columns[i].drop for i in shown}, reverse=True):
            group = [i for i in shown if columns[i].drop == rank]
            while total(widths) > limit:
                wider = [i for i in group if widths[i] > floor[i]]
                if not wider:
                    break
                widest = max(wider, key=lambda i: widths[i])
                widths[widest] -= 1
    forms: dict[int, dict[str, str]] = {}
    for i in shown:
        c = columns[i]
        if c.cut == "name" and any(len(row[i]) > widths[i] for row in cells):
            forms[i] = _Names([row[i] for row in cells], c).fitted(widths[i])
            widths[i] = max(
                [len(c.title), *(min(len(text), widths[i]) for text in forms[i].values())]
            )

    for i in shown:  # a "path" column too narrow for a path is as wide as what it still shows
        c = columns[i]
        column = [row[i] for row in cells]
        if c.cut == "path" and any(len(cell) > widths[i] for cell in column):
            fits = [len(cell) for cell in column if len(cell) <= widths[i]]
            marked = len({cell for cell in column if len(cell) > widths[i]})
            widths[i] = max([len(c.title), len(f"[{marked}]"), *fits])
    marks: dict[str, int] = {}  # a "path" column's paths too long for it, by their mark's number

    def pieces(i: int, cell: str) -> list[str]:
        c = columns[i]
        if len(cell) <= widths[i]:
            return [cell]
        if c.cut == "path":
            return [f"[{marks.setdefault(cell, len(marks) + 1)}]"]
        if c.cut == "wrap":
            return wrap_cell(cell, widths[i])
        if i in forms:
            return [shorten(forms[i][cell], widths[i])]
        return [shorten(cell, widths[i], c.cut)]

    lines = [
        gap.join(columns[i].title.ljust(widths[i]) for i in shown).rstrip(),
        gap.join("-" * widths[i] for i in shown),
    ]
    for row in cells:
        shown_cells = [pieces(i, row[i]) for i in shown]
        for n in range(max(len(p) for p in shown_cells)):
            lines.append(
                gap.join(
                    (p[n] if n < len(p) else "").ljust(widths[i])
                    for i, p in zip(shown, shown_cells, strict=True)
                ).rstrip()
            )
    lines += [f"[{n}] {path}" for path, n in marks.items()]  # whole, each on its own line
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
