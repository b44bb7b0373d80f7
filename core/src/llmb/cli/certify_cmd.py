"""``llmb certify``: run the published suite on a cluster, judge every workload, re-run one, show the verdict."""

from __future__ import annotations

from dataclasses import replace

import click
from click.core import ParameterSource

from llmb.cli import WholeHelpGroup, get_host
from llmb.cli.output import Column, echo_err, emit_json, render_table, say, terminal_safe
from llmb.cli.run_options import run_options
from llmb.cli.sweep_cmd import (
    checked_tasks,
    follow,
    following_options,
    show_planned,
    task_label,
)
from llmb.errors import UsageError
from llmb.figures import counted

SUITE_OPTIONS = ("gpu", "scale", "repeats", "profile_last", "suite_file")


def _given(ctx, names) -> list[str]:
    """The parameters among ``names`` given on the command line, as their flags."""
    flags = {param.name: param.opts[0] for param in ctx.command.params}
    return [
        flags[name]
        for name in names
        if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE
    ]


def _recorded(run_kw: dict) -> dict:
    """The run options worth recording with each task (unset ones are left out)."""
    return {k: v for k, v in run_kw.items() if v is not None and v is not False and v != ()}


def _status_text(verdict) -> str:
    from llmb.certify.gates import GATES, NA
    from llmb.certify.verdict import EXERCISED, configuration_label

    suite = verdict.suite
    rows = []
    for c in verdict.configurations:
        best = c.best
        cells = {g.name: g.cell for g in best.gates} if best else {}
        job = (
            "-"
            if best is None
            else best.job_id + (f" (of {len(c.runs)} runs)" if len(c.runs) > 1 else "")
        )
        rows.append(
            [
                c.task.workload,
                configuration_label(c.task),
                job,
                *(cells.get(name, "-") for name in GATES),
                c.verdict.upper(),
            ]
        )
    lines = [
        render_table(
            [
                # what the configuration is (its size, GPU type, dtype, GPU count) and the gates that
                # decide (step CV, performance) go last; the run's own health gates first
                "WORKLOAD",
                Column("CONFIGURATION", squeeze=16, cut="name", keep=5),
                Column("JOB", squeeze=12, drop=1),
                Column("STATUS", drop=2),
                Column("LOSS", drop=4),
                Column("TFLOPS", drop=3),
                "STEP CV",
                "PERFORMANCE",
                "VERDICT",
            ],
            rows,
        ),
        "",
    ]
    workloads = verdict.workloads()
    for config in verdict.configurations:
        best = config.best
        failed = [g for g in best.gates if g.outcome == "fail"] if best else []
        if config.verdict == "fail":
            # a failed run: why it failed
            shown = [g for g in failed if g.name == "status"] or failed
            why = best.problem or "; ".join(f"{g.name}: {g.detail or g.value}" for g in shown)
            lines.append(f"{config.task.workload} {configuration_label(config.task)}: {why}")
        elif config.verdict == "not run":
            lines.append(
                f"{config.task.workload} {configuration_label(config.task)}: no job was submitted"
            )
        # a suite file's GPU count its recipe does not test: said so, never called validated
        if config.untested:
            lines.append(
                f"{config.task.workload} {configuration_label(config.task)}: {config.untested}"
            )
    failing = [w for w, v in workloads.items() if v == "fail"]
    pending = [w for w, v in workloads.items() if v == "pending"]
    for w in failing:
        lines.append(f"re-run {w} alone: llmb certify --rerun {w} --suite {suite.id}")
    if any(
        g.outcome == NA and g.name == "performance"
        for c in verdict.configurations
        if c.best
        for g in c.best.gates
    ):
        lines.append(
            "performance n/a: proxy runs and configurations without a published figure are not compared; "
            "certifying a cluster needs full-size runs of the published suite."
        )
    lines += [f"note: {note}" for note in suite.notes]
    if verdict.passed:
        lines.append(f"{suite.id}: PASS, every workload passed ({', '.join(workloads)}).")
    elif verdict.verdict == EXERCISED:
        proxies = [w for w, v in workloads.items() if v == EXERCISED]
        full = [w for w, v in workloads.items() if v != EXERCISED]
        which = (
            f"; {', '.join(full)} passed at full size, {', '.join(proxies)} ran as proxies"
            if full
            else ""
        )
        lines.append(
            f"{suite.id}: EXERCISED (proxy: certifies nothing), every workload ran and met its gates "
            f"({', '.join(workloads)}){which}."
        )
    elif pending and not failing:
        lines.append(
            f"{suite.id}: PENDING, {', '.join(pending)} still running (llmb certify status --suite "
            f"{suite.id} again later)."
        )
    else:
        lines.append(
            f"{suite.id}: FAIL ({', '.join(failing)} failed"
            + (f"; {', '.join(pending)} still running" if pending else "")
            + ")."
        )
    from llmb.cli.output import fit_text

    # the table fits already; the text is wrapped
    return lines[0] + "\n" + fit_text("\n".join(lines[1:]))


