"""``llmb compare``: results against the published numbers and a baseline."""

from __future__ import annotations

import os
import re

import click

from llmb.cli import get_host
from llmb.cli.output import emit_json, render_table, terminal_safe
from llmb.cli.results_cmd import display_name, open_store, select, selection_options
from llmb.errors import UsageError
from llmb.figures import counted, figure


def _fmt(value: float | None, digits: int) -> str:
    return figure(value, digits)


def _mfu(at_dtype: float | None, at_bf16: float | None, dtype: str | None) -> str:
    """``MFU 41.20%``, and against the BF16 peak where the dtype is another (``20.60% of the BF16 peak``)."""
    text = f"MFU {_fmt(at_dtype, 2)}%"
    if dtype != "bf16" and at_bf16 is not None:
        text += f" ({_fmt(at_bf16, 2)}% of the BF16 peak)"
    return text


BASELINE_FORMS_TEXT = (
    "--baseline takes a directory of runs (as llmb results DIR reads it), a results file (llmb results "
    "--format json > FILE), an llmb job id (what llmb run prints and llmb status lists, e.g. local-575dba, or "
    "the Slurm job id of one) or a results-database id (the run_id of llmb results --from-db --json)"
)
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_DIGITS = re.compile(r"[0-9]+")


def _successful(result) -> bool:
    """A run that can be a baseline: it succeeded, has a step time, and nothing of what it ran is in
    doubt (``RunContext.doubts``)."""
    return (
        result.status == "success"
        and bool(result.stats and result.stats.time_mean_ms)
        and not result.context.doubts
    )


def _collected(ctx, path: str, db_path, window_text, gpu) -> list:
    """(location, result, run id) of every run under ``path``, read as the runs compared are."""
    return select(ctx, [path], window_text, None, gpu, None, None, False, db_path, False)


def _job_of(spec: str):
    """(job, run directory, words) of the llmb job ``spec`` names: its id, or (digits) the Slurm job id
    of one of its attempts (that attempt's run directory); None when it names none."""
    from llmb.runs.jobs import BrokenJob, Job, list_job_ids, read_job

    if not _JOB_ID.fullmatch(spec) or spec.strip(".") == "":
        return None
    found = read_job(spec)
    if isinstance(found, Job):
        return found, found.run_dir, f"job {found.id}"
    if isinstance(found, BrokenJob):
        raise UsageError(f"--baseline {spec}: job {spec} cannot be used: {found.problem}.")
    if _DIGITS.fullmatch(spec):
        for job_id in list_job_ids():
            job = read_job(job_id)
            attempts = job.details.get("attempts") if isinstance(job, Job) else None
            for attempt in attempts if isinstance(attempts, list) else ():
                if isinstance(attempt, dict) and str(attempt.get("slurm_id")) == spec:
                    return (
                        job,
                        attempt.get("run_dir") or job.run_dir,
                        f"job {job.id} (Slurm job {spec})",
                    )
    return None


