"""``llmb run``, ``status``, ``logs`` and ``cancel``: jobs from any shell."""

from __future__ import annotations

import json
import sys

import click

from llmb.cli import get_host
from llmb.cli.output import emit_json, render_table
from llmb.cli.plan_cmd import build_request, recipe_options
from llmb.cli.run_options import run_options
from llmb.errors import UsageError
from llmb.run_option_values import options_from


def _backend_of(ctx, job):
    return get_host(ctx).backend_impl(job.backend)


def _status_of(ctx, job):
    return _backend_of(ctx, job).status([job])[0]


def _follow_and_report(ctx, job, as_json: bool) -> None:
    from llmb.follow import follow, summary

    try:
        from llmb.jobs import load_job

        # Reloaded every poll: a backend may have moved the job on (a retry is a new attempt).
        final = follow(job, lambda: _status_of(ctx, load_job(job.id)), lambda line: click.echo(line, err=True))
    except KeyboardInterrupt:
        click.echo(f"\ndetached from {job.id}; it keeps running. Follow it again with llmb logs {job.id} --follow, "
                   f"stop it with llmb cancel {job.id}.", err=True)
        ctx.exit(130)
    if as_json:
        emit_json({"job_id": job.id, "state": final.state, "reason": final.reason, "attempts": final.job.attempts,
                   "result": (final.exit or {}).get("result"), "experiment_dir": final.job.run_dir,
                   "log": final.job.log})
    else:
        click.echo(summary(final))
    ctx.exit(0 if final.state == "SUCCEEDED" else 1)


@click.command("run")
@click.argument("workload")
@recipe_options
@run_options
@click.option("--dry-run", is_flag=True, help="Show what would be submitted (script, requests); write and send nothing.")
@click.option("--detach", is_flag=True, help="Return at once with the job id.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def run_command(ctx, workload, size, gpu, dtype, gpus, strong_scaling, variant, gpus_per_node, settings, dry_run,
                detach, as_json, **run_kw):
    """Run WORKLOAD's recipe: resolve it as llmb plan does, create the
    experiment directory in the seeds' layout, start the job and follow it
    (step, step time, ETA) to its summary. With --detach, print the job id
    and return; llmb status, logs and cancel take it from any shell."""
    from llmb.launch import submit_run

    options, backend = options_from(run_kw)
    request = build_request(workload, size, gpu, dtype, gpus, strong_scaling, variant, gpus_per_node, settings)
    submitted = submit_run(get_host(ctx), request, options, backend, dry_run=dry_run)
    job = submitted.job
    for warning in submitted.warnings:
        click.echo(f"llmb: warning: {warning}", err=True)
    if dry_run:
        described = submitted.description or {}
        for problem in described.get("problems", ()):
            click.echo(f"llmb: warning: a real submission would stop here: {problem}", err=True)
        if as_json:
            emit_json({k: v for k, v in described.items() if k != "text"})
        else:
            click.echo(f"llmb run --dry-run: {job.backend} would run {job.experiment} ({job.ranks} rank(s)); "
                       f"nothing was written or sent", err=True)
            click.echo(described.get("text") or json.dumps(described, indent=2))
        return
    if detach:
        if as_json:
            emit_json({"job_id": job.id, "experiment_dir": job.run_dir, "log": job.log, "backend": job.backend})
        else:
            click.echo(f"{job.id} started ({job.backend}); follow it with llmb logs {job.id} --follow")
        return
    click.echo(f"{job.id}: {job.experiment} ({job.ranks} rank(s), {job.backend}); log {job.log}", err=True)
    _follow_and_report(ctx, job, as_json)


@click.command("status")
@click.argument("job_id", required=False)
@click.option("--all", "show_all", is_flag=True, help="Every job, not only the latest 20.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def status_command(ctx, job_id, show_all, as_json):
    """Show one job's state (and its summary once it ended), or list jobs."""
    from llmb.follow import summary
    from llmb.jobs import list_job_ids, load_job

    if job_id:
        status = _status_of(ctx, load_job(job_id))
        if as_json:
            emit_json({"job_id": status.job.id, "backend": status.job.backend, "state": status.state,
                       "reason": status.reason, "progress": status.progress, "experiment_dir": status.job.run_dir,
                       "log": status.job.log, "result": (status.exit or {}).get("result")})
        else:
            click.echo(summary(status) if status.exit else
                       f"{status.job.id}: {status.state}" + (f" ({status.progress})" if status.progress else "")
                       + (f" - {status.reason}" if status.reason else "") + f"\n  log {status.job.log}")
        return
    ids = list_job_ids()
    ids = ids if show_all else ids[:20]
    jobs = [load_job(i) for i in ids]
    by_backend: dict[str, list] = {}
    for job in jobs:
        by_backend.setdefault(job.backend, []).append(job)
    statuses = {}
    for name, members in by_backend.items():  # one batched query per backend
        for status in get_host(ctx).backend_impl(name).status(members):
            statuses[status.job.id] = status
    ordered = [statuses[j.id] for j in jobs]
    if as_json:
        emit_json([{"job_id": s.job.id, "backend": s.job.backend, "state": s.state, "reason": s.reason,
                    "progress": s.progress, "workload": s.job.workload, "experiment": s.job.experiment,
                    "submitted_at": s.job.submitted_at} for s in ordered])
        return
    if not ordered:
        click.echo("No jobs yet. Start one with llmb run WORKLOAD ...")
        return
    click.echo(render_table(
        ["JOB", "BACKEND", "STATE", "PROGRESS", "WORKLOAD", "SUBMITTED", "EXPERIMENT"],
        [[s.job.id, s.job.backend, s.state, s.progress or "-", s.job.workload, s.job.submitted_at, s.job.experiment]
         for s in ordered]))


@click.command("logs")
@click.argument("job_id")
@click.option("--follow", "-f", "follow_", is_flag=True, help="Show live progress until the job ends, then its summary.")
@click.option("--tail", type=click.IntRange(min=1), help="Only the last N lines.")
@click.pass_context
def logs_command(ctx, job_id, follow_, tail):
    """Print a job's log; with --follow, its live progress and summary.
    Terminal escape sequences and control characters in the log are not
    passed to the terminal (the log file keeps them)."""
    from llmb.cli.output import terminal_safe
    from llmb.jobs import load_job

    job = load_job(job_id)
    path = _backend_of(ctx, job).log_path(job)
    if follow_:
        _follow_and_report(ctx, job, False)
        return
    if not path:
        raise UsageError(f"the log of {job_id} is at {job.log} ({job.backend} backend), which is not reachable from "
                         f"here; read it where that path is mounted.")
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.readlines()
    except FileNotFoundError:
        click.echo(f"{job_id} has written no log yet ({path}).", err=True)
        return
    sys.stdout.write(terminal_safe("".join(lines[-tail:] if tail else lines)))


@click.command("cancel")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def cancel_command(ctx, job_id, as_json):
    """Stop a job (its whole process group, for the local backend) and
    report its state once it has really ended."""
    from llmb.jobs import TERMINAL, load_job

    job = load_job(job_id)
    status = _backend_of(ctx, job).cancel(job)
    ended = status.state in TERMINAL and not (status.reason or "").startswith("processes still alive")
    if as_json:
        emit_json({"job_id": job.id, "state": status.state, "reason": status.reason, "ended": ended})
    else:
        click.echo(f"{job.id}: {status.state}" + (f" - {status.reason}" if status.reason else ""))
    ctx.exit(0 if ended else 1)
