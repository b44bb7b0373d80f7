"""``llmb report``: plots and a page of runs against the published numbers."""

from __future__ import annotations

import os
from dataclasses import replace

import click

from llmb.cli import get_host
from llmb.cli.output import emit_json, say
from llmb.errors import UsageError


def _collected_rows(ctx, paths: list[str], gpu: str | None) -> list[dict]:
    """``llmb results``' rows for the runs under ``paths`` (none: the install's experiments); ``gpu``:
    ``llmb results --gpu``'s (only that GPU type; logs that do not say are taken to be it)."""
    from llmb.cli.results_cmd import display_name, select
    from llmb.results.experiments import JobIds
    from llmb.results.export import row

    picked = select(
        ctx,
        tuple(paths),
        window_text=None,
        workload=None,
        gpu=gpu,
        dtype=None,
        since=None,
        from_db=False,
        db_path=None,
        rescan=False,
    )
    job_ids = JobIds()
    return [
        row(result, name=display_name(where, False), run_id=run_id, job_ids=job_ids)
        for where, result, run_id in picked
    ]


def _rows_from_results(ctx, paths: tuple[str, ...], gpu: str | None) -> tuple[list[dict], str]:
    """Rows from experiment directories and files written by ``llmb results --format json``."""
    from llmb.paths import install_dir
    from llmb.results.export import read_rows

    json_files = [p for p in paths if p.endswith(".json") and os.path.isfile(p)]
    directories = [p for p in paths if p not in json_files]
    rows = [r for path in json_files for r in read_rows(path, "the results file")]
    if directories or not json_files:
        rows += _collected_rows(ctx, directories, gpu)
    if not paths:
        return rows, f"the experiments under {install_dir()}/workloads"
    return rows, ", ".join(paths)


def _rows_from_sweep(ctx, sweep_id: str, gpu: str | None) -> tuple[list[dict], str]:
    """Rows for each submitted job of the sweep, read from the job's run directory."""
    from llmb.results.collect import Collector
    from llmb.results.experiments import RunLocation
    from llmb.results.export import row
    from llmb.runs.jobs import load_job
    from llmb.runs.sweeps import load_sweep

    sweep = load_sweep(sweep_id)
    jobs = [load_job(job_id) for job_id in sweep.job_ids]
    present = [job.run_dir for job in jobs if os.path.isdir(job.run_dir)]
    rows = _collected_rows(ctx, present, gpu) if present else []
    for job in jobs:
        if job.run_dir not in present:
            name = os.path.basename(job.run_dir)
            result = Collector(get_host(ctx)).result_for(
                RunLocation(None, job.run_dir, job.experiment, name)
            )
            gone = replace(
                result, reason=f"job {job.id}: its run directory {job.run_dir} does not exist"
            )
            rows.append(row(gone, name=name))
    return rows, f"sweep {sweep.id} ({len(jobs)} of {len(sweep.tasks)} tasks submitted)"


def _nothing_found(results: tuple[str, ...], sweep_id: str | None, source: str) -> str:
    if sweep_id:
        return f"no runs to report: {source}; submit its tasks with llmb sweep first."
    if results:
        return (
            f"no runs found in {source}: a run is a log-*.out file or an <exp>/<exp>_<timestamp> directory, "
            f"and a .json file must hold the rows of llmb results --format json."
        )
    return (
        f"no runs found: there are no experiments under {source.removeprefix('the experiments under ')}. "
        f"Give experiment directories or llmb results JSON files (llmb report DIR|FILE ... --out DIR), "
        f"a sweep (--sweep ID|last), or set LLMB_INSTALL."
    )


@click.command("report")
@click.argument("results", nargs=-1, type=click.Path())
@click.option(
    "--sweep",
    "sweep_id",
    metavar="ID",
    help="Report the runs of this sweep ('last': the most recent).",
)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Directory for index.html, summary.md and the PNG plots (created if missing).",
)
@click.option(
    "--gpu",
    help="Only this GPU type (logs that do not say, such as the replaced tool's, are taken to be this "
    "type, as llmb results --gpu takes them: their MFU needs it). Rows of a results JSON file are "
    "used as they are.",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
@click.pass_context
def report_command(ctx, results, sweep_id, out_dir, gpu, as_json):
    """Plot runs against GPU count and write a report to --out: step time,
    tokens/s, scaling efficiency and MFU, one line per configuration
    (workload, variant, size, GPU type, dtype, scaling, proxy) with repeats
    as mean and standard-deviation error bars, the published recipes' figures
    dashed beside them, and every point and every failed run in tables
    (index.html, self-contained; summary.md).

    RESULTS are experiment directories (as llmb results takes) and JSON
    files written by llmb results --format json; --sweep takes a sweep's
    runs instead; neither: every experiment in $LLMB_INSTALL. A run's GPU
    type is what it recorded, else --gpu, else the cluster file's."""
    from llmb.report.plots import require_matplotlib
    from llmb.report.series import build_report
    from llmb.report.write import write_report

    if sweep_id and results:
        raise UsageError("give either --sweep ID or RESULTS (directories, JSON files), not both.")
    require_matplotlib()
    rows, source = (
        _rows_from_sweep(ctx, sweep_id, gpu) if sweep_id else _rows_from_results(ctx, results, gpu)
    )
    if not rows:
        raise UsageError(_nothing_found(results, sweep_id, source))
    data = build_report(rows, get_host(ctx).workloads())
    written = write_report(data, out_dir, source)
    if as_json:
        emit_json(written.to_dict())
        return
    say(f"Report:  {written.html}\nSummary: {written.markdown}")
    say(
        f"Plots:   {', '.join(os.path.basename(p) for p in written.plots) or 'none (nothing to plot)'}"
    )
    say(
        f"{written.series} series from {written.runs} runs, {len(data.unplotted)} without a result."
    )