def _baselines(ctx, spec: str | None, db_path: str | None, window_text=None, gpu=None):
    """The baselines ``--baseline SPEC`` names, tried in this order: an existing directory (its successful
    runs), an existing file (a results JSON), an llmb job id or the Slurm job id of one (the job's run), all
    digits (a results-database id). Digits that are both a Slurm job id and a database id are the job, and a
    note says so."""
    from llmb.results.compare import baseline_of, load_baselines

    if spec is None:
        return None
    if os.path.isdir(spec):
        found = _collected(ctx, spec, db_path, window_text, gpu)
        good = [(where, result, run_id) for where, result, run_id in found if _successful(result)]
        if not good:
            statuses = (
                ", ".join(
                    sorted(
                        {
                            result.status
                            + (
                                " but not judged (llmb results says why)"
                                if result.context.doubts
                                else ""
                            )
                            for _, result, _ in found
                        }
                    )
                )
                or "none found"
            )
            raise UsageError(
                f"--baseline {spec}: the directory holds no successful run to compare with ({len(found)} "
                f"run{'s' if len(found) != 1 else ''}: {statuses}); {BASELINE_FORMS_TEXT}."
            )
        return [
            baseline_of(
                result,
                f"directory {spec}: {where.short_name}",
                "directory",
                f"directory {spec}",
                run_id,
            )
            for where, result, run_id in good
        ]
    if os.path.isfile(spec):
        return load_baselines(spec)
    if os.path.exists(spec):
        raise UsageError(
            f"--baseline {spec}: neither a directory nor a regular file; {BASELINE_FORMS_TEXT}."
        )
    job = _job_of(spec)
    if job is not None:
        job, run_dir, words = job
        if _DIGITS.fullmatch(spec):
            _note_ambiguous(spec, words, db_path)
        if not os.path.isdir(run_dir):
            raise UsageError(f"--baseline {spec}: {words}'s run directory {run_dir} is gone.")
        found = _collected(ctx, run_dir, db_path, window_text, gpu)
        good = [(where, result, run_id) for where, result, run_id in found if _successful(result)]
        if not good:
            why = (
                "; ".join(
                    result.status + (f": {result.reason}" if result.reason else "")
                    for _, result, _ in found
                )
                or f"no run in {run_dir}"
            )
            raise UsageError(
                f"--baseline {spec}: {words} has no successful run to compare with ({why}); pick a "
                f"job that succeeded (llmb status lists them)."
            )
        return [
            baseline_of(
                result,
                words if len(good) == 1 else f"{words}: {where.short_name}",
                "job",
                words,
                run_id,
            )
            for where, result, run_id in good
        ]
    if _DIGITS.fullmatch(spec):
        store = open_store(db_path, required=True)
        stored = store.get(int(spec)) if len(spec) < 19 else None  # a longer number is no id
        if stored is None:
            raise UsageError(
                f"--baseline {spec}: no llmb job has Slurm job id {spec}, and the results database has "
                f"no run {spec} (llmb results --from-db --json lists the run ids); {BASELINE_FORMS_TEXT}."
            )
        result = stored.result
        if not _successful(result):
            raise UsageError(
                f"--baseline {spec}: run {spec} in the results database did not succeed "
                f"({result.status}); pick a successful run."
            )
        words = f"run {spec} in the results database"
        return [baseline_of(result, words, "database", words, stored.id)]
    raise UsageError(
        f"--baseline {spec}: no such directory, file or llmb job; {BASELINE_FORMS_TEXT}."
    )


def _note_ambiguous(spec: str, words: str, db_path: str | None) -> None:
    """Digits that name a job's Slurm job and a database run: the job is taken; say so, and how to take the run."""
    from llmb.results.store import StoreError

    store = open_store(db_path, required=False)
    try:
        stored = store.get(int(spec)) if store is not None and len(spec) < 19 else None
    except StoreError:  # a database that cannot be read holds no rival to the job
        stored = None
    if stored is None:
        return
    where = os.path.dirname(stored.result.log) if stored.result.log else None
    other = f" (to compare with that run, give its directory: --baseline {where})" if where else ""
    from llmb.cli.output import echo_err

    echo_err(
        f"llmb: note: --baseline {spec} is {words} and also run {spec} in the results database; "
        f"comparing with the job{other}."
    )


