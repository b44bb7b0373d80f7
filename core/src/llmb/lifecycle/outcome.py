"""A finished job's outcome recorded: its log parsed, the result stored, ``exit.json`` written.
Only ``llmb.lifecycle.reconcile`` calls it, once it has judged that a job ended, so ``llmb
status``, ``llmb results`` and the summary agree whichever backend ran it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmb.runs.jobs import Job, now, write_exit

if TYPE_CHECKING:
    from llmb.plugins.host import PluginHost


@dataclass(frozen=True)
class Recorded:
    # the results row (``llmb.results.export.row``), or None when the log could not be read
    summary: dict | None
    run_id: int | None  # its id in the results database
    error: str | None = None  # why there is no summary


def record_result(host: PluginHost, log: str, job_state: str | None = None) -> Recorded:
    """Parse ``log`` and store its result (``llmb results`` reads it back); ``job_state`` is the
    state the job is ending in (its exit record is written after this).
    Never raises: a parse or storage problem must not lose the job's state."""
    try:
        from dataclasses import replace

        from llmb.results.collect import Collector
        from llmb.results.experiments import context_for, find_runs
        from llmb.results.export import row
        from llmb.results.store import open_or_none

        location = find_runs([log])[0]
        context = replace(context_for(location, host.workloads()), job_state=job_state)
        collected = Collector(host, open_or_none).collect_one(
            location, rescan=True, context=context
        )
        return Recorded(
            row(collected.result, name=location.short_name, run_id=collected.run_id),
            collected.run_id,
        )
    except Exception as exc:  # noqa: BLE001
        return Recorded(
            None, None, f"could not parse or store the result: {type(exc).__name__}: {exc}"
        )


def log_failure(summary: dict | None) -> str | None:
    """The failure the log itself names (an exception, an OOM, ...), if any."""
    if summary and summary.get("status") == "failed":
        return summary.get("failure_reason") or None
    return None


def finish(
    host: PluginHost, job: Job, state: str, reason: str | None, *, prefer_log_reason: bool, **extra
) -> dict:
    """Record the result of ``job`` and write its ``exit.json``; return what was written.

    ``prefer_log_reason``: a FAILED job takes its reason from the log when the
    log names one (a rank that raised says why; a rank killed by a signal
    could not, and what the others printed afterwards would mislead).
    """
    summary = host.pm.hook.llmb_job_summary(job=job)
    if summary is not None:  # no training run (llmb preflight's job): its own summary
        data = {
            "state": state,
            "reason": reason,
            "ended_at": now(),
            "result": None,
            job.workload: summary,
            **extra,
        }
        write_exit(job.id, data)
        return data
    recorded = record_result(host, job.log, state)
    if state == "FAILED" and prefer_log_reason:
        reason = log_failure(recorded.summary) or reason
    data = {
        "state": state,
        "reason": reason,
        "ended_at": now(),
        "result": recorded.summary,
        "run_id": recorded.run_id,
        **extra,
    }
    if recorded.error:
        data["result_error"] = recorded.error
    write_exit(job.id, data)
    return data
