"""Backends: where runs go. ``local`` (this machine) lives here; cluster
backends are their own distributions (``llmb-backend-slurm``, ...), all
registered through ``llmb_backends``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # importing a backend's record must stay cheap: plugins register them at start-up
    from llmb.runs.jobs import Job, JobStatus
    from llmb.runs.runspec import RunSpec, SubmitOptions


class BackendImpl(Protocol):
    """What a backend does; the core does the rest (``llmb.lifecycle``): it prepares the run, writes
    the experiment and the job record, asks for status, judges a job's end, records it, and retries.
    Optional members: ``resubmit`` and ``unhealthy_nodes`` (a backend that can retry), ``check``
    (options refused before anything is written), ``cancel_wait_s``/``cancel_poll_s``/``cancel_after``
    (how the core waits after ``cancel``), ``cancel_is_final`` (``cancel`` itself waits)."""

    def submit(self, spec: RunSpec, job: Job, submit: SubmitOptions) -> Job:
        """Start ``spec`` as ``job`` (its directory and record exist); return the job with any details added.
        A submission the cluster refuses raises ``UsageError`` with the cluster's reason, one that left
        nothing on the cluster ``NothingSubmitted``: the core then removes the job. ``Unconfirmed``
        (with the job as known) when whether the cluster took it cannot be told yet: the core keeps it."""

    def status(self, jobs: list[Job]) -> list[JobStatus]:
        """The state of every job, in one go (a cluster backend makes one query for all), for jobs
        whose end is not recorded. A job that ended carries an ``Ending``: the core records it (or
        retries). A status whose ``job`` differs from the one asked about (an id found) is saved."""

    def cancel(self, job: Job) -> JobStatus:
        """Ask for the job to stop (the cancel marker left first, ``request_cancel``); the core then
        waits until ``status`` says it ended. A job that ends at once returns its ``Ending``."""

    def describe(self, spec: RunSpec, job: Job, submit: SubmitOptions) -> dict:
        """What ``submit`` would do, as JSON (``llmb run --dry-run``): the script, the
        requests, the commands. Writes nothing, sends nothing, and shows no secret."""

    def log_path(self, job: Job) -> str | None:
        """Where the job's main log can be read from here, if anywhere."""

    def resubmit(self, job: Job, spec: RunSpec, exclude: tuple[str, ...]) -> Job:
        """(Optional: a backend that retries.) A fresh attempt of ``job`` for ``spec``, whose fresh run
        directory the core made, kept off the nodes in ``exclude``; the job with the attempt added."""


@dataclass(frozen=True)
class Backend:
    name: str
    description: str
    load: Callable[[], BackendImpl]
    # The environment variables that hold the backend's credentials: like HF_TOKEN, never accepted
    # through --env (which writes values into the job's files), whichever backend a run goes to.
    secrets: tuple[str, ...] = ()
