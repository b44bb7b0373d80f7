"""Result rows grouped into series and aggregated per GPU count, as plain data.

A *series* is one configuration measured at one or more GPU counts:
workload, variant, size, GPU type, dtype, scaling, and whether it ran as a
proxy. The runs of a series at one GPU count (its repeats) make one
*point*: the mean of their step times, tokens/s, TFLOP/s/GPU and MFU, with
the sample standard deviation across the runs. Only successful runs with a
step time and a GPU count are plotted; every other run is listed with why.

Scaling efficiency is relative to the series' smallest GPU count n0:

    weak scaling    E(n) = T(n0) / T(n)
    strong scaling  E(n) = T(n0) * n0 / (T(n) * n)

Published figures are the workload's references for the series'
configuration at every GPU count the seed published; proxies have none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmb.recipes.gpus import recipes_of, runs_note
from llmb.recipes.records import ReferenceResult, Workload
from llmb.recipes.references import AUTO, Configuration, candidates, chosen
from llmb.results.analyze import delta_pct, mean_std
from llmb.results.records import ASSUMED_GPU_SOURCES

STRONG = "strong"
EFFICIENCY_FORMULAS = (
    "Scaling efficiency is relative to the series' smallest GPU count n0 (for the published curve, "
    "the smallest published count): weak scaling T(n0) / T(n), strong scaling "
    "T(n0)·n0 / (T(n)·n), where T is the mean step time."
)


@dataclass(frozen=True)
class Run:
    """One run as a results row has it (``llmb.results.export.row``)."""

    name: str
    status: str
    reason: str | None
    workload: str | None
    variant: str | None
    size: str | None
    gpu: str | None
    dtype: str | None
    gpus: int | None
    scaling: str
    proxy: bool
    step_time_ms: float | None
    tokens_per_s: float | None
    tflops_per_gpu: float | None
    mfu_pct: float | None
    gpu_source: str | None = None  # recipe | provenance | --gpu | cluster file (the row's)
    tuned: str | None = (
        None  # the settings that differ from the official configuration's (the row's)
    )
    doubts: str | None = None  # why no verdict is reached for it (the row's): it is not plotted

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Run:
        return cls(
            name=str(row.get("filename") or row.get("log") or "?"),
            status=str(row.get("status") or "unknown"),
            reason=row.get("failure_reason"),
            workload=row.get("workload"),
            variant=row.get("variant"),
            size=row.get("size"),
            gpu=row.get("gpu"),
            dtype=row.get("dtype"),
            gpus=_count(row.get("gpus")),
            scaling=row.get("scaling") or "weak",
            proxy=bool(row.get("proxy")),
            step_time_ms=row.get("time_mean_ms"),
            tokens_per_s=row.get("tokens_per_s"),
            tflops_per_gpu=row.get("tflops_per_gpu_mean"),
            mfu_pct=row.get("mfu_pct"),
            gpu_source=row.get("gpu_source"),
            tuned=row.get("tuned") if isinstance(row.get("tuned"), str) else None,
            doubts=row.get("doubts") if isinstance(row.get("doubts"), str) else None,
        )

    @property
    def series_key(self) -> SeriesKey:
        return SeriesKey(
            self.workload,
            self.variant,
            self.size,
            self.gpu,
            self.dtype,
            self.scaling,
            self.proxy,
            self.tuned,
        )


def _count(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class SeriesKey:
    workload: str | None
    variant: str | None
    size: str | None
    gpu: str | None
    dtype: str | None
    scaling: str
    proxy: bool
    # a tuned run's differences: its own series, never drawn as the official configuration
    tuned: str | None = None

    @property
    def label(self) -> str:
        """``llama31 nemo2 8b h100 bf16, weak scaling``; each part at most ``MAX_PART`` characters (they come
        from results files and logs: a 20,000-character name must not make a 760 MB plot)."""
        parts = [
            _bounded(p or "?")
            for p in (self.workload, self.variant, self.size, self.gpu, self.dtype)
        ]
        return (
            " ".join(parts)
            + f", {_bounded(self.scaling)} scaling"
            + (", proxy" if self.proxy else "")
            + (f", tuned ({_bounded(self.tuned)})" if self.tuned else "")
        )

    def sort_key(self) -> tuple:
        return tuple(
            "" if v is None else v
            for v in (self.workload, self.variant, self.size, self.gpu, self.dtype)
        ) + (self.scaling, self.proxy, self.tuned or "")


@dataclass(frozen=True)
class Spread:
    """Mean and sample standard deviation over a point's runs (no std for one run)."""

    mean: float | None
    std: float | None

    @classmethod
    def of(cls, values: list[float | None]) -> Spread:
        return cls(*mean_std(values))


