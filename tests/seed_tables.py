"""Read the Markdown tables of a seed document, independently of llmb.

A table is a line with ``|`` followed by a separator line (``|---|:---:|``);
its rows run until the first line without ``|``. Rows may or may not start
with ``|`` (the Llama 4 and Nemotron-H performance tables do not). Tables are
numbered from 0 in file order, which is how the plugin data files cite them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

_SEPARATOR = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")


@dataclass
class SeedTable:
    index: int
    line: int  # 1-based line of the header
    header: list[str]
    rows: list[list[str]]


def _cells(line: str) -> list[str]:
    text = line.strip()
    if text.startswith("|"):
        text = text[1:]
    if text.endswith("|"):
        text = text[:-1]
    return [cell.strip() for cell in text.split("|")]


def read_tables(text: str) -> list[SeedTable]:
    lines = text.splitlines()
    tables: list[SeedTable] = []
    i = 0
    while i < len(lines) - 1:
        if "|" in lines[i] and _SEPARATOR.match(lines[i + 1]):
            header = _cells(lines[i])
            rows = []
            j = i + 2
            while j < len(lines) and "|" in lines[j] and lines[j].strip():
                rows.append(_cells(lines[j]))
                j += 1
            tables.append(SeedTable(len(tables), i + 1, header, rows))
            i = j
        else:
            i += 1
    return tables


def seeds_dir() -> Path | None:
    """``shared/seeds`` beside the checkout (CI and development layout), or
    ``$LLMB_SEEDS_DIR``; None when neither exists."""
    env = os.environ.get("LLMB_SEEDS_DIR")
    candidates = [Path(env)] if env else []
    root = Path(__file__).resolve().parents[1]
    candidates += [root.parent / "shared" / "seeds", root / "shared" / "seeds"]
    return next((c for c in candidates if c.is_dir()), None)
