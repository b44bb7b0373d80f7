"""``llmb sweep``: many runs from lists of sizes, dtypes and GPU counts, or a sweep file."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace

import click

from llmb.cli import get_host
from llmb.cli.output import echo_err, emit_json, render_table, say
from llmb.cli.run_options import parameter_names, run_options
from llmb.errors import UsageError
from llmb.figures import counted


def _values(items: tuple[str, ...], cast=str) -> list:
    """``--gpus 8,16 --gpus 32`` -> [8, 16, 32]."""
    out = []
    for item in items:
        for part in item.split(","):
            if part.strip():
                try:
                    out.append(cast(part.strip()))
                except ValueError:
                    raise UsageError(
                        f"{part.strip()!r} is not a GPU count; give whole numbers, e.g. --gpus 8,16,32."
                    ) from None
    return out


def _result_cells(status) -> list[str]:
    result = (status.exit or {}).get("result") if status else None
    if not result or not result.get("time_mean_ms"):
        return ["-", "-"]
    from llmb.figures import figure

    return [figure(result["time_mean_ms"], 1), figure(result.get("tokens_per_s"), 0)]


def following_options(what: str):
    """The options of a command that submits many jobs and follows them (sweep, certify)."""
    options = [
        click.option(
            "--max-parallel",
            type=click.IntRange(min=0),
            help="Jobs at a time (0: all). Default: 1 on the local backend, all on a cluster.",
        ),
        click.option(
            "--dry-run", is_flag=True, help="Check every task and list the jobs; submit nothing."
        ),
        click.option(
            "--detach",
            is_flag=True,
            help=f"Submit every job and return at once with the {what} id.",
        ),
        click.option("--json", "as_json", is_flag=True, help="Print JSON."),
    ]

    def decorate(func):
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def checked_tasks(host, tasks: list, base: dict) -> list:
    """Every task checked as llmb run --dry-run checks a run; a UsageError listing each that cannot run."""
    from llmb.lifecycle import sweep_runner

    checked = sweep_runner.check(host, tasks, base)
    problem = sweep_runner.problems(checked)
    if problem:
        raise UsageError(problem)
    return checked


def split_tasks(host, tasks: list, base: dict, skip_invalid: bool) -> tuple[list, list]:
    """(the tasks that can run, those that cannot), each checked as llmb run --dry-run checks a run. Without
    ``skip_invalid`` any task that cannot run is a UsageError listing each (and saying that --skip-invalid
    runs the others); with it, only when none can run."""
    from llmb.lifecycle import sweep_runner

    checked = sweep_runner.check(host, tasks, base)
    valid = [c for c in checked if not c.error]
    invalid = [c for c in checked if c.error]
    if invalid and not (skip_invalid and valid):
        if skip_invalid:
            hint = "--skip-invalid leaves nothing to run."
        elif valid:
            hint = f"Pass --skip-invalid to run the {len(valid)} valid one{'s' if len(valid) != 1 else ''}."
        else:
            hint = ""
        raise UsageError("\n".join(filter(None, [sweep_runner.problems(checked), hint])))
    return valid, invalid


def _combination(task) -> str:
    """``llama31 70b h100 bf16 on 8 GPUs``: a task's configuration, without its repeat."""
    parts = [task.workload, task.size or "-", task.gpu, task.dtype or "-"]
    return " ".join(p for p in parts if p) + f" on {task.gpus} GPU{'s' if task.gpus != 1 else ''}"


def skipped_json(skipped: list) -> list[dict]:
    """--skip-invalid, --json: each skipped task, its configuration and why it cannot run."""
    return [
        {
            "task": c.task.label,
            "workload": c.task.workload,
            "size": c.task.size,
            "gpu": c.task.gpu,
            "dtype": c.task.dtype,
            "gpus": c.task.gpus,
            "repeat": c.task.repeat,
            "source": c.task.source,
            "reason": c.error,
        }
        for c in skipped
    ]


