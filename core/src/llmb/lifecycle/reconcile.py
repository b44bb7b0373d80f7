"""Where a job is judged ended: the one place a job's end is recorded, its result parsed and
stored, and a failure worth it retried, whichever backend ran it.

A backend only reports what it sees (``status``: a ``JobStatus``, with an ``Ending`` once the
job has ended on the cluster) and does what it is told (``resubmit``); the core decides:

- a job whose ``exit.json`` exists has ended, and costs its backend no query;
- a backend's ``Ending`` is judged under the job's lock (two shells following one job must not
  both record or resubmit it): a job another shell recorded or resubmitted meanwhile is taken as
  it is now; a failure with an infrastructure cause, or a FAILED job whose log ends with a known
  flaky signature (``llmb.lifecycle.flaky``), is resubmitted while ``--retries`` allows, on a
  backend that can (``resubmit``); anything else is recorded (``llmb.lifecycle.outcome``);
- a job record the backend updated (an id it found for a submission whose answer was lost) is saved.

``cancel`` leaves the job's cancel marker (so that its end reads as a cancel), asks the backend to
stop it, and waits, through the same judgement, until it ended.
The local supervisor records its job's end through ``record_end`` too.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from typing import TYPE_CHECKING

from llmb.lifecycle.flaky import FlakyFailure, flaky_failure, retry_nan_asked
from llmb.lifecycle.outcome import finish
from llmb.runs import experiment, provenance
from llmb.runs.jobs import (
    RUN_FILE,
    TERMINAL,
    Ending,
    Job,
    JobStatus,
    cancel_requested,
    job_dir,
    job_lock,
    last_iteration,
    load_job,
    now,
    read_exit_checked,
    request_cancel,
    save_job,
    startup_progress,
    wait_until_ended,
    withdraw_cancel,
)
from llmb.runs.runspec import RunSpec

if TYPE_CHECKING:
    from llmb.plugins.host import PluginHost

# How long ``cancel`` waits for a job to end after the backend's stop request, how often it looks, and
# what it calls that request: a backend may say otherwise (``cancel_wait_s``, ``cancel_poll_s``, ``cancel_after``).
CANCEL_WAIT_S, CANCEL_POLL_S, CANCEL_AFTER = 60.0, 0.5, "the request to stop"


def statuses(host: PluginHost, jobs: list[Job]) -> list[JobStatus]:
    """Each job's status, in order: one batched query per backend for the jobs that have not ended."""
    found: dict[int, JobStatus] = {}
    asked: dict[str, list[int]] = {}
    for index, job in enumerate(jobs):
        recorded = _recorded(job)
        if recorded is not None:
            found[index] = recorded
        else:
            asked.setdefault(job.backend, []).append(index)
    for name, members in asked.items():
        impl = host.backend_impl(name)
        seen = impl.status([jobs[i] for i in members])
        for index, status in zip(members, seen, strict=True):
            found[index] = judge(host, impl, jobs[index], status)
    return [found[i] for i in range(len(jobs))]


def status(host: PluginHost, job: Job) -> JobStatus:
    return statuses(host, [job])[0]


def _recorded(job: Job) -> JobStatus | None:
    """The status of a job whose end is recorded; None when it is not (or its record is unreadable:
    the backend says what that means for it)."""
    ended, _ = read_exit_checked(job.id)
    if ended is None:
        return None
    return JobStatus(job, ended["state"], ended.get("reason"), last_iteration(job.log), ended)


def judge(host: PluginHost, impl, job: Job, seen: JobStatus) -> JobStatus:
    """The job's status from what its backend saw: an updated record saved, an ending recorded or retried."""
    if seen.job != job:
        seen = replace(seen, job=_keep(job, seen.job))
    if seen.progress is None:  # the log's last iteration, whichever backend ran the job
        seen = replace(seen, progress=last_iteration(seen.job.log))
    if seen.progress is None and seen.state == "RUNNING" and seen.ending is None:
        seen = replace(seen, progress=startup_progress(seen.job.log))
    if seen.ending is None:
        return seen
    job = seen.job
    with job_lock(job.id):
        fresh = load_job(job.id)
        recorded = _recorded(fresh)
        if recorded is not None:  # another shell recorded its end meanwhile
            return recorded
        if fresh.attempts != job.attempts:  # ... or resubmitted it
            return JobStatus(fresh, "QUEUED", f"resubmitted (attempt {fresh.attempts})", None)
        return _ended(host, impl, job, seen.ending)


def _keep(job: Job, updated: Job) -> Job:
    """Save the record a backend updated, unless another shell changed it first (then that one holds)."""
    with job_lock(job.id):
        fresh = load_job(job.id)
        if fresh != job:
            return fresh
        save_job(updated)
    return updated


def record_end(host: PluginHost, job: Job, ending: Ending) -> dict:
    """Record ``ending`` as the job's end: its result parsed and stored, ``exit.json`` written;
    what was written."""
    return finish(
        host,
        job,
        ending.state,
        ending.reason,
        prefer_log_reason=ending.prefer_log_reason,
        **ending.record,
    )


