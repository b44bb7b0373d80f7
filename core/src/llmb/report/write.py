"""Writing a report: the PNG plots, ``index.html`` and ``summary.md`` in one directory."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

from llmb.errors import UsageError
from llmb.report.document import build_document
from llmb.report.html import render_html
from llmb.report.markdown import render_markdown
from llmb.report.plots import PLOT_NAMES, draw_plots
from llmb.report.series import ReportData

HTML_FILE = "index.html"
MARKDOWN_FILE = "summary.md"


@dataclass(frozen=True)
class WrittenReport:
    out: str
    html: str
    markdown: str
    plots: list[str]
    series: int
    runs: int

    def to_dict(self) -> dict:
        return asdict(self)


def _write(path: str, content: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(content)


def write_report(data: ReportData, out_dir: str, source: str) -> WrittenReport:
    """Draw and write everything; a plot an earlier report left here that this one has no data for is removed."""
    out = os.path.abspath(out_dir)
    plots, omitted = draw_plots(data)
    generated_at = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    blocks = build_document(data, plots, omitted, source, generated_at)
    html, markdown = os.path.join(out, HTML_FILE), os.path.join(out, MARKDOWN_FILE)
    drawn = {plot.name for plot in plots}
    try:
        os.makedirs(out, exist_ok=True)
        for name in PLOT_NAMES:
            stale = os.path.join(out, f"{name}.png")
            if name not in drawn and os.path.exists(stale):
                os.remove(stale)
        for plot in plots:
            _write(os.path.join(out, plot.filename), plot.png)
        _write(html, render_html(blocks).encode("utf-8"))
        _write(markdown, render_markdown(blocks).encode("utf-8"))
    except OSError as exc:
        raise UsageError(
            f"cannot write the report into {out}: {exc.strerror} ({exc.filename}); "
            f"give --out a directory you can write to."
        ) from None
    return WrittenReport(
        out,
        html,
        markdown,
        [os.path.join(out, p.filename) for p in plots],
        len(data.series),
        data.runs,
    )