def show_status(ctx, suite, as_json: bool) -> None:
    """Print the suite's verdict; exit 0 when every workload passed, or when every workload of a proxy
    suite was exercised (ran and met its gates), else 1.

    Exercised exits 0, like pass: a proxy suite is how a pipeline smoke-tests the tool, the scheduler and
    the nodes, and that test succeeded. What it certifies is said in words, never by the exit code alone:
    the verdict line (``EXERCISED (proxy: certifies nothing)``, never ``PASS``) and the JSON's ``verdict``
    ("exercised"), ``passed`` and ``certified`` (false). A proxy run is asked for explicitly (``--proxy``,
    ``--layers``, a suite file's), so a pipeline that gates a certification on the exit code does not get
    one by accident; one that must tell them apart reads ``certified``."""
    from llmb.certify.verdict import MET, judge_suite

    verdict = judge_suite(get_host(ctx), suite)
    if as_json:
        emit_json(verdict.to_dict())
    else:
        click.echo(terminal_safe(_status_text(verdict)))
    ctx.exit(0 if verdict.verdict in MET else 1)


def _judging(host, checked) -> dict:
    """The figure a run of a checked task will be judged by, as its resolved recipe finds it by the one
    reference policy (``llmb.runs.sweeps.judging_figure``: what plan shows and results, compare and report
    judge by): its source, document (table and row), container, GBS, GPU count and step time; or why there
    is none (``missing``), or that a proxy is not compared."""
    from llmb.recipes.references import Missing
    from llmb.runs.sweeps import judged_by, judging_figure

    if checked.task.options.get("proxy") or checked.task.options.get("layers"):
        return {"text": "proxy run: not compared with published figures", "missing": "proxy"}
    r = checked.planned.plan.recipe
    figure = judging_figure(
        host.workload(r.workload), r.variant, r.size, r.gpu, r.dtype, r.gpus, r.scaling
    )
    if isinstance(figure, Missing):
        return {
            "text": f"not judged by a published figure: {figure.reason}",
            "missing": figure.reason,
        }
    return {
        "text": judged_by(figure),
        "source": figure.source,
        "label": figure.label,
        "document": figure.describe(),
        "container": figure.container,
        "gbs": figure.gbs,
        "gpus": figure.gpus,
        "step_time_ms": figure.step_time_ms,
    }


def _judged_text(checked, judged: list[dict]) -> str:
    """--dry-run: what each task of the suite will be judged by, numbered as the table."""
    from llmb.cli.output import fit_text

    lines = [
        "",
        "judged by (the figure llmb plan shows; results, compare, report and certify judge each run by it):",
    ]
    # the numbers padded alike: every task's text starts in one column
    digits = len(str(len(checked)))
    lines += [
        f"{str(n).ljust(digits)}  {task_label(c)}: {j['text']}"
        for n, (c, j) in enumerate(zip(checked, judged, strict=True), start=1)
    ]
    return fit_text("\n".join(lines))


def resolved(checked):
    """The task with what its recipe resolved to in place of defaults (size, dtype, GPU type, variant)."""
    recipe = checked.planned.plan.recipe
    task = checked.task
    return replace(
        task,
        size=task.size or recipe.size,
        dtype=task.dtype or recipe.dtype,
        gpu=task.gpu or recipe.gpu,
        variant=task.variant or recipe.variant,
    )


