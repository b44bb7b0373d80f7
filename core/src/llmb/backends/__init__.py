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
    def submit(self, spec: RunSpec, job: Job, submit: SubmitOptions) -> Job:
        """Start ``spec`` as ``job`` (its directory exists); return the job with any details added.
        A submission the cluster refuses raises ``UsageError`` with the cluster's reason."""

    def status(self, jobs: list[Job]) -> list[JobStatus]:
        """The state of every job, in one go (a cluster backend makes one query for all)."""

    def cancel(self, job: Job) -> JobStatus:
        """Stop the job and return once it has really ended (or say that it has not)."""

    def describe(self, spec: RunSpec, job: Job, submit: SubmitOptions) -> dict:
        """What ``submit`` would do, as JSON (``llmb run --dry-run``): the script, the
        requests, the commands. Writes nothing, sends nothing, and shows no secret."""

    def log_path(self, job: Job) -> str | None:
        """Where the job's main log can be read from here, if anywhere."""


@dataclass(frozen=True)
class Backend:
    name: str
    description: str
    load: Callable[[], BackendImpl]
    # The environment variables that hold the backend's credentials: like HF_TOKEN, never accepted
    # through --env (which writes values into the job's files), whichever backend a run goes to.
    secrets: tuple[str, ...] = ()
