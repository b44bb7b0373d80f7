"""Comparing results with a published figure and with a baseline.

A run *passes* when its throughput is at least ``threshold`` (0.95: the
cluster-acceptance rule of the tool llmb replaces) of the reference's, i.e.
``reference step time / run step time >= threshold`` where both ran the same
global batch on the same GPU count; otherwise the ratio of tokens/s, else of
TFLOP/s per GPU (only where the run and the figure name the same container
release: across releases the FLOP count can differ), and the detail says
which. A run that did not succeed cannot
pass. A run with nothing to compare with (a proxy, an unknown GPU type, a
configuration no document publishes) is ``not_compared``, with the reason:
never a pass. The published figure comes from ``llmb.results.references``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from llmb.recipes.references import (
    AUTO,
    DEFAULT_SOURCE,
    Figure,
    Missing,
    release_text,
    same_container,
)
from llmb.results.export import read_rows
from llmb.results.records import RunResult

DEFAULT_THRESHOLD = 0.95
NOT_COMPARED = "not_compared"
KEY_FIELDS = ("workload", "size", "gpu", "dtype", "gpus", "scaling")


BASELINE_FORMS = ("directory", "file", "job", "database")  # what ``--baseline`` was given as
SELF = "the baseline is this run itself"
DIRECT = "the one run given, configurations not matched"


@dataclass(frozen=True)
class Baseline:
    """One baseline measurement: the configuration and its step time, where it came from in the user's
    words (``source``: ``job local-575dba``, ``run 12 in the results database``, ``directory D: name``,
    ``file F: name``; ``given``: the same without the run's name), what ``--baseline`` was given as
    (``form``, one of ``BASELINE_FORMS``), and its log and database id (a run is never its own baseline)."""

    key: tuple
    time_mean_ms: float
    source: str
    form: str = "file"
    given: str = ""
    log: str | None = None
    run_id: int | None = None

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "given_as": self.form,
            "log": self.log,
            "run_id": self.run_id,
        }


@dataclass(frozen=True)
class Verdict:
    against: str  # "published" | "baseline" | "run" (the run has no result to compare)
    # pass | regress | not_compared, or (against "run") the run's results status: failed, ...
    outcome: str
    # the run's throughput / the reference's (reference step time / run step time)
    ratio: float | None
    reference_ms: float | None
    detail: str
    baseline: Baseline | None = None  # against "baseline": the baseline run it was compared with
    # against "baseline": "configuration", or "direct" (the one run given)
    matched: str | None = None
    # with baselines given: no baseline run of the run's configuration was among them, so the run is
    # outside the question ``--baseline`` asked (shown, never deciding the exit status)
    outside: bool = False


def key_of(result: RunResult) -> tuple:
    c = result.context
    return (c.workload, c.size, c.gpu, c.dtype, c.gpus, c.scaling)


def _key_from_row(row: dict[str, Any]) -> tuple:
    return tuple(
        row.get(k) if k != "gpus" or row.get(k) is None else int(row[k]) for k in KEY_FIELDS
    )


def load_baselines(path: str) -> list[Baseline]:
    """A JSON file written by ``llmb results --format json`` (a list of rows,
    or one row). Only successful rows with a step time, and nothing in doubt, count. A row's
    ``log`` names its run (its ``run_id`` is of the database that wrote the
    file, maybe another's, so it does not)."""
    return [
        Baseline(
            _key_from_row(item),
            float(item["time_mean_ms"]),
            f"file {path}: {item.get('filename')}",
            "file",
            f"file {path}",
            item.get("log") if isinstance(item.get("log"), str) else None,
        )
        for item in read_rows(path, "the baseline")
        if item.get("status") == "success" and item.get("time_mean_ms") and not item.get("doubts")
    ]


def baseline_of(
    result: RunResult, source: str, form: str, given: str, run_id: int | None = None
) -> Baseline:
    """A successful run's result as a baseline."""
    return Baseline(
        key_of(result), result.stats.time_mean_ms, source, form, given, result.log, run_id
    )


def _same_file(a: str, b: str) -> bool:
    import os

    return a == b or os.path.realpath(a) == os.path.realpath(b)


def is_itself(baseline: Baseline, result: RunResult, run_id: int | None) -> bool:
    """The baseline is the run: the same log, or the same database id."""
    if run_id is not None and baseline.run_id == run_id:
        return True
    return (
        baseline.log is not None and result.log is not None and _same_file(baseline.log, result.log)
    )


def judge_baseline(
    result: RunResult,
    baselines: list[Baseline],
    threshold: float,
    run_id: int | None = None,
    direct: bool = False,
) -> Verdict:
    """The run against the baseline of its configuration (the first one that is not the run itself).
    ``direct`` (one baseline run given for one run): where the configurations do not match (a log that
    names none, as torchtitan's, or two different ones), the two are compared anyway, labelled so."""
    if result.context.doubts:  # which configuration's baseline it is, is what is in doubt
        return Verdict(
            "baseline",
            NOT_COMPARED,
            None,
            None,
            "not compared: " + "; ".join(result.context.doubts),
        )
    others = [b for b in baselines if not is_itself(b, result, run_id)]
    if result.context.workload is not None:
        matching = [b for b in baselines if b.key == key_of(result)]
        usable = [b for b in matching if b in others]
        if usable:
            return _baseline_verdict(result, usable[0], "configuration", threshold)
        if matching:
            return Verdict("baseline", NOT_COMPARED, None, None, SELF, matching[0])
    if direct and len(baselines) == 1:
        if not others:
            return Verdict("baseline", NOT_COMPARED, None, None, SELF, baselines[0])
        return _baseline_verdict(result, others[0], "direct", threshold)
    given = ", ".join(dict.fromkeys(b.given for b in baselines if b.given)) or "the baseline"
    if result.context.workload is None:
        why = (
            f"this run's log does not say which configuration it ran, so no baseline run in {given} matches "
            f"it; one baseline run given for one run is compared directly"
        )
    else:
        why = f"no baseline run of this configuration in {given}"
    # a run of a known configuration no baseline has is outside the question; one whose configuration is
    # unknown may be of the baseline's, so it stays in it (not compared)
    return Verdict(
        "baseline", NOT_COMPARED, None, None, why, outside=result.context.workload is not None
    )


def _baseline_verdict(
    result: RunResult, baseline: Baseline, matched: str, threshold: float
) -> Verdict:
    source = baseline.source if matched == "configuration" else f"{baseline.source}: {DIRECT}"
    verdict = _judge(result, "baseline", baseline.time_mean_ms, source, threshold)
    return Verdict(
        verdict.against,
        verdict.outcome,
        verdict.ratio,
        verdict.reference_ms,
        verdict.detail,
        baseline,
        matched,
    )


def _outcome(ratio: float, threshold: float) -> str:
    return "pass" if ratio >= threshold or math.isclose(ratio, threshold) else "regress"


def _judge(
    result: RunResult, against: str, reference_ms: float | None, source: str, threshold: float
) -> Verdict:
    if reference_ms is None:
        return Verdict(
            against, NOT_COMPARED, None, None, f"no {against} figure for this configuration"
        )
    ratio = reference_ms / result.stats.time_mean_ms
    return Verdict(
        against,
        _outcome(ratio, threshold),
        ratio,
        reference_ms,
        f"{ratio:.1%} of {against} throughput ({source}; pass at {threshold:.0%})",
    )


def stored_figure(result: RunResult) -> Figure | Missing:
    """The published figure the run's analysis chose by the one reference policy (what ``llmb results``
    shows and ``llmb compare`` judges by default)."""
    from llmb.results.references import unknown

    if (why := unknown(result.context)) is not None:
        return Missing(AUTO, why)
    if not result.reference:
        return Missing(AUTO, "no published figure for this configuration")
    return Figure(**result.reference)


def against_name(figure: Figure | Missing) -> str:
    """The AGAINST column: ``published`` for the run's own recipe, else the source's name (``nemo2``,
    ``summary``; ``auto`` where the policy found none); with the GPU type the figure is published for
    where it is another's (``published (h100)`` for an H200 run, which runs the H100's recipes)."""
    name = "published" if figure.source == DEFAULT_SOURCE else figure.source
    of_gpu = getattr(figure, "of_gpu", None)
    return f"{name} ({of_gpu})" if of_gpu else name


def judge_published(result: RunResult, figure: Figure | Missing, threshold: float) -> Verdict:
    """The run against a published figure: by step time where both ran the same global batch on the
    same GPU count, else by tokens/s per GPU, else by TFLOP/s per GPU (the detail names the measure and
    the other batch). A figure at another batch is never a step-time reference (``reference_ms`` None).
    TFLOP/s per GPU is judged only where the run and the figure name the same container release: across
    releases (or where either is unrecorded) it is shown with both containers and not judged, and a run
    that has no other measure is not compared."""
    against = against_name(figure)
    if isinstance(figure, Missing):
        return Verdict(against, NOT_COMPARED, None, None, figure.reason)
    stats, context = result.stats, result.context
    same_batch = (
        figure.same_batch
        and figure.gpus == context.gpus
        and (figure.gbs is None or context.gbs is None or figure.gbs == context.gbs)
    )
    reference_ms = figure.step_time_ms if same_batch else None
    # TFLOP/s per GPU is a measure only within one container release: across releases the framework's
    # FLOP count can change, so it is shown beside the verdict, never judged (docs/verdicts.md)
    same = same_container(context.container, figure.container)
    shown = _tflops_shown(stats.tflops_mean, figure, context.container) if same is False else ""
    if reference_ms is not None:
        ratio, measure = reference_ms / stats.time_mean_ms, "step time"
    elif figure.tokens_per_s and result.tokens_per_s and figure.gpus and context.gpus:
        ratio = (result.tokens_per_s / context.gpus) / (figure.tokens_per_s / figure.gpus)
        measure = f"tokens/s per GPU (GBS {context.gbs} vs {figure.gbs})"
    elif figure.tflops_per_gpu and stats.tflops_mean and same:
        ratio, measure = stats.tflops_mean / figure.tflops_per_gpu, "TFLOP/s per GPU"
    elif figure.tflops_per_gpu and stats.tflops_mean:
        return Verdict(
            against,
            NOT_COMPARED,
            None,
            None,
            f"{figure.describe()} can be compared with this run only by TFLOP/s per GPU: "
            f"{_tflops_shown(stats.tflops_mean, figure, context.container)}",
        )
    else:
        return Verdict(
            against,
            NOT_COMPARED,
            None,
            None,
            f"{figure.describe()} gives no measure this run has",
        )
    label = "" if figure.source == DEFAULT_SOURCE else f"{figure.label}: "
    return Verdict(
        against,
        _outcome(ratio, threshold),
        ratio,
        reference_ms,
        f"{ratio:.1%} by {measure} ({label}{figure.describe()}; pass at {threshold:.0%})"
        + (f"; {shown}" if shown else ""),
    )


def _across(run: str | None, figure: str | None) -> str:
    """Why TFLOP/s per GPU is no measure between the run and the figure, naming both containers."""
    theirs = f"nemo:{figure}" if figure else "an unrecorded container"
    ours = f"nemo:{release_text(run)}" if release_text(run) else "an unrecorded container"
    return (
        f"the figure was measured in {theirs}, the run in {ours}, and the framework's FLOP count "
        f"can differ between container releases"
        if figure or run
        else "neither the figure nor the run records its container"
    )


def _tflops_shown(tflops: float | None, figure: Figure, run: str | None) -> str:
    """``TFLOP/s per GPU 1,250 vs the figure's 1,306, shown, not judged: ...`` for a figure of another (or an
    unknown) container; "" where either has no TFLOP/s."""
    if not tflops or not figure.tflops_per_gpu:
        return ""
    return (
        f"TFLOP/s per GPU {tflops:,.0f} vs the figure's {figure.tflops_per_gpu:,.0f}, shown, not judged: "
        f"{_across(run, figure.container)}"
    )


def compare(
    result: RunResult,
    baselines: list[Baseline] | None,
    threshold: float,
    figure: Figure | Missing | None = None,
    *,
    run_id: int | None = None,
    direct: bool = False,
) -> list[Verdict]:
    """One verdict per reference; a run without a result is judged by its status, in the words
    ``llmb results`` uses (a cancelled run is ``cancelled``, one too short for the window ``too_short``).
    ``figure``: the published figure to judge against (``references.lookup``); None: the run's own
    recipe figure as stored with its result. ``run_id``: the run's database id, and ``direct``: one
    baseline run given for this one run (``judge_baseline``)."""
    if result.status != "success" or not result.stats or not result.stats.time_mean_ms:
        outcome = result.status if result.status != "success" else "no_data"
        # with baselines: a run of a configuration none of them has is outside the question asked
        outside = (
            baselines is not None
            and not (direct and len(baselines) == 1)
            and result.context.workload is not None
            and not any(b.key == key_of(result) for b in baselines)
        )
        return [
            Verdict(
                "run",
                outcome,
                None,
                None,
                f"{result.status}: {result.reason or 'no step time'}",
                outside=outside,
            )
        ]
    verdicts = [
        judge_published(result, figure if figure is not None else stored_figure(result), threshold)
    ]
    if baselines is not None:
        verdicts.append(judge_baseline(result, baselines, threshold, run_id, direct))
    return verdicts


# How a run answers the comparison asked for (``answer``).
PASSED, REGRESSED, NO_RESULT, OUTSIDE = "pass", "regress", "no_result", "outside"


def answer(verdicts: list[Verdict], asked: str) -> str:
    """How a run answers the comparison asked for: ``asked`` is ``baseline`` where ``--baseline`` was given
    (its comparisons are the question, and decide ``llmb compare``'s exit status), else ``published``.
    ``pass``, ``regress``, ``not_compared``, ``no_result`` (the run did not succeed: its verdict is its
    status), or ``outside``: with a baseline, no baseline run of its configuration was given, so the run
    is not part of the question (an unrelated run that failed earlier, a run of another configuration)."""
    if verdicts and verdicts[0].against == "run":
        return OUTSIDE if verdicts[0].outside and asked == "baseline" else NO_RESULT
    wanted = (
        [v for v in verdicts if v.against == "baseline"] if asked == "baseline" else verdicts[:1]
    )
    if not wanted:
        return NOT_COMPARED
    verdict = wanted[0]
    if verdict.outside:
        return OUTSIDE
    return verdict.outcome if verdict.outcome in (PASSED, REGRESSED) else NOT_COMPARED
