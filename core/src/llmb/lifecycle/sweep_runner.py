"""Running a sweep: check every task, then submit and follow them.

Every task is first checked the way ``llmb run --dry-run`` checks a run
(recipe, machine, backend settings): nothing is submitted unless all pass,
and each failing task is reported with its reason. Then tasks are submitted
``max_parallel`` at a time (0: all at once; the local backend runs one at a
time, so runs do not share this machine's cores) and followed with one
status query per backend per poll until every job has ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from llmb.errors import LlmbError
from llmb.lifecycle.submit import Submitted, submit_run
from llmb.plugins.host import PluginHost
from llmb.recipes.overrides import parse_overrides
from llmb.recipes.records import RecipeRequest
from llmb.runs.jobs import TERMINAL, Job, JobStatus, load_job, now
from llmb.runs.sweeps import Sweep, Task, new_sweep_id, save_sweep

POLL_S = 1.0


@dataclass
class Checked:
    task: Task
    planned: Submitted | None = None  # the dry run's plan
    error: str | None = None


def request_for(task: Task) -> RecipeRequest:
    return RecipeRequest(
        workload=task.workload,
        size=task.size,
        gpu=task.gpu,
        dtype=task.dtype,
        gpus=task.gpus,
        variant=task.variant,
        strong_scaling=task.strong_scaling,
        gpus_per_node=task.gpus_per_node,
        overrides=parse_overrides(tuple(f"{k}={v}" for k, v in task.overrides.items())),
    )


def inputs_for(task: Task, base: dict):
    """(request, RunOptions, backend) of a task: the command line's run options, then the task's own
    (and the cluster file on a cluster backend)."""
    from llmb.lifecycle.run_option_values import run_inputs

    return run_inputs({**base, **task.options}, request_for(task))


def check(host: PluginHost, tasks: list[Task], base: dict) -> list[Checked]:
    checked = []
    for task in tasks:
        try:
            request, options, backend = inputs_for(task, base)
            # checked as its submission will be: a task this machine cannot run is refused here
            submitted = submit_run(host, request, options, backend, dry_run=True, strict=True)
            checked.append(Checked(task, submitted))
        except LlmbError as exc:
            checked.append(Checked(task, error=str(exc)))
    return checked


def statuses(host: PluginHost, jobs: list[Job]) -> list[JobStatus]:
    """Each job's status, in order, with one batched query per backend (``llmb.lifecycle.reconcile``)."""
    from llmb.lifecycle.reconcile import statuses as reconciled

    return reconciled(host, jobs)


def default_parallel(backends: set[str], max_parallel: int | None) -> int:
    """Jobs at a time: as asked, else one on the local backend (runs would share this machine's cores), all on a
    cluster."""
    return max_parallel if max_parallel is not None else (1 if backends == {"local"} else 0)


@dataclass
class Counts:
    queued: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0

    def line(self, sweep: Sweep, name: str | None = None) -> str:
        """The progress line, headed by ``name`` (what the user started: a certification's id) or the
        sweep's id."""
        return (
            f"{name or sweep.id}: {self.queued} queued, {self.running} running, {self.done} done, {self.failed} failed "
            f"(of {len(sweep.tasks)})"
        )


def counts(states: list[str | None]) -> Counts:
    c = Counts()
    for state in states:
        if state in (None, "QUEUED"):
            c.queued += 1
        elif state == "SUCCEEDED":
            c.done += 1
        elif state in TERMINAL:
            c.failed += 1
        else:
            c.running += 1
    return c


class SweepRun:
    """Submits and follows one sweep; ``states[i]`` is task i's last known state."""

    def __init__(
        self,
        host: PluginHost,
        tasks: list[Task],
        base: dict,
        backend: str,
        max_parallel: int,
        progress: Callable[[str], None],
        name: str | None = None,
    ):
        self.name = name  # what the progress lines are headed by (default: the sweep's id)
        self.host = host
        self.base = base
        self.max_parallel = max_parallel
        self.progress = progress
        self.sweep = Sweep(
            id=new_sweep_id(),
            created_at=now(),
            backend=backend,
            tasks=tasks,
            jobs=[None] * len(tasks),
        )
        self.states: list[str | None] = [None] * len(tasks)
        self.finals: list[JobStatus | None] = [None] * len(tasks)
        self.errors: list[str | None] = [None] * len(tasks)
        save_sweep(self.sweep)

    def submit(self, index: int) -> None:
        task = self.sweep.tasks[index]
        try:
            request, options, backend = inputs_for(task, self.base)
            submitted = submit_run(self.host, request, options, backend)
        except LlmbError as exc:  # checked before, but a cluster may still refuse
            self.states[index], self.errors[index] = "FAILED", f"not submitted: {exc}"
            return
        self.sweep.jobs[index] = submitted.job.id
        self.states[index] = "QUEUED"
        save_sweep(self.sweep)

    def poll(self, active: list[int]) -> None:
        found = statuses(self.host, [load_job(self.sweep.jobs[index]) for index in active])
        for index, status in zip(active, found, strict=True):
            self.states[index] = status.state
            if status.state in TERMINAL:
                self.finals[index] = status

    def run(self, detach: bool = False) -> Sweep:
        pending = list(range(len(self.sweep.tasks)))
        if detach:
            for index in pending:
                self.submit(index)
            return self.sweep
        shown = None
        while True:
            active = [
                i for i, j in enumerate(self.sweep.jobs) if j and self.states[i] not in TERMINAL
            ]
            while pending and (self.max_parallel == 0 or len(active) < self.max_parallel):
                index = pending.pop(0)
                self.submit(index)
                if self.sweep.jobs[index]:
                    active.append(index)
            if active:
                self.poll(active)
            line = counts(self.states).line(self.sweep, self.name)
            if line != shown:
                self.progress(line)
                shown = line
            if not pending and all(s in TERMINAL for s in self.states):
                return self.sweep
            time.sleep(POLL_S)


def problems(checked: list[Checked]) -> str | None:
    """One paragraph per invalid task, or None when every task can run."""
    bad = [c for c in checked if c.error]
    if not bad:
        return None
    lines = [f"{len(bad)} of {len(checked)} sweep tasks cannot run; nothing was submitted:"]
    lines += [f"  - {c.task.label} ({c.task.source}): {c.error}" for c in bad]
    return "\n".join(lines)