@dataclass(frozen=True)
class Point:
    gpus: int
    runs: tuple[str, ...]
    step_time_ms: Spread
    tokens_per_s: Spread
    tflops_per_gpu: Spread
    mfu_pct: Spread
    efficiency: float | None  # None at the smallest GPU count of a one-point series
    published: ReferenceResult | None

    @property
    def published_step_time_ms(self) -> float | None:
        return None if self.published is None else self.published.step_time_s * 1000.0

    @property
    def published_delta_pct(self) -> float | None:
        published = self.published_step_time_ms
        if published is None or self.step_time_ms.mean is None:
            return None
        return delta_pct(self.step_time_ms.mean, published)


@dataclass(frozen=True)
class Series:
    key: SeriesKey
    points: tuple[Point, ...]  # by GPU count
    published: tuple[ReferenceResult, ...]  # every GPU count the seed published; none for a proxy
    published_efficiency: tuple[tuple[int, float], ...]  # the published step times' own efficiency
    notes: tuple[str, ...]

    @property
    def label(self) -> str:
        return self.key.label

    @property
    def has_efficiency(self) -> bool:
        return len(self.points) > 1


@dataclass(frozen=True)
class Unplotted:
    """A run that is not in any series, and why."""

    run: Run
    why: str


@dataclass(frozen=True)
class ReportData:
    series: tuple[Series, ...]
    unplotted: tuple[Unplotted, ...]
    runs: int


def scaling_efficiency(
    scaling: str, base_gpus: int, base_step_ms: float, gpus: int, step_ms: float
) -> float:
    """Efficiency at ``gpus`` relative to ``base_gpus`` (see the module's formulas)."""
    if scaling == STRONG:
        return (base_step_ms * base_gpus) / (step_ms * gpus)
    return base_step_ms / step_ms


MAX_PART = 40  # characters of one part of a series label


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_PART else text[: MAX_PART - 1] + "…"


def efficiency_curve(
    scaling: str, step_times: list[tuple[int, float]]
) -> tuple[tuple[int, float], ...]:
    """(GPUs, efficiency) relative to the smallest GPU count; empty for fewer than two counts."""
    if len(step_times) < 2:
        return ()
    ordered = sorted(step_times)
    base_gpus, base_ms = ordered[0]
    return tuple((n, scaling_efficiency(scaling, base_gpus, base_ms, n, ms)) for n, ms in ordered)


def _why_unplotted(run: Run) -> str | None:
    if run.status != "success":
        return run.reason or run.status
    if run.doubts:  # which configuration's series it belongs to is what is in doubt
        return f"not judged: {run.doubts}"
    if run.step_time_ms is None:
        return "no step time in the window"
    if run.gpus is None:
        return "GPU count unknown (no recipe.json, and the experiment name does not say)"
    return None


def _published(key: SeriesKey, workloads: Mapping[str, Workload]) -> tuple[ReferenceResult, ...]:
    """The published figure at each GPU count a document publishes one for the series' configuration, by
    the one reference policy ``results`` and ``compare`` use: the own recipe's, else another document's at
    exactly that configuration's batch (``llmb.recipes.references.chosen``)."""
    workload = workloads.get(key.workload) if key.workload else None
    if key.proxy or key.tuned or workload is None or None in (key.size, key.gpu, key.dtype):
        return ()
    counts = sorted(
        {
            ref.gpus
            for ref in (*workload.references, *workload.summary)
            if (ref.size, ref.gpu, ref.dtype, ref.scaling)
            == (key.size, recipes_of(key.gpu), key.dtype, key.scaling)  # an H200's are the H100's
        }
    )
    found = []
    for n in counts:
        config = Configuration(key.variant, key.size, key.gpu, key.dtype, n, key.scaling)
        picked = chosen(workload, config, AUTO)
        if picked is not None and picked[1].step_time_s:
            found.append(picked[1])
    return tuple(found)