def show_skipped(skipped: list) -> None:
    """--skip-invalid: one line on stderr per skipped configuration (its repeats counted once) with the
    reason, wrapped to the terminal's width when stderr is one."""
    if not skipped:
        return
    import shutil
    import textwrap

    from llmb.cli.output import terminal_safe

    lines: dict[tuple[str, str], int] = {}
    for c in skipped:
        key = (_combination(c.task), " ".join(terminal_safe(c.error).split()))
        lines[key] = lines.get(key, 0) + 1
    width = shutil.get_terminal_size().columns if sys.stderr.isatty() else 0
    for (combination, reason), runs in lines.items():
        line = f"skipped {combination}{f' ({runs} runs)' if runs > 1 else ''}: {reason}"
        if width > 20:
            line = textwrap.fill(
                line,
                width,
                subsequent_indent="    ",
                break_long_words=False,
                break_on_hyphens=False,
            )
        click.echo(line, err=True)


def show_planned(
    checked: list, as_json: bool, skipped: list | None = None, extra: list[dict] | None = None
) -> None:
    """--dry-run: the jobs a sweep would submit; ``skipped`` (--skip-invalid): those it would not, and why
    (with --json the output is then an object: jobs and skipped). ``extra``: more keys for each job's JSON,
    one mapping per checked task (``llmb certify``: the figure it is judged by)."""
    costs = [job_cost(c.planned) for c in checked]
    if as_json:
        jobs = [
            {
                "task": c.task.label,
                "variant": _variant(c),
                "source": c.task.source,
                "backend": c.planned.job.backend,
                "ranks": c.planned.job.ranks,
                "experiment": c.planned.job.experiment,
                "warnings": list(c.planned.warnings),
                **cost.as_dict(),
                **(more or {}),
            }
            for c, cost, more in zip(checked, costs, extra or [None] * len(checked), strict=True)
        ]
        emit_json(jobs if skipped is None else {"jobs": jobs, "skipped": skipped_json(skipped)})
        return
    show_skipped(skipped or [])
    from llmb.cli.output import Column, experiment_column
    from llmb.runs.experiment import compact_name

    rows = [
        [
            str(n),
            task_label(c),
            c.planned.job.backend,
            str(c.planned.job.ranks),
            compact_name(c.planned.job.experiment),
        ]
        for n, c in enumerate(checked, start=1)
    ]
    click.echo(
        render_table(
            [
                "#",
                _task_column(),
                Column("BACKEND", drop=1),
                "RANKS",
                experiment_column(),
            ],
            rows,
        )
    )
    also = f", {len(skipped)} skipped" if skipped else ""
    echo_err(f"\n{counted(len(checked), 'job')}{also}; nothing was submitted (--dry-run).")
    if costs:
        echo_err(cost_line(costs))


@dataclass(frozen=True)
class JobCost:
    """What one planned job may hold at most: its GPUs (none for a CPU proxy) and nodes for its time
    limit (the one asked for, else the one plan derives; None where it has none)."""

    gpus: int
    nodes: int
    minutes: int | None

    @property
    def gpu_hours(self) -> float | None:
        return None if self.minutes is None else self.gpus * self.minutes / 60

    def as_dict(self) -> dict:
        hours = self.gpu_hours
        return {
            "nodes": self.nodes,
            "time_limit_minutes": self.minutes,
            "gpu_hours": None if hours is None else round(hours, 1),
        }


def job_cost(planned) -> JobCost:
    from llmb.recipes.time_limit import slurm_minutes

    spec, plan = planned.spec, planned.plan
    minutes = slurm_minutes(planned.submit.time_limit if planned.submit else None)
    if minutes is None and plan is not None and plan.time_limit is not None:
        minutes = plan.time_limit.minutes
    return JobCost(0 if spec.device == "cpu" else spec.ranks, spec.nodes or 1, minutes)


