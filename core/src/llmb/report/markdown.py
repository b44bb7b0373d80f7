"""The report as Markdown (``summary.md``): the same blocks, with the plots linked as PNG files."""

from __future__ import annotations

import re

from llmb.report.document import Block, Bullets, Figure, Heading, Paragraph
from llmb.report.tables import Table

_SPECIAL = re.compile(r"([\\`*_\[\]<>|])")


def _text(text: str) -> str:
    """One line, with Markdown's special characters taken literally."""
    return _SPECIAL.sub(r"\\\1", " ".join(text.split()))


def _table(table: Table) -> str:
    lines = [
        "| " + " | ".join(_text(h) for h in table.headers) + " |",
        "|" + "---|" * len(table.headers),
    ]
    lines += ["| " + " | ".join(_text(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines)


def _block(block: Block) -> str:
    if isinstance(block, Heading):
        return "#" * block.level + " " + _text(block.text)
    if isinstance(block, Paragraph):
        return _text(block.text)
    if isinstance(block, Bullets):
        return "\n".join(f"- {_text(item)}" for item in block.items)
    if isinstance(block, Figure):
        return f"![{_text(block.plot.title)}]({block.plot.filename})"
    return _table(block)


def render_markdown(blocks: list[Block]) -> str:
    return "\n\n".join(_block(b) for b in blocks) + "\n"