def _new_suite_tasks(ctx, host, gpu, scale, repeats, profile_last, suite_file, run_kw):
    """(tasks, gpu, scale, source, notes) of a new suite."""
    from llmb.certify import suite as suites
    from llmb.cli.run_options import parameter_names
    from llmb.runs.sweeps import tasks_from_file

    proxy = bool(run_kw.get("proxy") or run_kw.get("layers"))
    if suite_file:
        extra = _given(ctx, ("scale", "repeats"))
        if extra:
            raise UsageError(
                f"a suite file gives its own scales and repeats; drop {', '.join(extra)} (or leave out "
                f"--file for the published suite)."
            )
        tasks, notes, source = (
            tasks_from_file(suite_file, host.workloads(), parameter_names()),
            [],
            suite_file,
        )
    else:
        if not gpu:
            raise UsageError(
                "llmb certify needs the cluster's GPU type: --gpu h100 (or GPU_TYPE); the suite is every "
                "published configuration of that type."
            )
        if proxy and scale is None:
            raise UsageError(
                "a proxy suite runs every configuration on --scale ranks; give them, e.g. --scale 2."
            )
        scale = scale or suites.EXEMPLAR_SCALE
        tasks, notes = suites.published_suite(host.workloads(), gpu, scale, repeats, proxy)
        source = "published"
    return suites.with_options(tasks, _recorded(run_kw), gpu, profile_last), scale, source, notes


