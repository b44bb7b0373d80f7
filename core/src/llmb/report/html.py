"""The report as one self-contained HTML page.

The plots are embedded as ``data:`` URIs and the page's Content-Security-Policy
forbids loading anything else, so the file works alone, offline. Its one
script (allowed by its hash) only marks each image ``data-loaded="yes"`` or
``"no"`` once the page has loaded; the page reads the same without it.
"""

from __future__ import annotations

import base64
import hashlib
from html import escape

from llmb.report.document import TITLE, Block, Bullets, Figure, Heading, Paragraph
from llmb.report.tables import Table

MARK_LOADED = (
    'addEventListener("load",function(){for(var i of document.images)'
    'i.setAttribute("data-loaded",i.naturalWidth>0?"yes":"no")})'
)
# Nothing is wider than the window: a long word (a path in a paragraph) wraps inside its block, a
# table is at most the page's width, and its free-text cells (``Table.text_columns``: run names,
# reasons holding paths) may break anywhere, which lets the table's layout make them narrow.
STYLE = (
    "body{font-family:system-ui,sans-serif;color:#222;max-width:80em;margin:2em auto;padding:0 1em;"
    "overflow-wrap:break-word}"
    "table{border-collapse:collapse;margin:.5em 0 1.5em;font-variant-numeric:tabular-nums;"
    "max-width:100%}"
    "th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}"
    "td.text{word-break:break-word;overflow-wrap:anywhere}"
    "th{background:#f2f2f2}figure{margin:0 0 1.5em}img{max-width:100%;height:auto}"
)


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; img-src data:; style-src '{_sha256(STYLE)}'; "
    f"script-src '{_sha256(MARK_LOADED)}'"
)


def _free_text(text: str) -> str:
    """A free-text cell: a path or a run's name breaks after a ``/`` or ``_`` first, where it must."""
    return escape(text).replace("/", "/<wbr>").replace("_", "_<wbr>")


def _table(table: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in table.headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="text">{_free_text(c)}</td>'
            if i in table.text_columns
            else f"<td>{escape(c)}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>\n"
        for row in table.rows
    )
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody>\n</table>"


def _block(block: Block) -> str:
    if isinstance(block, Heading):
        return f"<h{block.level}>{escape(block.text)}</h{block.level}>"
    if isinstance(block, Paragraph):
        return f"<p>{escape(block.text)}</p>"
    if isinstance(block, Bullets):
        return "<ul>" + "".join(f"<li>{escape(item)}</li>" for item in block.items) + "</ul>"
    if isinstance(block, Figure):
        data = base64.b64encode(block.plot.png).decode("ascii")
        return (
            f'<figure id="{escape(block.plot.name)}"><img src="data:image/png;base64,{data}" '
            f'alt="{escape(block.plot.title)}"></figure>'
        )
    return _table(block)


def render_html(blocks: list[Block]) -> str:
    body = "\n".join(_block(b) for b in blocks)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{escape(CONTENT_SECURITY_POLICY)}">\n'
        f"<title>{escape(TITLE)}</title>\n<style>{STYLE}</style>\n<script>{MARK_LOADED}</script>\n</head>\n"
        f"<body>\n{body}\n</body>\n</html>\n"
    )