def _ended(host: PluginHost, impl, job: Job, ending: Ending) -> JobStatus:
    """Retry or record a job that ended (its lock held)."""
    resubmit = getattr(impl, "resubmit", None)
    cause = ending.infrastructure
    flaky = _flaky(host, job) if resubmit and cause is None and ending.state == "FAILED" else None
    state, reason, prefer = ending.state, ending.reason, ending.prefer_log_reason
    where = ending.nodes or "unknown nodes"
    if cause or (flaky and flaky.retry):
        why = cause or flaky.describe()
        retries = job.retry_limit()
        if resubmit and job.attempts <= retries:
            return _retry(impl, job, ending, why)
        reason = f"{why} on {where}" + (
            f" (after {job.attempts - 1} retr{'y' if job.attempts == 2 else 'ies'})"
            if job.attempts > 1
            else ""
        )
        if cause:
            state = "INFRA_FAILED"
        else:  # still the application's failure (FAILED), named by its signature
            prefer = False
            if not retries:
                reason += " (not retried: llmb run --retries N resubmits such failures)"
    elif flaky:  # it follows the run's own NaN
        reason, prefer = f"{flaky.describe()} on {where}, not retried: {flaky.why_not}", False
    written = record_end(
        host, job, replace(ending, state=state, reason=reason, prefer_log_reason=prefer)
    )
    return JobStatus(job, state, written["reason"], last_iteration(job.log), written)


def _run(job: Job) -> dict:
    """The RunSpec the job's ranks read, as its JSON object ({} when it cannot be read)."""
    return experiment.read_json(os.path.join(job_dir(job.id), RUN_FILE)) or {}


def _flaky(host: PluginHost, job: Job) -> FlakyFailure | None:
    """The known flaky signature (the core's and the plugins') at the end of the failed attempt's log.
    The run's environment may opt in to retrying one that follows its own NaN (LLMB_RETRY_NAN=1)."""
    run = _run(job)
    env = run.get("env") if isinstance(run.get("env"), dict) else {}
    return flaky_failure(job.log, host.flaky_signatures(), retry_nan=retry_nan_asked(env))


def _retry(impl, job: Job, ending: Ending, why: str) -> JobStatus:
    """A fresh attempt in a fresh run directory (the failed one keeps what it left), off the nodes
    the cluster now reports unhealthy."""
    unhealthy = getattr(impl, "unhealthy_nodes", None)
    exclude = tuple(unhealthy(ending.nodes)) if unhealthy and ending.nodes else ()
    ended = f"{why} on {ending.nodes or 'unknown nodes'}; retried as attempt {job.attempts + 1}"
    attempts = job.details.get("attempts")
    if attempts:
        job = replace(
            job,
            details={**job.details, "attempts": [*attempts[:-1], {**attempts[-1], "ended": ended}]},
        )
    old = RunSpec.from_dict(_run(job))
    fresh = experiment.create(old.workload, old.experiment)
    spec = old.relocated(old.run_dir, fresh.run_dir)
    recipe = experiment.read_json(os.path.join(old.run_dir, experiment.RECIPE_FILE)) or {}
    recipe.update(
        {"attempt": job.attempts + 1, "retry_of": ending.cluster_id, "submitted_at": now()}
    )
    experiment.write_json(fresh.recipe_file, recipe)
    submitted = (provenance.read(old.run_dir) or {}).get("submission")
    if submitted and (problem := provenance.write_section(fresh.run_dir, "submission", submitted)):
        note(old.log, f"warning: {problem}")  # the retry runs all the same
    label = f"attempt {job.attempts}" + (f" ({ending.label})" if ending.label else "")
    excluded = f", excluding {','.join(exclude)}" if exclude else ""
    note(old.log, f"{label} ended: {ended}, a fresh job{excluded}: {spec.log}")
    note(
        spec.log,
        f"retry of attempt {job.attempts} ({ending.label + ', ' if ending.label else ''}{why}); "
        f"its log: {old.log}",
    )
    job = impl.resubmit(job, spec, exclude)
    save_job(job)
    return JobStatus(job, "QUEUED", ended)


def cancel(host: PluginHost, job: Job) -> JobStatus:
    """Stop the job and return once it has really ended (or say that it has not)."""
    current = status(host, job)
    if current.state in TERMINAL:
        return current
    impl = host.backend_impl(job.backend)
    asked_before = cancel_requested(job.id)
    with contextlib.suppress(OSError):  # a backend that must say so does (the local one)
        # first: an end that follows is a cancel, and a starting job starts no rank
        request_cancel(job.id)
    try:
        seen = impl.cancel(current.job)
    except BaseException:
        if not asked_before:  # not cancelled: an end that follows is not a cancel
            withdraw_cancel(job.id)
        raise
    if seen.job != current.job:  # an id the backend found on the way
        seen = replace(seen, job=_keep(current.job, seen.job))
    if seen.ending is not None or seen.state in TERMINAL or getattr(impl, "cancel_is_final", False):
        return _cancelled(host, impl, seen)
    wait, poll = (
        getattr(impl, "cancel_wait_s", CANCEL_WAIT_S),
        getattr(impl, "cancel_poll_s", CANCEL_POLL_S),
    )
    return wait_until_ended(
        lambda: status(host, seen.job), wait, poll, getattr(impl, "cancel_after", CANCEL_AFTER)
    )


def _cancelled(host: PluginHost, impl, seen: JobStatus) -> JobStatus:
    """A cancel the backend finished at once: its ending recorded (what could not be, said)."""
    if seen.ending is None:
        return seen
    try:
        return judge(host, impl, seen.job, seen)
    except OSError as exc:
        from llmb.runs.jobs import describe_os_error

        return JobStatus(
            seen.job,
            seen.ending.state,
            f"{seen.reason or seen.ending.reason}; its end could not be "
            f"recorded: {describe_os_error(exc)}",
            seen.progress,
        )


def note(log: str, text: str) -> None:
    """A line from llmb itself in the run's log."""
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(f"[llmb] {text}\n")
