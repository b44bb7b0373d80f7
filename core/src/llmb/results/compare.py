"""Comparing results with the seeds' published figures and with a baseline.

A run *passes* when its throughput is at least ``threshold`` (0.95: the
cluster-acceptance rule of the tool llmb replaces) of the reference's, i.e.
``reference step time / run step time >= threshold``. A run that did not
succeed cannot pass. Proxy runs are never compared with the published
figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from llmb.results.export import read_rows
from llmb.results.records import RunResult

DEFAULT_THRESHOLD = 0.95
KEY_FIELDS = ("workload", "size", "gpu", "dtype", "gpus", "scaling")


@dataclass(frozen=True)
class Baseline:
    """One baseline measurement: the configuration and its step time."""

    key: tuple
    time_mean_ms: float
    source: str


@dataclass(frozen=True)
class Verdict:
    against: str  # "published" | "baseline" | "run" (the run has no result to compare)
    outcome: str  # pass | regress | skipped, or (against "run") the run's results status: failed, too_short, ...
    ratio: float | None  # reference step time / run step time
    reference_ms: float | None
    detail: str


def key_of(result: RunResult) -> tuple:
    c = result.context
    return (c.workload, c.size, c.gpu, c.dtype, c.gpus, c.scaling)


def _key_from_row(row: dict[str, Any]) -> tuple:
    return tuple(row.get(k) if k != "gpus" or row.get(k) is None else int(row[k]) for k in KEY_FIELDS)


def load_baselines(path: str) -> list[Baseline]:
    """A JSON file written by ``llmb results --format json`` (a list of rows,
    or one row). Only successful rows with a step time count."""
    return [
        Baseline(_key_from_row(item), float(item["time_mean_ms"]), f"{path}: {item.get('filename')}")
        for item in read_rows(path, "the baseline")
        if item.get("status") == "success" and item.get("time_mean_ms")
    ]


def _judge(result: RunResult, against: str, reference_ms: float | None, source: str, threshold: float) -> Verdict:
    if reference_ms is None:
        return Verdict(against, "skipped", None, None, f"no {against} figure for this configuration")
    ratio = reference_ms / result.stats.time_mean_ms
    outcome = "pass" if ratio >= threshold or math.isclose(ratio, threshold) else "regress"
    return Verdict(against, outcome, ratio, reference_ms,
                   f"{ratio:.1%} of {against} throughput ({source}; pass at {threshold:.0%})")


def compare(result: RunResult, baselines: list[Baseline] | None, threshold: float) -> list[Verdict]:
    """One verdict per reference; a run without a result is judged by its status, in the words
    ``llmb results`` uses (a cancelled run is ``cancelled``, one too short for the window ``too_short``)."""
    if result.status != "success" or not result.stats or not result.stats.time_mean_ms:
        outcome = result.status if result.status != "success" else "no_data"
        return [Verdict("run", outcome, None, None, f"{result.status}: {result.reason or 'no step time'}")]
    verdicts = []
    if result.context.proxy:
        verdicts.append(Verdict("published", "skipped", None, None, "proxy run: not compared with published figures"))
    else:
        verdicts.append(_judge(result, "published", result.reference_step_time_ms,
                               result.reference_source or "", threshold))
    if baselines is not None:
        match = next((b for b in baselines if b.key == key_of(result)), None)
        verdicts.append(_judge(result, "baseline", match.time_mean_ms if match else None,
                               match.source if match else "", threshold))
    return verdicts


def regressed(verdicts: list[Verdict]) -> bool:
    """A regression, or a run with no result to compare."""
    return any(v.outcome not in ("pass", "skipped") for v in verdicts)
