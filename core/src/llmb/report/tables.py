"""The report's tables as text cells, shared by the HTML page and the Markdown summary."""

from __future__ import annotations

from dataclasses import dataclass

from llmb.figures import figure
from llmb.report.series import Series, Spread, Unplotted


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    # the columns of free text (a run's name, a configuration, a reason that may hold a path): the page
    # breaks their long words anywhere, so the table stays inside it; numbers are never broken
    text_columns: frozenset[int] = frozenset()


def _number(value: float | None, digits: int) -> str:
    """``digits`` decimals, never fewer than three significant digits (a CPU proxy's TFLOP/s)."""
    return figure(value, digits)


def _spread(spread: Spread, digits: int) -> str:
    if spread.mean is None:
        return "-"
    text = _number(spread.mean, digits)
    return text if spread.std is None else f"{text} ± {_number(spread.std, digits)}"


def _signed_pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def series_table(series: Series) -> Table:
    """One row per point: its runs' means (± sample std) and the published step time."""
    rows = tuple(
        (
            str(p.gpus),
            str(len(p.runs)),
            _spread(p.step_time_ms, 1),
            _spread(p.tokens_per_s, 0),
            _spread(p.tflops_per_gpu, 1),
            _spread(p.mfu_pct, 2),
            "-" if p.efficiency is None else f"{p.efficiency:.1%}",
            _number(p.published_step_time_ms, 1),
            _signed_pct(p.published_delta_pct),
        )
        for p in series.points
    )
    return Table(
        (
            "GPUs",
            "runs",
            "step time (ms)",
            "tokens/s",
            "TFLOP/s/GPU",
            "MFU %",
            "efficiency",
            "published step time (ms)",
            "vs published",
        ),
        rows,
    )


def unplotted_table(unplotted: tuple[Unplotted, ...]) -> Table:
    """The runs that are in no series: status and reason."""
    rows = tuple(
        (
            u.run.name,
            u.run.status,
            "-" if u.run.gpus is None else str(u.run.gpus),
            u.run.series_key.label,
            u.why,
        )
        for u in unplotted
    )
    return Table(
        ("run", "status", "GPUs", "configuration", "reason"),
        rows,
        text_columns=frozenset({0, 3, 4}),
    )
