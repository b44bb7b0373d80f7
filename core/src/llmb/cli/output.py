"""Plain-text tables and JSON on stdout: no dependency, fast to import."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click


def emit_json(data: Any) -> None:
    import json  # only when asked for: keeps table output's start-up lean

    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], gap: str = "  ") -> str:
    """Left-aligned columns sized to their widest cell; None shows as '-'."""
    cells = [[("-" if c is None else str(c)) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = [gap.join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append(gap.join("-" * w for w in widths))
    lines += [gap.join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)
