"""A suite's verdict: every run judged by the gates, the best run of each
configuration, and one verdict per workload.

Runs of the same configuration (workload, variant, size, GPU type, dtype,
GPU count, scaling) are merged across repeats and ``--rerun`` attempts: a
configuration passes when one of its runs passes every gate (the fastest
such run is shown); it is ``pending`` while none passed and one has not
ended, else it fails (its latest run is shown). A workload passes when each
of its configurations does; the suite passes when every workload does.

A proxy run (``--proxy``, ``--layers``) that meets every gate is
``exercised``, never ``pass``: it shows the workflow, the scheduler and the
nodes work, but a scaled-down model certifies nothing. A workload or suite
whose configurations all passed or were exercised, one at least exercised,
is ``exercised``; ``passed`` (and ``certified``) is true only for a suite
whose every run was full size and passed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llmb.certify.gates import Gate, judge, passed
from llmb.certify.suite import Attempt, Suite
from llmb.errors import LlmbError
from llmb.lifecycle.sweep_runner import request_for, statuses
from llmb.recipes.records import TESTED
from llmb.results.collect import Collector
from llmb.results.experiments import RunLocation, find_runs
from llmb.results.records import RunResult
from llmb.runs.jobs import TERMINAL, Job, load_job
from llmb.runs.sweeps import Task

if TYPE_CHECKING:
    from llmb.plugins.host import PluginHost  # the caller's one host (llmb.cli.get_host)

PASS, FAIL, PENDING, NOT_RUN = "pass", "fail", "pending", "not run"
EXERCISED = "exercised"  # a proxy run that met every gate: it ran, but certifies nothing
MET = (PASS, EXERCISED)  # every gate met


def configuration(task: Task) -> tuple:
    return (
        task.workload,
        task.variant,
        task.size,
        task.gpu,
        task.dtype,
        task.gpus,
        task.strong_scaling,
    )


def configuration_label(task: Task) -> str:
    """``8b h100 bf16 512 GPUs (nemo2)``: the configuration without its workload."""
    scaling = " strong" if task.strong_scaling else ""
    variant = f" ({task.variant})" if task.variant else ""
    return (
        f"{task.size or '-'} {task.gpu or '-'} {task.dtype or '-'} {task.gpus} GPU{'s' if task.gpus != 1 else ''}"
        f"{scaling}{variant}"
    )


@dataclass(frozen=True)
class Judged:
    """One job of the suite and what its gates say."""

    task: Task
    job_id: str
    attempt: Attempt
    state: str  # the job's state; UNKNOWN when its record cannot be read
    result: RunResult | None = None
    gates: tuple[Gate, ...] = ()
    problem: str | None = None

    @property
    def proxy(self) -> bool:
        """A scaled-down run (``--proxy``, ``--layers``), as the task asked or its recipe says."""
        options = self.task.options or {}
        return bool(
            options.get("proxy")
            or options.get("layers")
            or (self.result is not None and self.result.context.proxy)
        )

    @property
    def verdict(self) -> str:
        if self.problem is None and self.state not in TERMINAL:
            return PENDING
        if self.result is None or not passed(list(self.gates)):
            return FAIL
        return EXERCISED if self.proxy else PASS

    @property
    def step_ms(self) -> float:
        stats = self.result.stats if self.result else None
        return stats.time_mean_ms if stats and stats.time_mean_ms else float("inf")


@dataclass
class Configuration:
    task: Task  # the suite's (first repeat)
    runs: list[Judged] = field(default_factory=list)
    # its recipe's word for its GPU count (``Recipe.scale_status``: tested, not tested, not validated), and
    # where it is not tested, the resolution's warning saying so; None where it does not resolve or is a proxy
    scale_status: str | None = None
    untested: str | None = None

    @property
    def best(self) -> Judged | None:
        for verdict in MET:  # a full-size pass over an exercised proxy
            passing = [r for r in self.runs if r.verdict == verdict]
            if passing:
                return min(passing, key=lambda r: r.step_ms)
        pending = [r for r in self.runs if r.verdict == PENDING]
        return (pending or self.runs or [None])[-1]

    @property
    def verdict(self) -> str:
        return self.best.verdict if self.best else NOT_RUN


@dataclass
class SuiteVerdict:
    suite: Suite
    configurations: list[Configuration]

    def workloads(self) -> dict[str, str]:
        found: dict[str, list[str]] = {}
        for config in self.configurations:
            found.setdefault(config.task.workload, []).append(config.verdict)
        return {w: _merged(v) for w, v in found.items()}

    @property
    def verdict(self) -> str:
        """``fail`` when a workload failed, else ``pending`` while one runs, else ``exercised`` when a
        workload ran as a proxy, else ``pass``."""
        found = set(self.workloads().values())
        for verdict in (FAIL, PENDING, EXERCISED):
            if verdict in found:
                return verdict
        return PASS if found else FAIL

    @property
    def passed(self) -> bool:
        """Certified: every workload passed at full size (an exercised proxy suite did not)."""
        return self.verdict == PASS

    def to_dict(self) -> dict:
        """``llmb certify status --json``."""
        suite = self.suite
        jobs = suite.jobs_by_workload()
        return {
            "suite": suite.id,
            "created_at": suite.created_at,
            "gpu": suite.gpu,
            "scale": suite.scale,
            "proxy": suite.proxy,
            "source": suite.source,
            "verdict": self.verdict,
            "passed": self.passed,
            "certified": self.passed,
            "notes": suite.notes,
            "workloads": {
                w: {"verdict": v, "jobs": jobs.get(w, [])} for w, v in self.workloads().items()
            },
            "configurations": [
                {
                    "workload": c.task.workload,
                    "configuration": configuration_label(c.task),
                    "verdict": c.verdict,
                    "job": c.best.job_id if c.best else None,
                    "state": c.best.state if c.best else None,
                    "status": c.best.result.status if c.best and c.best.result else None,
                    "problem": c.best.problem if c.best else None,
                    "scale_status": c.scale_status,
                    "untested": c.untested,
                    "gates": {g.name: g.to_dict() for g in c.best.gates} if c.best else {},
                    "runs": [
                        {
                            "job": r.job_id,
                            "sweep": r.attempt.sweep,
                            "rerun": r.attempt.rerun,
                            "state": r.state,
                            "verdict": r.verdict,
                        }
                        for r in c.runs
                    ],
                }
                for c in self.configurations
            ],
        }


def _merged(verdicts: list[str]) -> str:
    """A workload's verdict from its configurations'."""
    if PENDING in verdicts:
        return PENDING
    if not verdicts or not set(verdicts) <= set(MET):
        return FAIL
    return EXERCISED if EXERCISED in verdicts else PASS


def _location(job: Job) -> RunLocation:
    found = find_runs([job.run_dir]) if os.path.isdir(job.run_dir) else []
    return (
        found[0]
        if found
        else RunLocation(None, job.run_dir, job.experiment, os.path.basename(job.run_dir))
    )


def scale_of(host: PluginHost, task: Task) -> tuple[str | None, str | None]:
    """(``Recipe.scale_status`` of the task's recipe, the resolution's warning where that is not
    ``tested``): a suite file may ask for a GPU count its recipe does not test (Nemotron-4's 192 between 128
    and 256), which a certification then says, never calling it validated. (None, None) for a proxy (it
    runs the recipe at its smallest tested scale) and where the task does not resolve (its runs say why)."""
    if (task.options or {}).get("proxy") or (task.options or {}).get("layers"):
        return None, None
    try:
        recipe = host.resolve(request_for(task))
    except (LlmbError, ValueError):
        return None, None
    status = recipe.scale_status
    if status == TESTED:
        return status, None
    return status, next((w for w in recipe.warnings if status in w), status)


def judge_suite(host: PluginHost, suite: Suite) -> SuiteVerdict:
    configurations: dict[tuple, Configuration] = {}
    for task in suite.tasks:
        configurations.setdefault(
            configuration(task), Configuration(task, [], *scale_of(host, task))
        )
    loaded: list[tuple[Task, Job, Attempt]] = []
    for task, job_id, attempt in suite.jobs():
        try:
            loaded.append((task, load_job(job_id), attempt))
        except LlmbError as exc:
            run = Judged(task, job_id, attempt, "UNKNOWN", problem=str(exc))
            configurations.setdefault(configuration(task), Configuration(task)).runs.append(run)
    collector = Collector(host)
    for (task, job, attempt), status in zip(
        loaded, statuses(host, [j for _, j, _ in loaded]), strict=True
    ):
        result = collector.collect_one(_location(job)).result
        run = Judged(
            task,
            job.id,
            attempt,
            status.state,
            result,
            tuple(judge(result)),
        )
        configurations.setdefault(configuration(task), Configuration(task)).runs.append(run)
    return SuiteVerdict(suite, list(configurations.values()))