@click.group("certify", cls=WholeHelpGroup, invoke_without_command=True)
@click.option("--gpu", envvar="GPU_TYPE", help="The cluster's GPU type, e.g. h100. [env: GPU_TYPE]")
@click.option(
    "--scale",
    type=click.IntRange(min=1),
    help="GPUs per run (default 512, the Exemplar scale); a proxy suite's ranks per run.",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Runs of each configuration.",
)
@click.option(
    "--profile-last",
    is_flag=True,
    help="Profile the last repeat of each configuration (no other run is).",
)
@click.option(
    "--file",
    "suite_file",
    type=click.Path(dir_okay=False),
    help="A suite file (the sweep-file format) instead of the published suite.",
)
@click.option(
    "--rerun",
    metavar="WORKLOAD",
    help="Re-run this workload of the suite alone (--suite; default: the last).",
)
@click.option(
    "--suite", "suite_id", metavar="ID", help="With --rerun: the suite (default: the most recent)."
)
@click.option(
    "--preflight",
    "preflight_nodes",
    type=click.IntRange(min=1),
    metavar="NODES",
    help="First run llmb preflight over NODES nodes with these cluster options, and keep every run of the "
    "suite off the nodes it flags (--exclude-from its file).",
)
@run_options
@following_options("suite")
@click.pass_context
def certify_command(
    ctx,
    gpu,
    scale,
    repeats,
    profile_last,
    suite_file,
    rerun,
    suite_id,
    preflight_nodes,
    max_parallel,
    dry_run,
    detach,
    as_json,
    **run_kw,
):
    """Certify a cluster as the NVIDIA DGX Cloud Benchmarking Exemplar
    validation guide does: run every installed workload's published
    configurations for one GPU type (--gpu: each with a figure a run of it
    is judged by, its recipe's or another public document's, as llmb plan
    shows it; --dry-run names each) at one scale (--scale, default
    512 GPUs; a configuration not published there runs at its nearest
    published scale below), largest jobs first, without profiling; judge
    each run (success, finite falling loss, TFLOPS > 0, step-time CV under
    5%, at least 95% of the published performance) and print the verdict.
    A proxy suite (--proxy, --layers) certifies nothing: when every
    workload ran and met its gates its verdict is EXERCISED, never PASS
    (JSON: "verdict": "exercised", "certified": false). Exits 0 when every
    workload passed or, in a proxy suite, was exercised (a smoke test that
    succeeded: read "certified" to tell it from a certification); 1 when one
    failed or is still running.

    \b
    llmb certify --gpu h100 --backend slurm --account A --partition P
    llmb certify --rerun llama31          one workload of the last suite, alone
    llmb certify status [--suite ID]      the verdict again
    llmb archive --suite ID --format zst  the suite's runs, to hand in"""
    if ctx.invoked_subcommand is not None:
        given = _given(
            ctx,
            (
                *SUITE_OPTIONS,
                "rerun",
                "suite_id",
                "preflight_nodes",
                "max_parallel",
                "dry_run",
                "detach",
                "as_json",
                *run_kw,
            ),
        )
        if given:
            sub = ctx.invoked_subcommand
            raise UsageError(
                f"{', '.join(given)} apply to running a suite (llmb certify ...), not to llmb certify "
                f"{sub}; see llmb certify {sub} --help."
            )
        return
    from llmb.certify import suite as suites

    host = get_host(ctx)
    if preflight_nodes:
        if run_kw.get("exclude_from"):
            raise UsageError(
                "--preflight writes the exclusion file itself; give it or --exclude-from, not both."
            )
        if dry_run:
            echo_err(
                f"note: --preflight: a real certification first runs llmb preflight over {preflight_nodes} "
                f"node(s) and keeps the suite off the nodes it flags."
            )
        else:
            from llmb.cli.preflight_cmd import preflight_first

            run_kw = {**run_kw, "exclude_from": preflight_first(ctx, gpu, preflight_nodes, run_kw)}
    if rerun:
        extra = _given(ctx, SUITE_OPTIONS)
        if extra:
            raise UsageError(
                f"--rerun runs the suite's recorded configurations again; {', '.join(extra)} describe a "
                f"new suite (leave out --rerun to start one)."
            )
        suite = suites.load_suite(suite_id)
        given = {
            k: v
            for k, v in run_kw.items()
            if ctx.get_parameter_source(k) == ParameterSource.COMMANDLINE
        }
        if any(given.get(name) for name in suites.PROFILE_OPTIONS):
            raise UsageError(
                "certification runs are not profiled or traced; a re-run keeps the suite's profiling "
                "(--profile-last, when the suite was started with it)."
            )
        tasks = suites.for_rerun(suite.tasks_of(rerun.strip().lower()), given)
    else:
        if suite_id:
            raise UsageError(
                "--suite ID goes with --rerun WORKLOAD (or llmb certify status --suite ID)."
            )
        tasks, scale, source, notes = _new_suite_tasks(
            ctx, host, gpu, scale, repeats, profile_last, suite_file, run_kw
        )
        proxy = any(t.options.get("proxy") or t.options.get("layers") for t in tasks)
        suite = suites.new_suite(
            gpu and gpu.lower(),
            scale if source == "published" else None,
            proxy,
            source,
            tasks,
            notes,
        )
    # too few steps are refused below, in a certification's words
    checked = checked_tasks(
        host, [replace(t, options={**t.options, "window_check": False}) for t in tasks], {}
    )
    if short := next((c for c in checked if c.planned.too_short), None):
        # every gate is judged on the window: such a suite could only fail, after its allocation
        raise UsageError(
            f"{short.task.label}: {short.planned.too_short.rstrip('.')}; a certification judges every "
            f"run on that window, so it would fail. Leave out --steps (the recipes' own step count)."
        )
    # a re-run keeps the recorded tasks, by which its runs are matched to the suite's configurations
    if not rerun:
        checked = [replace(c, task=resolved(c)) for c in checked]
        suite.tasks = tasks = [c.task for c in checked]
        types = {t.gpu for t in tasks}
        suite.gpu = suite.gpu or (types.pop() if len(types) == 1 else None)
    if dry_run:
        for note in suite.notes if not rerun else ():
            echo_err(f"note: {note}")
        judged = [_judging(host, c) for c in checked]
        show_planned(checked, as_json, extra=[{"judged_by": j} for j in judged])
        if not as_json:
            click.echo(terminal_safe(_judged_text(checked, judged)))
        return

    def record(run) -> None:
        suite.attempts.append(
            suites.Attempt(
                run.sweep.id,
                list(dict.fromkeys(t.workload for t in tasks)),
                run.sweep.created_at,
                rerun=bool(rerun),
            )
        )
        suites.save_suite(suite)

    run = follow(ctx, host, checked, {}, max_parallel, detach, on_created=record, name=suite.id)
    if detach:
        if as_json:
            emit_json({"suite": suite.id, "sweep": run.sweep.id, "jobs": suite.jobs_by_workload()})
        else:
            say(
                f"{suite.id}: {counted(len(run.sweep.job_ids), 'job')} submitted; llmb certify "
                f"status --suite {suite.id} shows the verdict once they ended."
            )
        return
    show_status(ctx, suite, as_json)


@certify_command.command("status")
@click.option("--suite", "suite_id", metavar="ID", help="The suite (default: the most recent).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def status_command(ctx, suite_id, as_json):
    """The suite's table: each configuration's best run, its gates (status,
    loss, TFLOPS, step-time CV, performance) and verdict. Runs of a
    configuration merge across repeats and --rerun: one passing run passes
    it. Exits 0 when every workload passed, or, for a proxy suite, was
    exercised (ran and met its gates: EXERCISED, "certified": false in
    JSON; a proxy certifies nothing); 1 otherwise."""
    from llmb.certify.suite import load_suite

    show_status(ctx, load_suite(suite_id), as_json)
