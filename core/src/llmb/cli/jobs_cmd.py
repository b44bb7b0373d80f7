"""``llmb run``, ``status``, ``logs`` and ``cancel``: jobs from any shell."""

from __future__ import annotations

import contextlib
import json
import sys

import click

from llmb.cli import get_host
from llmb.cli.output import echo_err, emit_json, render_table, say
from llmb.cli.plan_cmd import build_request, recipe_options
from llmb.cli.run_options import run_options
from llmb.errors import UsageError
from llmb.lifecycle.run_option_values import run_inputs
from llmb.log import warn


def _backend_of(ctx, job):
    return get_host(ctx).backend_impl(job.backend)


def _status_of(ctx, job):
    from llmb.lifecycle.reconcile import status

    return status(get_host(ctx), job)


def _current(job):
    """The job's record as it is now (a backend may have moved the job on: a retry is a new
    attempt); the one in hand when the record has gone or become unreadable meanwhile."""
    from llmb.runs.jobs import Job, read_job

    found = read_job(job.id)
    return found if isinstance(found, Job) else job


@contextlib.contextmanager
def detaching(ctx, job):
    """An interrupt (Ctrl-C) once ``job`` exists detaches from it: the job runs on, and the message
    names it and says how to follow or stop it (exit 130)."""
    try:
        yield
    except KeyboardInterrupt:
        _say_detached(job.id)
        ctx.exit(130)


def _say_detached(job_id: str) -> None:
    from llmb.cli.output import fit_text, output_width

    click.echo(
        "\n"
        + fit_text(
            f"detached from {job_id}; it keeps running. Follow it again with llmb logs "
            f"{job_id} --follow, stop it with llmb cancel {job_id}.",
            output_width(sys.stderr),
        ),
        err=True,
    )


def _follow_and_report(ctx, job, as_json: bool, announce: bool = False) -> None:
    with detaching(ctx, job):
        from llmb.lifecycle.follow import follow, summary

        if announce:
            # the experiment's whole name: the name of its directory, which a user goes looking for
            ranks = f"{job.ranks} rank{'' if job.ranks == 1 else 's'}"
            echo_err(
                f"{job.id}: {job.experiment} ({ranks}, {job.backend}); its log: llmb logs {job.id}"
            )
        final = follow(
            job, lambda: _status_of(ctx, _current(job)), lambda line: click.echo(line, err=True)
        )
    if as_json:
        emit_json(
            {
                "job_id": job.id,
                "state": final.state,
                "reason": final.reason,
                "attempts": final.job.attempts,
                "result": (final.exit or {}).get("result"),
                "experiment_dir": final.job.run_dir,
                "log": final.job.log,
            }
        )
    else:
        click.echo(summary(final))
    ctx.exit(0 if final.state == "SUCCEEDED" else 1)


def _withdraw(ctx, job_ids: list[str], interrupted: bool) -> list[str]:
    """A submission that did not complete leaves no job behind: its record
    is removed, once a backend that can (``withdraw``) has stopped what it
    started. A job that may have reached a cluster's scheduler keeps its
    record (its status tells). The ids of the jobs kept."""
    from llmb.runs.jobs import BrokenJob, discard_job_dir, read_job

    kept = []
    for job_id in job_ids:
        found = read_job(job_id)
        if found is None:
            continue
        # a record was written: the backend may have started something
        if not isinstance(found, BrokenJob):
            withdraw = getattr(_backend_of(ctx, found), "withdraw", None)
            try:
                withdrawn = withdraw is not None and withdraw(found)
            except Exception:  # noqa: BLE001 - withdraw what can be; the submission's own error is the one shown
                withdrawn = False
            if not withdrawn:
                kept.append(job_id)
                continue
        discard_job_dir(job_id)
        if interrupted:
            echo_err(
                f"llmb: the interrupted submission {job_id} was withdrawn; nothing of it runs."
            )
    return kept