def cost_line(costs: list[JobCost]) -> str:
    """``at their time limits: at most 4,085 GPU-hours and at most 10 h 45 min of wall time one after
    another; the largest job 64 nodes (512 GPUs).``: what the jobs may hold, before they are submitted."""
    timed = [c for c in costs if c.minutes is not None]
    largest = max(costs, key=lambda c: (c.nodes, c.gpus))
    gpus = f" ({largest.gpus:,} GPUs)" if largest.gpus else ""
    size = f"the largest job {counted(largest.nodes, 'node')}{gpus}"
    if not timed:
        return f"no time limit to count the cost by; {size}."
    hours = sum(c.gpu_hours or 0.0 for c in timed)
    minutes = sum(c.minutes or 0 for c in timed)
    held = (
        f"at most {hours:,.0f} GPU-hours" if any(c.gpus for c in timed) else "no GPUs (CPU proxies)"
    )
    untimed = (
        f" ({len(costs) - len(timed)} without a time limit left out)"
        if len(timed) < len(costs)
        else ""
    )
    return (
        f"at their time limits: {held} and at most {minutes // 60} h {minutes % 60:02d} min of wall "
        f"time one after another{untimed}; {size}."
    )


def task_label(checked) -> str:
    """A checked task as a dry run's table names it: its label, and its recipe variant where that is not
    the workload's default."""
    return (
        f"{checked.task.label} ({_variant(checked)})"
        if _not_default_variant(checked)
        else checked.task.label
    )


def _variant(checked) -> str | None:
    """The recipe variant a checked task runs (``nemo2`` for Llama 3.1 405B bf16 at 512 GPUs on H100,
    whose Megatron-Bridge recipe starts at 1024): a dry run says which, as llmb plan would need it."""
    plan = getattr(checked.planned, "plan", None)
    return plan.recipe.variant if plan is not None else checked.task.variant


def _not_default_variant(checked) -> bool:
    """Whether the task runs another recipe variant than its workload's default (which plan and run
    take without --variant): the table says which only then."""
    plan = getattr(checked.planned, "plan", None)
    return plan is not None and plan.recipe.variant != plan.workload.default_variant.name


def _task_column():
    """A task's label (``llama31 8b h100 bf16 2 GPUs (nemo2)``) is what tells it apart and what a user
    quotes: never cut; the other columns give way."""
    from llmb.cli.output import Column

    return Column("TASK")


def follow(
    ctx,
    host,
    checked: list,
    base: dict,
    max_parallel: int | None,
    detach: bool,
    on_created=None,
    name: str | None = None,
):
    """Submit the checked tasks as one sweep and follow it to its end (or only submit, ``detach``), the
    sweep's progress on stderr; ``on_created(run)`` is called once the sweep has its id, before any
    submission. ``name``: the id the user knows the action by (a certification's), which heads every
    line in place of the sweep's (one action, one id). Returns the SweepRun (exit 130 when
    interrupted)."""
    from llmb.lifecycle import sweep_runner

    backends = {c.planned.job.backend for c in checked}
    parallel = sweep_runner.default_parallel(backends, max_parallel)
    tty = sys.stderr.isatty()

    def progress(line: str) -> None:
        if tty:
            click.echo(f"\r{line}\x1b[K", err=True, nl=False)
        else:
            click.echo(line, err=True)

    run = sweep_runner.SweepRun(
        host,
        [c.task for c in checked],
        base,
        checked[0].planned.job.backend,
        parallel,
        progress,
        name,
    )
    if on_created:
        on_created(run)
    echo_err(
        f"{name or run.sweep.id}: {counted(len(checked), 'job')} on {', '.join(sorted(backends))}"
        + (f", {parallel} at a time" if parallel else "")
    )
    try:
        run.run(detach=detach)
    except KeyboardInterrupt:
        echo_err(
            f"\nstopped following {name or run.sweep.id}; submitted jobs keep running (llmb status), the "
            f"{run.sweep.jobs.count(None)} not yet submitted were not."
        )
        ctx.exit(130)
    if tty and not detach:
        click.echo("", err=True)
    return run


