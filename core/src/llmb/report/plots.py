"""The report's plots, drawn with matplotlib's Agg canvas into PNG bytes.

matplotlib is imported inside the functions that draw, so importing this
module (and ``llmb report --help``) costs nothing; ``require_matplotlib``
says how to install it when it is missing.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from llmb.errors import UsageError
from llmb.recipes.records import ReferenceResult
from llmb.report.series import EFFICIENCY_FORMULAS, Point, ReportData, Spread

INSTALL_HINT = "pip install 'llmb[report]'"
EFFICIENCY_TITLE = "Scaling efficiency vs GPU count"
EFFICIENCY_SUBTITLE = (
    "weak scaling: T(n0) / T(n)    strong scaling: T(n0)·n0 / (T(n)·n)    n0: smallest GPU count"
)


@dataclass(frozen=True)
class Plot:
    name: str  # the PNG's file stem
    title: str
    description: str
    png: bytes

    @property
    def filename(self) -> str:
        return f"{self.name}.png"


@dataclass(frozen=True)
class Drawing:
    """A plot as a matplotlib figure, before it is rendered: what ``draw_plots`` turns into a ``Plot``."""

    name: str
    title: str
    description: str
    figure: Any  # matplotlib.figure.Figure

    def plot(self) -> Plot:
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", bbox_inches="tight")
        return Plot(self.name, self.title, self.description, buffer.getvalue())


@dataclass(frozen=True)
class MetricPlot:
    """A metric against GPU count: measured means with std error bars, published dashed."""

    name: str
    title: str
    y_label: str
    measured: Callable[[Point], Spread]
    published: Callable[[ReferenceResult], float | None]
    missing: str  # why no run has this metric
    log_y: bool = False
    # the seed's figure, where llmb corrects it
    printed: Callable[[ReferenceResult], float | None] = lambda r: None


STEP_TIME = MetricPlot(
    "step_time",
    "Step time vs GPU count",
    "step time (ms)",
    lambda p: p.step_time_ms,
    lambda r: r.step_time_s * 1000.0,
    "no run has a step time",
)
TOKENS_PER_S = MetricPlot(
    "tokens_per_s",
    "Tokens/s vs GPU count",
    "tokens/s (log scale)",
    lambda p: p.tokens_per_s,
    lambda r: r.tokens_per_s,
    "no run has tokens/s (it needs the sequence length and GBS)",
    log_y=True,
)


def _per_gpu(spread: Spread, gpus: int) -> Spread:
    return Spread(
        None if spread.mean is None else spread.mean / gpus,
        None if spread.std is None else spread.std / gpus,
    )


# What NVIDIA's performance summary publishes: tokens/s per GPU, flat under perfect weak scaling.
TOKENS_PER_GPU = MetricPlot(
    "tokens_per_gpu",
    "Tokens/s per GPU vs GPU count",
    "tokens/s per GPU",
    lambda p: _per_gpu(p.tokens_per_s, p.gpus),
    lambda r: None if r.tokens_per_s is None else r.tokens_per_s / r.gpus,
    TOKENS_PER_S.missing,
)
MFU = MetricPlot(
    "mfu",
    "MFU vs GPU count",
    "MFU (%)",
    lambda p: p.mfu_pct,
    lambda r: r.mfu_pct,
    "no run has an MFU (it needs the GPU type and dtype, and --gpu gives the GPU type of logs that do "
    "not record it; CPU runs have none)",
    printed=lambda r: r.printed_mfu_pct,
)
EFFICIENCY = "scaling_efficiency"
# in the report's order
PLOT_NAMES = (STEP_TIME.name, TOKENS_PER_S.name, TOKENS_PER_GPU.name, EFFICIENCY, MFU.name)
NO_EFFICIENCY = "every series has one GPU count only, so there is no efficiency curve"
MEASURED_HOW = (
    "Mean over each GPU count's runs; error bars: sample standard deviation across repeats; "
    "dashed with open markers: the published recipes' figures; a figure a recipe erratum corrects is "
    "plotted corrected and marked with the printed value. A linear axis starts at zero; a log one "
    "says so."
)


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            f"llmb report draws its plots with matplotlib, which is not installed here: "
            f"{INSTALL_HINT}."
        ) from None


def _axes():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 5.5), dpi=100)
    FigureCanvasAgg(figure)
    return figure, figure.subplots()


def _gpu_axis(axes, counts: set[int]) -> None:
    from matplotlib.ticker import FixedLocator, NullLocator

    ticks = sorted(counts)
    axes.set_xscale("log", base=2)
    axes.xaxis.set_major_locator(FixedLocator(ticks))
    axes.xaxis.set_minor_locator(NullLocator())
    axes.set_xticklabels([str(n) for n in ticks])
    axes.set_xlabel("GPUs")
    axes.grid(True, alpha=0.3)


def _finish(axes, title: str, y_label: str, subtitle: str | None = None) -> None:
    """What every plot ends with: title, axis label, legend, and tick labels as plain numbers."""
    from llmb.report.ticks import plain_ticks

    axes.set_title(title if subtitle is None else f"{title}\n{subtitle}", fontsize="medium")
    axes.set_ylabel(y_label)
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    plain_ticks(axes)


def _style(index: int) -> dict:
    return {"color": f"C{index % 10}", "marker": "osD^v<>ph*"[index // 10 % 10]}


def _published_line(
    axes,
    points: list[tuple[int, float | None]],
    label: str,
    style: dict,
    counts: set[int],
    printed: dict[int, float] | None = None,
) -> None:
    """The published curve; ``printed`` holds the seed's own figure at GPU counts where an erratum corrects it."""
    points = [(n, v) for n, v in points if v is not None]
    printed = printed or {}
    if points:
        counts.update(n for n, _ in points)
        mark = ", * corrected per erratum" if printed else ""
        axes.plot(
            [n for n, _ in points],
            [v for _, v in points],
            linestyle="--",
            marker="s",
            markerfacecolor="none",
            color=style["color"],
            label=f"{label} (published{mark})",
        )
        for n, value in points:
            if n in printed:
                axes.annotate(
                    f"* corrected (printed {printed[n]:g})",
                    (n, value),
                    textcoords="offset points",
                    xytext=(4, 6),
                    fontsize=7,
                    color=style["color"],
                )


