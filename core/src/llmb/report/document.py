"""What the report says, as a list of blocks that ``html`` and ``markdown`` render alike."""

from __future__ import annotations

from dataclasses import dataclass

from llmb.report.plots import Plot
from llmb.report.series import EFFICIENCY_FORMULAS, ReportData
from llmb.report.tables import Table, series_table, unplotted_table

TITLE = "llmb report"


@dataclass(frozen=True)
class Heading:
    text: str
    level: int


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Figure:
    plot: Plot


Block = Heading | Paragraph | Bullets | Figure | Table


def _summary(data: ReportData) -> str:
    plotted = data.runs - len(data.unplotted)
    return (
        f"{data.runs} run{'s' if data.runs != 1 else ''}: {plotted} plotted in {len(data.series)} "
        f"series, {len(data.unplotted)} without a result."
    )


def build_document(
    data: ReportData, plots: list[Plot], omitted: list[str], source: str, generated_at: str
) -> list[Block]:
    """Title and summary, the plots (and why any is missing), each series' points, the runs left out."""
    blocks: list[Block] = [
        Heading(TITLE, 1),
        Paragraph(f"Runs: {source}. Generated {generated_at}."),
        Paragraph(_summary(data)),
    ]
    if not data.series:
        blocks.append(Paragraph("No run produced a step time, so there is nothing to plot."))
    if plots or omitted:
        blocks.append(Heading("Plots", 2))
    for plot in plots:
        blocks += [Heading(plot.title, 3), Paragraph(plot.description), Figure(plot)]
    if omitted:
        blocks += [Paragraph("Not drawn:"), Bullets(tuple(omitted))]
    if data.series:
        blocks += [
            Heading("Series", 2),
            Paragraph(
                "Each point is the mean over the runs at that GPU count, ± the sample standard deviation across "
                "repeats; the published step time is the recipe's for the same configuration. "
                + EFFICIENCY_FORMULAS
            ),
        ]
    for series in data.series:
        blocks.append(Heading(series.label, 3))
        if series.notes:
            blocks.append(Bullets(series.notes))
        blocks.append(series_table(series))
    blocks.append(Heading("Runs without a result", 2))
    if data.unplotted:
        blocks.append(unplotted_table(data.unplotted))
    else:
        blocks.append(Paragraph("None: every run succeeded and is plotted."))
    return blocks