def _tasks(
    host,
    workload,
    sweep_file,
    all_workloads,
    max_gpus,
    sizes,
    dtypes,
    scales,
    gpu,
    repeats,
    strong_scaling,
    variant,
    gpus_per_node,
    settings,
) -> list:
    from llmb.recipes.overrides import parse_overrides
    from llmb.runs import sweeps

    chosen = [
        name
        for name, given in (
            ("a WORKLOAD", workload),
            ("--file", sweep_file),
            ("--all-workloads", all_workloads),
        )
        if given
    ]
    if len(chosen) > 1:
        raise UsageError(
            f"give one of a WORKLOAD with --size/--dtype/--gpus, --file or --all-workloads, not "
            f"{' and '.join(chosen)}."
        )
    if max_gpus is not None and not all_workloads:
        raise UsageError(
            "--max-gpus goes with --all-workloads (every published configuration up to that many GPUs)."
        )
    if sweep_file:
        # --gpu (or GPU_TYPE) for the sections that name no GPU type, as llmb certify --file does
        return sweeps.with_gpu(
            sweeps.tasks_from_file(sweep_file, host.workloads(), parameter_names()), gpu
        )
    if all_workloads:
        fixed = [
            flag
            for flag, value in (
                ("--size", sizes),
                ("--dtype", dtypes),
                ("--gpus", scales),
                ("--variant", variant),
                ("--strong-scaling", strong_scaling),
            )
            if value
        ]
        if fixed:
            raise UsageError(
                f"--all-workloads takes each published configuration as published; drop "
                f"{', '.join(fixed)} (--gpu and --max-gpus choose which)."
            )
        if max_gpus is None:
            raise UsageError(
                "--all-workloads needs --max-gpus N: the largest GPU count to run (e.g. --max-gpus 64)."
            )
        tasks = sweeps.published_tasks(host.workloads(), gpu, max_gpus, repeats)
    elif workload:
        host.workload(workload)  # an unknown name is refused with the valid ones
        gpu_counts = _values(scales, int)
        if not gpu_counts:
            raise UsageError(
                "llmb sweep needs GPU counts: --gpus 8,16,32 (or a sweep file with --file)."
            )
        tasks = sweeps.expand(
            workload,
            _values(sizes),
            _values(dtypes),
            gpu_counts,
            repeats,
            gpu=gpu,
            variant=variant,
            strong_scaling=strong_scaling,
        )
    else:
        raise UsageError(
            "llmb sweep needs a WORKLOAD and --gpus (e.g. llmb sweep llama31 --size 8b --gpu h100 "
            "--dtype bf16,fp8 --gpus 8,16), --file SWEEP.yaml, or --all-workloads --max-gpus N."
        )
    overrides = dict(parse_overrides(settings))
    return [replace(t, gpus_per_node=gpus_per_node, overrides=overrides) for t in tasks]