def _metric_plot(spec: MetricPlot, data: ReportData) -> Drawing | None:
    figure, axes = _axes()
    counts: set[int] = set()
    drawn = False
    corrections = []
    for index, series in enumerate(data.series):
        measured = [
            (p.gpus, spec.measured(p)) for p in series.points if spec.measured(p).mean is not None
        ]
        if not measured:
            continue
        drawn = True
        corrections += [
            f"{series.label} at {r.gpus} GPUs: {r.mfu_label()}"
            for r in series.published
            if spec.printed(r) is not None
        ]
        style = _style(index)
        counts.update(n for n, _ in measured)
        axes.errorbar(
            [n for n, _ in measured],
            [s.mean for _, s in measured],
            yerr=[s.std or 0.0 for _, s in measured],
            capsize=3,
            label=series.label,
            **style,
        )
        _published_line(
            axes,
            [(r.gpus, spec.published(r)) for r in series.published],
            series.label,
            style,
            counts,
            {r.gpus: v for r in series.published if (v := spec.printed(r)) is not None},
        )
    if not drawn:
        return None
    _gpu_axis(axes, counts)
    if spec.log_y:
        axes.set_yscale("log")
    else:
        axes.set_ylim(bottom=0)  # a difference is drawn to its scale
    description = MEASURED_HOW + "".join(
        f" Published {spec.title.split(' vs ')[0]}, {c}." for c in corrections
    )
    _finish(axes, spec.title, spec.y_label)
    return Drawing(spec.name, spec.title, description, figure)


def _efficiency_plot(data: ReportData) -> Drawing | None:
    curves = [(i, s) for i, s in enumerate(data.series) if s.has_efficiency]
    if not curves:
        return None
    from matplotlib.ticker import PercentFormatter

    figure, axes = _axes()
    counts: set[int] = set()
    for index, series in curves:
        style = _style(index)
        points = [(p.gpus, p.efficiency) for p in series.points]
        counts.update(n for n, _ in points)
        axes.plot([n for n, _ in points], [e for _, e in points], label=series.label, **style)
        _published_line(axes, list(series.published_efficiency), series.label, style, counts)
    axes.axhline(1.0, color="grey", linewidth=0.8)
    axes.set_ylim(bottom=0)
    axes.yaxis.set_major_formatter(PercentFormatter(1.0))
    _gpu_axis(axes, counts)
    single = [s.label for s in data.series if not s.has_efficiency]
    if single:
        figure.text(
            0.01,
            -0.02,
            "Not drawn (one GPU count only): " + "; ".join(single),
            fontsize="small",
            va="top",
            wrap=True,
        )
    _finish(axes, EFFICIENCY_TITLE, "scaling efficiency", EFFICIENCY_SUBTITLE)
    return Drawing(EFFICIENCY, EFFICIENCY_TITLE, EFFICIENCY_FORMULAS, figure)


@contextmanager
def text_as_drawn() -> Iterator[None]:
    """Every text is drawn as it is: labels come from logs and directory names, and a ``$`` must not
    start matplotlib's math parser. Figures are made and rendered inside it."""
    from matplotlib import rc_context

    with rc_context({"text.parse_math": False}):
        yield


def draw_figures(data: ReportData) -> tuple[list[Drawing], list[str]]:
    """The figures there is data for, and a sentence for each one left out; call it, and render what
    it returns, inside ``text_as_drawn``."""
    candidates = (
        (_metric_plot(STEP_TIME, data), f"{STEP_TIME.title}: {STEP_TIME.missing}."),
        (_metric_plot(TOKENS_PER_S, data), f"{TOKENS_PER_S.title}: {TOKENS_PER_S.missing}."),
        (_metric_plot(TOKENS_PER_GPU, data), f"{TOKENS_PER_GPU.title}: {TOKENS_PER_GPU.missing}."),
        (_efficiency_plot(data), f"{EFFICIENCY_TITLE}: {NO_EFFICIENCY}."),
        (_metric_plot(MFU, data), f"{MFU.title}: {MFU.missing}."),
    )
    return [drawing for drawing, _ in candidates if drawing], [
        why for drawing, why in candidates if drawing is None
    ]


def draw_plots(data: ReportData) -> tuple[list[Plot], list[str]]:
    """The plots there is data for, as PNG, and a sentence for each one left out."""
    with text_as_drawn():
        drawings, omitted = draw_figures(data)
        return [drawing.plot() for drawing in drawings], omitted