@click.command("compare")
@selection_options
@click.option(
    "--baseline",
    "baseline_spec",
    metavar="DIR|FILE|JOB|ID",
    help="What to compare with besides the published figure, tried in this order: a directory of "
    "runs; a results file (llmb results --format json); an llmb job id (llmb status lists them) or "
    "a Slurm job id of one; a results-database id (digits that are also a job's Slurm job id are "
    "the job, and a note says so). Runs are matched by configuration; a run is never compared "
    "with itself; one baseline run given for one run is compared directly.",
)
@click.option(
    "--threshold",
    type=click.FloatRange(0, 1, min_open=True),
    default=0.95,
    show_default=True,
    help="Pass when throughput is at least this fraction of the reference's.",
)
@click.option(
    "--reference",
    "reference",
    metavar="SOURCE",
    default="auto",
    show_default=True,
    help="Which published figure: auto (the run's own recipe's figure, else another public document's "
    "for exactly its configuration and global batch size, named in the output: what results, report "
    "and certify use too), recipe (the run's own recipe document only), another variant's recipe "
    "(Llama 3.1: nemo2), or summary (the framework's per-release performance summary).",
)
@click.option(
    "--allow-missing",
    is_flag=True,
    help="Exit 0 (not 3) when some run could not be compared with anything.",
)
@click.option(
    "--full-names",
    is_flag=True,
    help="Show each run's log path instead of its experiment's short name.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def compare_command(
    ctx,
    dirs,
    window_text,
    workload,
    gpu,
    dtype,
    since,
    from_db,
    db_path,
    rescan,
    baseline_spec,
    threshold,
    reference,
    allow_missing,
    full_names,
    as_json,
):
    """Compare each run with the published recipe's step time for its exact
    configuration (workload, size, GPU type, dtype, GPU count, scaling) and,
    with --baseline, with a baseline run of the same configuration (never
    the run itself). A run passes at --threshold of
    the reference's throughput (default 95%, the cluster-acceptance rule of
    the tool llmb replaces). The GPU type is what the run recorded, else
    --gpu, else the cluster file's, and the table says which.

    Exit codes, from the comparisons asked for (with --baseline, those
    with the baseline, the published figure's shown beside; else those with
    the published figures): 1 when any run regressed or did not succeed;
    else 3 when some run could not be compared (a proxy, an unknown GPU
    type, no published figure: the table says why) unless --allow-missing;
    else 0. With --baseline, a run of a configuration no baseline run has (an
    unrelated run in the install) is listed but outside the question.
    Nothing an earlier command assumed changes a verdict."""
    from llmb.recipes.references import all_sources
    from llmb.results import references
    from llmb.results.compare import NO_RESULT, NOT_COMPARED, OUTSIDE, REGRESSED, answer, compare

    host = get_host(ctx)
    workloads = host.workloads()
    valid = all_sources(workloads)
    if reference not in valid:
        raise UsageError(
            f"--reference {reference}: unknown source of published figures; valid: "
            f"{', '.join(valid)}."
        )
    baselines = _baselines(ctx, baseline_spec, db_path, window_text, gpu)
    picked = select(ctx, dirs, window_text, workload, gpu, dtype, since, from_db, db_path, rescan)
    # configurations need not match
    direct = baselines is not None and len(baselines) == 1 and len(picked) == 1
    asked = "baseline" if baselines is not None else "published"
    report = []
    for where, result, run_id in picked:
        # auto by default: the same lookup, on the same context, that chose the figure results shows
        figure = references.lookup(
            workloads.get(result.context.workload or ""), result.context, reference
        )
        verdicts = compare(result, baselines, threshold, figure, run_id=run_id, direct=direct)
        report.append((display_name(where, full_names), result, run_id, verdicts, figure))
    answers = [answer(verdicts, asked) for _, _, _, verdicts, _ in report]
    any_regression = any(a in (REGRESSED, NO_RESULT) for a in answers)
    not_compared = answers.count(NOT_COMPARED)
    if report and answers.count(OUTSIDE) == len(answers):  # nothing answered the question asked
        not_compared = len(answers)
    if as_json:
        emit_json(
            [
                {
                    "filename": name,
                    "run_id": run_id,
                    "status": result.status,
                    "gpu": result.context.gpu,
                    "gpu_source": result.context.gpu_source,
                    # the settings that differ from the official configuration (--set, or the layout its
                    # name gives); its published figure is the official configuration's
                    "tuned": result.context.tuned,
                    "time_mean_ms": result.stats.time_mean_ms if result.stats else None,
                    "tokens_per_s": result.tokens_per_s,
                    "mfu_pct": result.mfu_pct,
                    "mfu_bf16_pct": result.mfu_bf16_pct,
                    "published": None
                    if result.reference_step_time_ms is None
                    else {
                        "step_time_ms": result.reference_step_time_ms,
                        "tokens_per_s": result.reference_tokens_per_s,
                        "mfu_pct": result.reference_mfu_pct,
                        "mfu_bf16_pct": result.reference_mfu_bf16_pct,
                        "source": result.reference_source,
                    },
                    "reference": _figure_json(figure),
                    # how the run answers the comparison asked for (with --baseline, the baseline's;
                    # else the published figure's): pass, regress, not_compared, no_result, outside
                    "answer": answer(verdicts, asked),
                    "verdicts": [
                        {
                            "against": v.against,
                            "outcome": v.outcome,
                            "ratio": v.ratio,
                            "reference_ms": v.reference_ms,
                            "detail": v.detail,
                            "baseline": None
                            if v.baseline is None
                            else {**v.baseline.to_dict(), "matched": v.matched},
                        }
                        for v in verdicts
                    ],
                }
                for name, result, run_id, verdicts, figure in report
            ]
        )
    elif not report:
        click.echo("No runs found.")
    else:
        from llmb.cli.results_cmd import table_name

        names = [table_name(where, full_names) for where, _, _ in picked]
        click.echo(
            terminal_safe(
                _render(
                    report, threshold, names, [where for where, _, _ in picked], full_names, asked
                )
            )
        )
    if any_regression:
        ctx.exit(1)
    if not_compared and not allow_missing:
        if not as_json:
            from llmb.cli.output import echo_err

            echo_err(
                f"llmb: {not_compared} run{'s' if not_compared > 1 else ''} could not be compared with "
                f"anything (the reasons are above); exit 3. --allow-missing accepts that."
            )
        ctx.exit(3)
    ctx.exit(0)