def _published_notes(key: SeriesKey, workloads: Mapping[str, Workload], published) -> list[str]:
    """Which documents the published curve comes from where not the own recipe (or not the series' GPU
    type's: an H200's are the H100's), or why there is none."""
    if published:
        whose = (
            [f"published figures are the {recipes_of(key.gpu)}'s: {note}"]
            if (note := runs_note(key.gpu))
            else []
        )
        borrowed = [
            r for r in published if r.variant != key.variant or r in _summary_of(key, workloads)
        ]
        if not borrowed:
            return whose
        return whose + [
            "published figures from other documents (its own recipe has none at these counts): "
            + "; ".join(f"{r.gpus} GPUs: {r.note or r.provenance.describe()}" for r in borrowed)
        ]
    workload = workloads.get(key.workload) if key.workload else None
    others = (
        []
        if workload is None or None in (key.size, key.gpu, key.dtype)
        else [
            f
            for n in sorted({r.gpus for r in (*workload.references, *workload.summary)})
            for f in candidates(
                workload, Configuration(key.variant, key.size, key.gpu, key.dtype, n, key.scaling)
            )
        ]
    )
    if not others:
        return ["no published document has figures for this configuration"]
    listed = "; ".join(f"{f.gpus} GPUs {f.headline()} ({f.describe()})" for f in others)
    return [
        f"no document publishes a figure at this configuration's batch: {listed} "
        f"(llmb compare --reference {others[0].source})"
    ]


def _summary_of(key: SeriesKey, workloads: Mapping[str, Workload]) -> tuple[ReferenceResult, ...]:
    workload = workloads.get(key.workload) if key.workload else None
    return workload.summary if workload is not None else ()


def _series(key: SeriesKey, runs: list[Run], workloads: Mapping[str, Workload]) -> Series:
    published = _published(key, workloads)
    published_at = {ref.gpus: ref for ref in published}
    by_gpus: dict[int, list[Run]] = {}
    for run in runs:
        by_gpus.setdefault(run.gpus, []).append(run)
    step_means = {
        n: Spread.of([r.step_time_ms for r in group]).mean for n, group in by_gpus.items()
    }
    efficiency = dict(efficiency_curve(key.scaling, list(step_means.items())))
    points = tuple(
        Point(
            gpus=n,
            runs=tuple(r.name for r in group),
            step_time_ms=Spread.of([r.step_time_ms for r in group]),
            tokens_per_s=Spread.of([r.tokens_per_s for r in group]),
            tflops_per_gpu=Spread.of([r.tflops_per_gpu for r in group]),
            mfu_pct=Spread.of([r.mfu_pct for r in group]),
            efficiency=efficiency.get(n),
            published=published_at.get(n),
        )
        for n, group in sorted(by_gpus.items())
    )
    notes = []
    if key.proxy:
        notes.append("proxy run: not compared with the published figures")
    elif key.tuned:
        notes.append(
            f"tuned ({key.tuned}): not the official configuration, so no published curve is drawn "
            "(llmb compare shows each run beside the official configuration's figure)"
        )
    else:
        notes += _published_notes(key, workloads, published)
    assumed = sorted({r.gpu_source for r in runs if r.gpu_source in ASSUMED_GPU_SOURCES})
    if key.gpu and assumed:
        notes.append(
            f"GPU type {key.gpu} taken from {' and '.join(assumed)}: the logs do not record it"
        )
    if len(points) == 1:
        notes.append(f"one GPU count only ({points[0].gpus}): no scaling-efficiency curve")
    published_efficiency = efficiency_curve(
        key.scaling, [(r.gpus, r.step_time_s * 1000.0) for r in published]
    )
    return Series(key, points, published, published_efficiency, tuple(notes))


def build_report(rows: list[Mapping[str, Any]], workloads: Mapping[str, Workload]) -> ReportData:
    """Series (ordered by configuration) and the runs left out of them."""
    grouped: dict[SeriesKey, list[Run]] = {}
    unplotted = []
    for run in map(Run.from_row, rows):
        why = _why_unplotted(run)
        if why is None:
            grouped.setdefault(run.series_key, []).append(run)
        else:
            unplotted.append(Unplotted(run, why))
    series = tuple(
        _series(key, grouped[key], workloads) for key in sorted(grouped, key=SeriesKey.sort_key)
    )
    return ReportData(series, tuple(unplotted), len(rows))
