"""``llmb sweep``: many runs from lists of sizes, dtypes and GPU counts, or a sweep file."""

from __future__ import annotations

import sys

import click

from llmb.cli import get_host
from llmb.cli.output import emit_json, render_table
from llmb.cli.run_options import parameter_names, run_options
from llmb.errors import UsageError


def _values(items: tuple[str, ...], cast=str) -> list:
    """``--gpus 8,16 --gpus 32`` -> [8, 16, 32]."""
    out = []
    for item in items:
        for part in item.split(","):
            if part.strip():
                try:
                    out.append(cast(part.strip()))
                except ValueError:
                    raise UsageError(f"{part.strip()!r} is not a GPU count; give whole numbers, e.g. --gpus 8,16,32.") \
                        from None
    return out


def _result_cells(status) -> list[str]:
    result = (status.exit or {}).get("result") if status else None
    if not result or not result.get("time_mean_ms"):
        return ["-", "-"]
    return [f"{result['time_mean_ms']:.1f}", f"{result['tokens_per_s']:,.0f}" if result.get("tokens_per_s") else "-"]


@click.command("sweep")
@click.argument("workload", required=False)
@click.option("--file", "sweep_file", type=click.Path(dir_okay=False), help="A sweep file (docs/sweeps.md).")
@click.option("--size", "sizes", multiple=True, help="Model sizes, comma-separated or repeated.")
@click.option("--dtype", "dtypes", multiple=True, help="Precisions, comma-separated or repeated.")
@click.option("--gpus", "scales", multiple=True, help="GPU counts, comma-separated or repeated, e.g. 8,16,32.")
@click.option("--gpu", help="GPU type, e.g. h100.")
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True, help="Runs of each configuration.")
@click.option("--strong-scaling/--weak-scaling", default=False, help="Keep GBS constant across GPU counts.")
@click.option("--variant", help="Recipe variant, e.g. nemo2.")
@click.option("--gpus-per-node", type=click.IntRange(min=1), help="GPUs per node.")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE", help="Override a recipe field. Repeatable.")
@run_options
@click.option("--max-parallel", type=click.IntRange(min=0),
              help="Jobs at a time (0: all). Default: 1 on the local backend, all on a cluster.")
@click.option("--dry-run", is_flag=True, help="Check every task and list the jobs; submit nothing.")
@click.option("--detach", is_flag=True, help="Submit every job and return at once with the sweep id.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def sweep_command(ctx, workload, sweep_file, sizes, dtypes, scales, gpu, repeats, strong_scaling, variant,
                  gpus_per_node, settings, max_parallel, dry_run, detach, as_json, **run_kw):
    """Run a sweep: every combination of --size, --dtype and --gpus of
    WORKLOAD (times --repeats), or the tasks of a sweep file (--file). Every
    task is checked first; if any cannot run, each is reported with its
    reason and nothing is submitted. Then the jobs run (one at a time on the
    local backend) with the sweep's progress shown, and a table of results
    at the end; llmb report --sweep ID plots them."""
    from llmb import sweep_runner, sweeps
    from llmb.overrides import parse_overrides

    host = get_host(ctx)
    if sweep_file and workload:
        raise UsageError("give a WORKLOAD with --size/--dtype/--gpus, or --file, not both.")
    if sweep_file:
        tasks = sweeps.tasks_from_file(sweep_file, host.workloads(), parameter_names())
    elif workload:
        host.workload(workload)  # an unknown name is refused with the valid ones
        gpu_counts = _values(scales, int)
        if not gpu_counts:
            raise UsageError("llmb sweep needs GPU counts: --gpus 8,16,32 (or a sweep file with --file).")
        overrides = dict(parse_overrides(settings))
        tasks = sweeps.expand(workload, _values(sizes), _values(dtypes), gpu_counts, repeats, gpu=gpu, variant=variant,
                              strong_scaling=strong_scaling, gpus_per_node=gpus_per_node, overrides=overrides)
    else:
        raise UsageError("llmb sweep needs a WORKLOAD and --gpus (e.g. llmb sweep llama31 --size 8b --gpu h100 "
                         "--dtype bf16,fp8 --gpus 8,16), or --file SWEEP.yaml.")

    checked = sweep_runner.check(host, tasks, run_kw)
    problem = sweep_runner.problems(checked)
    if problem:
        raise UsageError(problem)
    rows = [[str(n), c.task.label, c.planned.job.backend, str(c.planned.job.ranks), c.planned.job.experiment]
            for n, c in enumerate(checked, start=1)]
    if dry_run:
        if as_json:
            emit_json([{"task": c.task.label, "source": c.task.source, "backend": c.planned.job.backend,
                        "ranks": c.planned.job.ranks, "experiment": c.planned.job.experiment,
                        "warnings": list(c.planned.warnings)} for c in checked])
        else:
            click.echo(render_table(["#", "TASK", "BACKEND", "RANKS", "EXPERIMENT"], rows))
            click.echo(f"\n{len(checked)} jobs; nothing was submitted (--dry-run).", err=True)
        return

    backend = checked[0].planned.job.backend
    backends = {c.planned.job.backend for c in checked}
    parallel = max_parallel if max_parallel is not None else (1 if backends == {"local"} else 0)
    tty = sys.stderr.isatty()

    def progress(line: str) -> None:
        if tty:
            click.echo(f"\r{line}\x1b[K", err=True, nl=False)
        else:
            click.echo(line, err=True)

    run = sweep_runner.SweepRun(host, tasks, run_kw, backend, parallel, progress)
    click.echo(f"{run.sweep.id}: {len(tasks)} jobs on {', '.join(sorted(backends))}"
               + (f", {parallel} at a time" if parallel else ""), err=True)
    try:
        sweep = run.run(detach=detach)
    except KeyboardInterrupt:
        click.echo(f"\nstopped following {run.sweep.id}; submitted jobs keep running (llmb status), the "
                   f"{run.sweep.jobs.count(None)} not yet submitted were not.", err=True)
        ctx.exit(130)
    if tty and not detach:
        click.echo("", err=True)
    if as_json:
        emit_json({"sweep_id": sweep.id, "jobs": [
            {"task": t.label, "job_id": j, "state": s, "reason": (f.reason if f else e),
             "result": (f.exit or {}).get("result") if f else None}
            for t, j, s, f, e in zip(sweep.tasks, sweep.jobs, run.states, run.finals, run.errors, strict=True)]})
    elif detach:
        click.echo(f"{sweep.id}: {len(sweep.job_ids)} jobs submitted; llmb status lists them, llmb report --sweep "
                   f"{sweep.id} --out DIR plots them once they ended.")
    else:
        table = [[t.label, j or "-", s or "-", *_result_cells(f), (f.reason if f else e) or ""]
                 for t, j, s, f, e in zip(sweep.tasks, sweep.jobs, run.states, run.finals, run.errors, strict=True)]
        click.echo(render_table(["TASK", "JOB", "STATE", "STEP MS", "TOKENS/S", "REASON"], table))
        click.echo(f"\nllmb report --sweep {sweep.id} --out DIR plots this sweep.", err=True)
    if not detach:
        ctx.exit(0 if all(s == "SUCCEEDED" for s in run.states) else 1)