def _figure_json(figure) -> dict:
    from dataclasses import asdict

    from llmb.recipes.references import Missing

    if isinstance(figure, Missing):
        return {"source": figure.source, "figure": None, "reason": figure.reason}
    return {"source": figure.source, "figure": asdict(figure), "reason": None}


def gpu_label(context) -> str:
    """The run's GPU type and where it came from: ``h100 (recipe.json)``, ``h100 (--gpu)``, ``unknown``."""
    if context.gpu is None:
        return "unknown"
    where = {"recipe": "recipe.json", "provenance": "provenance.json"}.get(
        context.gpu_source, context.gpu_source
    )
    return f"{context.gpu} ({where})" if where else context.gpu


def _tally(answers: list[str], statuses: list[str]) -> str:
    """``9 passed, 1 regressed, 2 had no result (failed, too_short), 0 not compared``: a regression and a
    run without a result are different news, and are counted apart."""
    from llmb.results.compare import NO_RESULT, NOT_COMPARED

    no_result = sorted(s for a, s in zip(answers, statuses, strict=True) if a == NO_RESULT)
    kinds = ", ".join(dict.fromkeys(no_result))
    return (
        f"{answers.count('pass')} passed, {answers.count('regress')} regressed, "
        f"{len(no_result)} had no result{f' ({kinds})' if kinds else ''}, "
        f"{answers.count(NOT_COMPARED)} not compared"
    )


def closing_lines(runs: list[list], asked: str, threshold: float) -> list[str]:
    """The tally of the runs compared, each run counted once (``runs``: each run's verdicts): against
    the published figures; with --baseline, against the baseline first (its comparisons decide the exit
    status) and the runs no baseline run's configuration matches counted apart, then the published
    figures' tally, shown beside."""
    from llmb.results.compare import OUTSIDE, answer

    statuses = [vs[0].outcome if vs and vs[0].against == "run" else "" for vs in runs]
    published = [answer(vs, "published") for vs in runs]
    if asked != "baseline":
        return [
            f"{counted(len(runs), 'run')}: {_tally(published, statuses)} (threshold {threshold:.0%})."
        ]
    against = [answer(vs, "baseline") for vs in runs]
    outside = against.count(OUTSIDE)
    inside = [(a, s) for a, s in zip(against, statuses, strict=True) if a != OUTSIDE]
    tally = _tally([a for a, _ in inside], [s for _, s in inside])
    apart = (
        f"; {counted(outside, 'other run')} with no baseline run of "
        f"{'its' if outside == 1 else 'their'} configuration"
        if outside
        else ""
    )
    return [
        f"Against the baseline, {counted(len(inside), 'run')}: {tally}{apart} (threshold "
        f"{threshold:.0%}; these decide the exit status).",
        f"Against the published figures, {counted(len(runs), 'run')}: {_tally(published, statuses)}.",
    ]