@click.command("sweep")
@click.argument("workload", required=False)
@click.option(
    "--file", "sweep_file", type=click.Path(dir_okay=False), help="A sweep file (docs/sweeps.md)."
)
@click.option(
    "--all-workloads",
    is_flag=True,
    help="Every installed workload's published configurations, at each published GPU count up to "
    "--max-gpus (of --gpu's type, or every type).",
)
@click.option(
    "--max-gpus",
    type=click.IntRange(min=1),
    help="With --all-workloads: the largest GPU count to run.",
)
@click.option("--size", "sizes", multiple=True, help="Model sizes, comma-separated or repeated.")
@click.option("--dtype", "dtypes", multiple=True, help="Precisions, comma-separated or repeated.")
@click.option(
    "--gpus", "scales", multiple=True, help="GPU counts, comma-separated or repeated, e.g. 8,16,32."
)
@click.option(
    "--gpu",
    envvar="GPU_TYPE",
    help="GPU type, e.g. h100; with --file, of the sections that name none. [env: GPU_TYPE]",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Runs of each configuration.",
)
@click.option(
    "--strong-scaling/--weak-scaling", default=False, help="Keep GBS constant across GPU counts."
)
@click.option("--variant", help="Recipe variant, e.g. nemo2.")
@click.option("--gpus-per-node", type=click.IntRange(min=1), help="GPUs per node.")
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a recipe field. Repeatable.",
)
@click.option(
    "--skip-invalid",
    is_flag=True,
    help="Run the tasks that can run; list each that cannot (e.g. 70b on 8 GPUs) with its reason and "
    "skip it. Without it one such task stops the whole sweep.",
)
@run_options
@following_options("sweep")
@click.pass_context
def sweep_command(
    ctx,
    workload,
    sweep_file,
    all_workloads,
    max_gpus,
    sizes,
    dtypes,
    scales,
    gpu,
    repeats,
    strong_scaling,
    variant,
    gpus_per_node,
    settings,
    skip_invalid,
    max_parallel,
    dry_run,
    detach,
    as_json,
    **run_kw,
):
    """Run a sweep: every combination of --size, --dtype and --gpus of
    WORKLOAD (times --repeats), the tasks of a sweep file (--file), or every
    installed workload's published configurations up to --max-gpus GPUs
    (--all-workloads). Every task is checked first; if any cannot run, each
    is reported with its reason and nothing is submitted (with
    --skip-invalid each is listed with its reason and skipped, and the
    others run; exit 2 when none can). Then the jobs run
    (one at a time on the local backend) with the sweep's progress shown,
    and a table of results at the end; llmb report --sweep ID plots them."""
    host = get_host(ctx)
    tasks = _tasks(
        host,
        workload,
        sweep_file,
        all_workloads,
        max_gpus,
        sizes,
        dtypes,
        scales,
        gpu,
        repeats,
        strong_scaling,
        variant,
        gpus_per_node,
        settings,
    )
    checked, skipped = split_tasks(host, tasks, run_kw, skip_invalid)
    if dry_run:
        show_planned(checked, as_json, skipped if skip_invalid else None)
        return
    show_skipped(skipped)
    run = follow(ctx, host, checked, run_kw, max_parallel, detach)
    sweep = run.sweep
    if as_json:
        emit_json(
            {
                "sweep_id": sweep.id,
                "jobs": [
                    {
                        "task": t.label,
                        "job_id": j,
                        "state": s,
                        "reason": (f.reason if f else e),
                        "result": (f.exit or {}).get("result") if f else None,
                    }
                    for t, j, s, f, e in zip(
                        sweep.tasks, sweep.jobs, run.states, run.finals, run.errors, strict=True
                    )
                ],
                **({"skipped": skipped_json(skipped)} if skip_invalid else {}),
            }
        )
    elif detach:
        say(
            f"{sweep.id}: {counted(len(sweep.job_ids), 'job')} submitted; llmb status lists them, llmb report --sweep "
            f"{sweep.id} --out DIR plots them once they ended."
        )
    else:
        from llmb.cli.output import fit_text

        table = [
            [t.label, j or "-", s or "-", *_result_cells(f)]
            for t, j, s, f in zip(sweep.tasks, sweep.jobs, run.states, run.finals, strict=True)
        ]
        table += [[c.task.label, "-", "SKIPPED", "-", "-"] for c in skipped]
        reasons = [
            f"{t.label}: {why}"
            for t, f, e in zip(sweep.tasks, run.finals, run.errors, strict=True)
            if (why := (f.reason if f else e))
        ]
        reasons += [f"{c.task.label}: skipped: {c.error}" for c in skipped]
        click.echo(
            render_table(
                [_task_column(), "JOB", "STATE", "STEP MS", "TOKENS/S"],
                table,
            )
        )
        if reasons:  # under the table, one line each (wrapped on a terminal)
            click.echo("\n" + fit_text("\n".join(reasons)))
        echo_err(f"\nllmb report --sweep {sweep.id} --out DIR plots this sweep.")
    if not detach:
        ctx.exit(0 if all(s == "SUCCEEDED" for s in run.states) else 1)