@click.command("run")
@click.argument("workload")
@recipe_options
@run_options
@click.option(
    "--dry-run",
    is_flag=True,
    help="Show what would be submitted (script, requests); write and send nothing.",
)
@click.option("--detach", is_flag=True, help="Return at once with the job id.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def run_command(
    ctx,
    workload,
    size,
    gpu,
    dtype,
    gpus,
    strong_scaling,
    variant,
    gpus_per_node,
    settings,
    dry_run,
    detach,
    as_json,
    **run_kw,
):
    """Run WORKLOAD's recipe: resolve it as llmb plan does, create the
    experiment directory in the published recipes' layout, start the job
    and follow it (step, step time, ETA) to its summary. With --detach, print the job id
    and return; llmb status, logs and cancel take it from any shell."""
    from llmb.lifecycle.submit import submit_run
    from llmb.runs.jobs import created_job_ids

    request = build_request(
        workload, size, gpu, dtype, gpus, strong_scaling, variant, gpus_per_node, settings
    )
    # with the cluster file on a cluster backend
    request, options, backend = run_inputs(run_kw, request)
    before = len(created_job_ids())
    try:
        submitted = submit_run(get_host(ctx), request, options, backend, dry_run=dry_run)
    except BaseException as exc:
        interrupted = isinstance(exc, KeyboardInterrupt)
        kept = _withdraw(ctx, created_job_ids()[before:], interrupted=interrupted)
        if interrupted and kept:  # the job had started and could not be withdrawn: it runs on
            _say_detached(kept[0])
            ctx.exit(130)
        raise
    if dry_run:
        _report_dry_run(submitted, as_json)
        return
    # the job exists from here on: an interrupt leaves it running, and says so (also one that lands
    # while the detaching context is being entered: its call is where Python delivers a signal)
    try:
        with detaching(ctx, submitted.job):
            for warning in submitted.warnings:
                warn(warning)
            if detach:
                report_detached(submitted.job, as_json)
                return
            _follow_and_report(ctx, submitted.job, as_json, announce=True)
    except KeyboardInterrupt:
        _say_detached(submitted.job.id)
        ctx.exit(130)


def _report_dry_run(submitted, as_json: bool) -> None:
    """What the backend would do: its problems as warnings, then its description."""
    job, described = submitted.job, submitted.description or {}
    for warning in submitted.warnings:
        warn(warning)
    for problem in described.get("problems", ()):
        warn(f"a real submission would stop here: {problem}")
    if as_json:
        emit_json({k: v for k, v in described.items() if k != "text"})
        return
    echo_err(
        f"llmb run --dry-run: {job.backend} would run {job.experiment} ({job.ranks} rank(s)); "
        f"nothing was written or sent"
    )
    # what the backend would execute, verbatim (a script, commands): copied as it is, never wrapped
    click.echo(described.get("text") or json.dumps(described, indent=2))


def report_detached(job, as_json: bool, then: str = "") -> None:
    """A job started with --detach: its id (with --json, where its files are), and what to do next,
    ``then`` added to it."""
    if as_json:
        emit_json(
            {
                "job_id": job.id,
                "experiment_dir": job.run_dir,
                "log": job.log,
                "backend": job.backend,
            }
        )
    else:
        say(f"{job.id} started ({job.backend}); follow it with llmb logs {job.id} --follow{then}")