def _render(
    report: list,
    threshold: float,
    names: list[str],
    places: list,
    full_names: bool = False,
    asked: str = "published",
) -> str:
    """The comparison table (each run by its short name and job), the verdicts' details under it, what was
    measured against what was published, and the tally."""
    from llmb.cli.output import Column, experiment_column, fit_text
    from llmb.cli.results_cmd import grouped_notes, job_label, note_labels
    from llmb.recipes.references import Figure
    from llmb.results.experiments import JobIds

    job_ids = JobIds()
    runs = [job_label(item[1], where, job_ids) for item, where in zip(report, places, strict=True)]
    labels = note_labels(names, [result for _, result, _, _, _ in report], places, runs)
    rows, details = [], []
    for shown, label, run, (_, result, _, verdicts, _) in zip(
        names, labels, runs, report, strict=True
    ):
        for v in verdicts:
            step = result.stats.time_mean_ms if result.stats and result.stats.time_mean_ms else None
            rows.append(
                [
                    shown,
                    run,
                    gpu_label(result.context),
                    v.against,
                    v.outcome.upper(),
                    figure(step, 1),
                    figure(v.reference_ms, 1),
                    "-" if v.ratio is None else f"{v.ratio:.1%}",
                ]
            )
            if v.detail:
                detail = v.detail if v.against == "run" else f"against {v.against}: {v.detail}"
                details.append((label, detail))
    # AGAINST tells a run's rows apart (its published row, its --baseline row): kept where it does
    against = Column("AGAINST", drop=0 if len({row[3] for row in rows}) > 1 else 1)
    parts = [
        render_table(
            [
                experiment_column(full_names),
                "JOB",
                Column("GPU", drop=3),
                against,
                "OUTCOME",
                Column("STEP ms", drop=2),
                # the row's reference (AGAINST: a published figure or a baseline run) and the run's
                # speed as a share of it (its step time over the run's): a ratio, not a throughput
                Column("REF ms", drop=4),
                "VS REF",
            ],
            rows,
        )
    ]
    if details:
        parts.append("\n" + fit_text("\n".join(grouped_notes(details))))
    for label, (_, result, _, _, published) in zip(labels, report, strict=True):
        if not isinstance(published, Figure) or not (result.stats and result.stats.time_mean_ms):
            continue
        tuned = result.context.tuned
        measured = (
            f"\n{label}"
            + (f" tuned ({tuned})" if tuned else "")
            + f": measured {_fmt(result.stats.time_mean_ms, 1)} ms per step, "
            + f"{_fmt(result.tokens_per_s, 0)} tokens/s, "
        )
        dtype = result.context.dtype
        if published.source == "recipe":
            parts.append(
                measured
                + f"{_mfu(result.mfu_pct, result.mfu_bf16_pct, dtype)}; "
                + ("the official configuration's " if tuned else "")
                + f"{published.label} "  # published, or published (h100) for an H200 run
                + f"{_fmt(published.step_time_ms, 1)} ms, {_fmt(result.reference_tokens_per_s, 0)} tokens/s, "
                f"{_mfu(result.reference_mfu_pct, result.reference_mfu_bf16_pct, dtype)} ({published.describe()})"
            )
        else:
            parts.append(
                measured
                + f"{_fmt(result.stats.tflops_mean, 1)} TFLOP/s/GPU; {published.label}"
                + (" for the official configuration" if tuned else "")
                + f" {_fmt(published.tokens_per_s, 0)} tokens/s, {_fmt(published.tflops_per_gpu, 1)} "
                f"TFLOP/s/GPU ({published.describe()})"
            )
    parts.append(
        "\n" + "\n".join(closing_lines([vs for _, _, _, vs, _ in report], asked, threshold))
    )
    # the table fits already; the text is wrapped
    return parts[0] + "\n" + fit_text("\n".join(parts[1:]))
