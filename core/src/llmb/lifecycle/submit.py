"""Submitting a prepared run (``llmb.lifecycle.prepare``), or describing it (a dry run).

``submit`` claims the job id and the experiment directory the run was prepared with, then writes, in this
order: provenance's submission section (``llmb.lifecycle.provenance``), ``recipe.json`` (the plan, plus what
actually runs), the warnings into the log, the job record; then hands the ``RunSpec`` to the backend and
saves the record it returns. ``describe`` asks the backend what it would do, writing and sending nothing.
``submit_run`` is ``llmb run``'s whole path: prepare, then submit or describe; ``submit_fresh`` prepares
again when a claim was taken (``llmb.lifecycle.prepare`` says why that is safe).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from llmb.errors import LlmbError, UsageError
from llmb.lifecycle import provenance
from llmb.lifecycle.prepare import Prepared, prepare
from llmb.plugins.host import PluginHost
from llmb.recipes.planning import Plan
from llmb.recipes.records import RecipeRequest
from llmb.runs import experiment
from llmb.runs.jobs import (
    Job,
    JobStoreError,
    NothingSubmitted,
    Unconfirmed,
    claim_job_dir,
    discard_job_dir,
    now,
    save_job,
)
from llmb.runs.runspec import RunOptions, RunSpec, SubmitOptions

# How often a run is prepared again when its job id or experiment directory was taken in between (each
# time is a fresh random id and the next free timestamp: more than one retry is already unheard of).
ATTEMPTS = 10


@dataclass(frozen=True)
class Submitted:
    job: Job
    spec: RunSpec
    plan: Plan | None
    warnings: tuple[str, ...]
    # a dry run: what the backend would do (nothing was written or sent)
    description: dict | None = None
    # what the backend was given: the options, with the derived time limit
    submit: SubmitOptions | None = None
    # the warning that its steps end before the statistics window (Prepared.too_short)
    too_short: str | None = None


class Taken(LlmbError):
    """The job id or the experiment directory a run was prepared with was taken by another submission
    in between: prepare it again. Nothing of the run was written."""


def describe(host: PluginHost, prepared: Prepared, backend_name: str) -> Submitted:
    """A dry run: what the backend would do with the prepared run; nothing is written or sent."""
    description = host.backend_impl(backend_name).describe(
        prepared.spec, prepared.job, prepared.submit
    )
    # what every backend would run, in the same words whichever backend describes it (a backend's own
    # run_spec, where it gives one, is this one)
    description = {**description, "run_spec": prepared.spec.to_dict()}
    if prepared.would_refuse:  # llmb's own refusals, first among what would stop a real run
        problems = [*prepared.would_refuse, *description.get("problems", ())]
        description = {**description, "problems": problems}
    return Submitted(
        prepared.job,
        prepared.spec,
        prepared.plan,
        prepared.warnings,
        description,
        prepared.submit,
        prepared.too_short,
    )


def _claim(prepared: Prepared) -> None:
    """Create the job's directory and the experiment's, exactly as prepared (``Taken`` when either is not free)."""
    if claim_job_dir(prepared.job.id) is None:
        raise Taken(f"job id {prepared.job.id} is taken")
    if not experiment.claim(prepared.where):
        discard_job_dir(prepared.job.id)
        raise Taken(f"{prepared.where.run_dir} is taken")


def submit(host: PluginHost, prepared: Prepared, backend_name: str) -> Submitted:
    """Write the experiment and the job record, then submit to the backend."""
    _claim(prepared)
    spec, where, warnings = prepared.spec, prepared.where, list(prepared.warnings)
    if problem := provenance.record_submission(
        where.run_dir,
        host,
        backend_name,
        spec,
        prepared.submit,
        prepared.container,
        prepared.secret_names,
    ):
        # before the job exists: the job's side is merged into the file later
        warnings.append(problem)
    if prepared.preflight and (
        problem := provenance.write_section(where.run_dir, "preflight", prepared.preflight)
    ):
        warnings.append(problem)
    submitted_at = now()
    experiment.write_json(
        where.recipe_file, {**prepared.record, "warnings": warnings, "submitted_at": submitted_at}
    )
    with open(where.log, "a", encoding="utf-8") as handle:
        for warning in warnings:
            handle.write(f"[llmb] warning: {warning}\n")

    job = replace(prepared.job, submitted_at=submitted_at)
    job = hand_over(host, backend_name, spec, job, prepared.submit)
    return Submitted(
        job,
        spec,
        prepared.plan,
        tuple(warnings),
        submit=prepared.submit,
        too_short=prepared.too_short,
    )


def hand_over(
    host: PluginHost, backend_name: str, spec: RunSpec, job: Job, options: SubmitOptions
) -> Job:
    """Give the job to its backend: its record saved first (a job llmb was stopped while submitting is
    found later), the record the backend returns saved after. A refusal (``UsageError``) or a submission
    that left nothing on the cluster (``NothingSubmitted``) removes the job; an ``Unconfirmed`` one is
    kept as far as it is known, for status to find."""
    save_job(job)
    try:
        job = host.backend_impl(backend_name).submit(spec, job, options)
    except Unconfirmed as exc:
        save_job(exc.job)
        raise
    except (UsageError, NothingSubmitted):
        discard_job_dir(job.id)
        raise
    save_job(job)
    return job


def submit_fresh(
    host: PluginHost, prepare_once: Callable[[], Prepared], backend_name: str
) -> Submitted:
    """Submit what ``prepare_once`` prepares; prepared again (a fresh job id, the next free experiment
    directory) when another submission took its job id or directory in between."""
    for _ in range(ATTEMPTS):
        try:
            return submit(host, prepare_once(), backend_name)
        except Taken:
            continue
    raise JobStoreError(
        f"could not claim a job id and an experiment directory in {ATTEMPTS} tries: other "
        f"submissions took each one first; try again."
    )


def submit_run(
    host: PluginHost,
    request: RecipeRequest,
    options: RunOptions,
    backend_name: str = "local",
    dry_run: bool = False,
    strict: bool = False,
) -> Submitted:
    """``llmb run``: prepare and submit; with ``dry_run``, prepare and ask the backend what it would do,
    writing and sending nothing: what this machine could not run is then among the description's
    problems, unless ``strict`` (a sweep's check of its tasks before it submits any) refuses it as a
    submission would."""
    if dry_run:
        prepared = prepare(host, request, options, backend_name, describing=not strict)
        return describe(host, prepared, backend_name)
    return submit_fresh(host, lambda: prepare(host, request, options, backend_name), backend_name)