@click.command("status")
@click.argument("job_id", required=False)
@click.option("--all", "show_all", is_flag=True, help="Every job, not only the latest 20.")
@click.option("--full-names", is_flag=True, help="Show each job's whole experiment name.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def status_command(ctx, job_id, show_all, full_names, as_json):
    """Show one job's state (and its summary once it ended), or list jobs.
    A job whose record or state cannot be read is shown as UNKNOWN with
    what is wrong; the others are listed as usual."""
    from llmb.lifecycle.follow import summary
    from llmb.runs.jobs import BrokenJob, list_job_ids, load_job, read_job, state_text

    if job_id:
        found = read_job(job_id)
        if found is None:
            load_job(job_id)  # says there is no such job, and which there are
        if isinstance(found, BrokenJob):
            reason = _broken_reason(ctx, found)
            if as_json:
                emit_json(
                    {
                        "job_id": job_id,
                        "backend": None,
                        "state": "UNKNOWN",
                        "reason": reason,
                        "progress": None,
                        "experiment_dir": None,
                        "log": None,
                        "result": None,
                    }
                )
            else:
                say(f"{job_id}: UNKNOWN - {reason}")
            ctx.exit(1)
        status = _one_status(ctx, found)
        if as_json:
            emit_json(
                {
                    "job_id": status.job.id,
                    "backend": status.job.backend,
                    "state": status.state,
                    "reason": status.reason,
                    "progress": status.progress,
                    "experiment_dir": status.job.run_dir,
                    "log": status.job.log,
                    "result": (status.exit or {}).get("result"),
                }
            )
        else:
            from llmb.cli.output import fit_text

            click.echo(
                summary(status)
                if status.exit
                else fit_text(
                    f"{status.job.id}: {status.state}"
                    + (f" ({status.progress})" if status.progress else "")
                    + state_text(status.state, status.reason).removeprefix(status.state)
                    + "\n"
                    + where_lines(status.job)
                )
            )
        return
    ids = list_job_ids()
    found = [j for j in (read_job(i) for i in (ids if show_all else ids[:20])) if j is not None]
    jobs = [j for j in found if not isinstance(j, BrokenJob)]
    by_backend: dict[str, list] = {}
    for job in jobs:
        by_backend.setdefault(job.backend, []).append(job)
    statuses = {}
    from llmb.lifecycle.reconcile import statuses as reconciled

    for members in by_backend.values():  # one batched query per backend
        try:
            batch = reconciled(get_host(ctx), members)
        except Exception:  # noqa: BLE001 - then job by job, so that one job's trouble shows on that job only
            batch = [_one_status(ctx, job) for job in members]
        statuses.update({status.job.id: status for status in batch})
    rows = []
    for item in found:
        if isinstance(item, BrokenJob):
            rows.append(
                {
                    "job_id": item.id,
                    "backend": None,
                    "state": "UNKNOWN",
                    "reason": _broken_reason(ctx, item),
                    "progress": None,
                    "workload": None,
                    "experiment": None,
                    "submitted_at": None,
                }
            )
        else:
            s = statuses[item.id]
            rows.append(
                {
                    "job_id": item.id,
                    "backend": item.backend,
                    "state": s.state,
                    "reason": s.reason,
                    "progress": s.progress,
                    "workload": item.workload,
                    "experiment": item.experiment,
                    "submitted_at": item.submitted_at,
                }
            )
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("No jobs yet. Start one with llmb run WORKLOAD ...")
        return
    from llmb.cli.output import Column, experiment_column, fit_text
    from llmb.runs.experiment import compact_name

    table = [
        [
            row["job_id"],
            row["state"],
            row["progress"],
            _when(row["submitted_at"]),
            (row["experiment"] if full_names else compact_name(row["experiment"]))
            if row["experiment"]
            else None,
            row["backend"],
            row["workload"],
        ]
        for row in rows
    ]
    click.echo(
        render_table(
            [
                "JOB",
                "STATE",
                Column("PROGRESS", drop=2),
                Column("SUBMITTED", drop=4),
                experiment_column(full_names, paths=False),  # whole names, not paths
                Column("BACKEND", drop=3),
                Column("WORKLOAD", drop=1),
            ],
            table,
        )
    )
    unknown = [f"{row['job_id']}: {row['reason']}" for row in rows if row["state"] == "UNKNOWN"]
    if unknown:
        click.echo(fit_text("\n".join(unknown)))


def _when(stamp: str | None) -> str | None:
    """``2026-11-26T04:47:39+00:00`` as ``2026-11-26 04:47`` (UTC, as recorded)."""
    return stamp[:16].replace("T", " ") if stamp and len(stamp) >= 16 else stamp


def where_lines(job) -> str:
    """Where a job's files are, for a person: its run directory once (from $LLMB_INSTALL or ~, wrapped on a
    narrow terminal, never cut), and the command that shows its log. ``--json`` has both paths whole."""
    from llmb.lifecycle.follow import where_lines as lines

    return lines(job)


def _one_status(ctx, job):
    """The job's status; UNKNOWN with the cause when it cannot be had."""
    from llmb.errors import LlmbError
    from llmb.runs.jobs import JobStatus, describe_os_error

    try:
        return _status_of(ctx, job)
    except OSError as exc:
        return JobStatus(job, "UNKNOWN", f"its state cannot be read: {describe_os_error(exc)}")
    except LlmbError as exc:
        return JobStatus(job, "UNKNOWN", f"its state cannot be read: {exc}")
    except Exception as exc:  # noqa: BLE001 - one job's trouble must not hide the others
        return JobStatus(job, "UNKNOWN", f"its state cannot be read ({type(exc).__name__}: {exc})")


def _backend_by_id(ctx, job_id: str):
    """The backend a job id names (``<backend>-<hex>``), or None."""
    try:
        return get_host(ctx).backend_impl(job_id.rsplit("-", 1)[0])
    except Exception:  # noqa: BLE001 - an id of no installed backend
        return None


def _broken_reason(ctx, broken) -> str:
    """What is wrong with a job's record, and whether processes of it still run."""
    find = getattr(_backend_by_id(ctx, broken.id), "unrecorded_processes", None)
    running = len(find(broken.id)) if find else 0
    if running:
        return f"{broken.problem}; {running} process(es) of it still run (llmb cancel {broken.id} stops them)"
    return broken.problem


@click.command("logs")
@click.argument("job_id")
@click.option(
    "--follow",
    "-f",
    "follow_",
    is_flag=True,
    help="Show live progress until the job ends, then its summary.",
)
@click.option("--tail", type=click.IntRange(min=1), help="Only the last N lines.")
@click.pass_context
def logs_command(ctx, job_id, follow_, tail):
    """Print a job's log; with --follow, its live progress and summary.
    Terminal escape sequences and control characters in the log are not
    passed to the terminal (the log file keeps them)."""
    from llmb.cli.output import terminal_safe
    from llmb.runs.jobs import load_job

    job = load_job(job_id)
    path = _backend_of(ctx, job).log_path(job)
    if follow_:
        _follow_and_report(ctx, job, False)
        return
    if not path:
        raise UsageError(
            f"the log of {job_id} is at {job.log} ({job.backend} backend), which is not reachable from "
            f"here; read it where that path is mounted."
        )
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.readlines()
    except FileNotFoundError:
        echo_err(f"{job_id} has written no log yet ({path}).")
        return
    sys.stdout.write(terminal_safe("".join(lines[-tail:] if tail else lines)))


@click.command("cancel")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def cancel_command(ctx, job_id, as_json):
    """Stop a job (every process of it, for the local backend, even when its
    record is gone or unreadable) and report its state once it has really
    ended."""
    from llmb.runs.jobs import TERMINAL, BrokenJob, read_job, state_text, store_error

    job = read_job(job_id)
    if job is None or isinstance(job, BrokenJob):
        state, reason = _cancel_unrecorded(ctx, job_id, job)
    else:
        try:
            from llmb.lifecycle.reconcile import cancel

            status = cancel(get_host(ctx), job)
        except OSError as exc:
            raise store_error(f"cannot cancel {job_id}", exc) from None
        state, reason = status.state, status.reason
    ended = state in TERMINAL and not (reason or "").startswith("processes still alive")
    if as_json:
        emit_json({"job_id": job_id, "state": state, "reason": reason, "ended": ended})
    else:
        say(f"{job_id}: {state_text(state, reason)}")
    ctx.exit(0 if ended else 1)


def _cancel_unrecorded(ctx, job_id, broken) -> tuple[str, str]:
    """Cancel a job whose record is gone or unreadable: stop the processes
    its backend still finds for it (the local backend does). (state, reason)."""
    from llmb.runs.jobs import JobStoreError, load_job

    stop = getattr(_backend_by_id(ctx, job_id), "stop_unrecorded", None)
    count, survivors = stop(job_id) if stop else (0, [])
    if not count:
        if broken is None:
            load_job(job_id)  # says there is no such job, and which there are
        raise JobStoreError(
            f"job {job_id}: {broken.problem}; no process of it runs, so there is nothing to stop."
        )
    if survivors:
        return "RUNNING", f"processes still alive after SIGKILL: {[p.pid for p in survivors]}"
    problem = broken.problem if broken else "it has no record (its job directory is gone)"
    return "CANCELLED", f"cancelled: stopped {count} process(es) of it; {problem}"
