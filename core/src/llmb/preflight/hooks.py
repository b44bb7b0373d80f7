"""``llmb preflight``'s job as a plugin: its end records the report's verdict
(``llmb_job_summary``), not a training result. Registered by name by ``llmb.plugins.host``."""

from __future__ import annotations

from llmb import hookimpl


@hookimpl
def llmb_job_summary(job) -> dict | None:
    from llmb.preflight.job import WORKLOAD, finish_summary

    return finish_summary(job) if job.workload == WORKLOAD else None
