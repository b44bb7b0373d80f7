"""What a certification runs, and its record.

By default the suite is every installed workload's published configurations
(the recipe documents' performance tables) for one GPU type, each at the
suite's scale (the Exemplar scale, 512 GPUs), or, where a configuration is
not published at that scale, at its nearest published scale below it. A
proxy suite runs every configuration on ``scale`` ranks of a scaled-down
model. A suite file (the sweep-file format, docs/sweeps.md) gives the
tasks explicitly.

Each suite lives in ``<install>/certify/<suite id>/suite.json``: the
request (GPU type, scale, proxy), the tasks with their run options, notes
on what was chosen, and the attempts: the first run of the suite and every
``--rerun``, each a sweep (``<install>/sweeps/<sweep id>``) whose jobs are
the suite's jobs for the workloads it ran. A record that is there but
cannot be used (cut short, not JSON, the wrong shape, a FIFO) is reported
as corrupt, naming the file and what is wrong, never as a missing suite.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import asdict, dataclass, field, replace

from llmb.errors import UsageError
from llmb.paths import install_dir
from llmb.runs.experiment import (
    StateFileError,
    load_json_state,
    record_fields,
    write_json,
    wrong_shape,
)
from llmb.runs.jobs import now
from llmb.runs.sweeps import (
    LAST,
    Task,
    ids_by_recency,
    load_sweep,
    published_configurations,
    unpublished_configurations,
    with_gpu,
)

SUITE_FILE = "suite.json"
EXEMPLAR_SCALE = 512  # GPUs: the scale the Exemplar validation guide certifies at
# run options that profile or trace a run
PROFILE_OPTIONS = ("profile", "gpu_metrics", "nccl_trace")


@dataclass
class Attempt:
    """One submission of (part of) the suite: a sweep."""

    sweep: str
    workloads: list[str]
    started_at: str
    rerun: bool = False


@dataclass
class Suite:
    id: str
    created_at: str
    gpu: str | None
    scale: int | None  # None: a suite file's own scales
    proxy: bool
    source: str  # "published" or the suite file's path
    tasks: list[Task]
    notes: list[str] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)

    def workloads(self) -> list[str]:
        return list(dict.fromkeys(t.workload for t in self.tasks))

    def tasks_of(self, workload: str) -> list[Task]:
        found = [t for t in self.tasks if t.workload == workload]
        if not found:
            raise UsageError(
                f"suite {self.id} has no workload {workload!r}; its workloads: "
                f"{', '.join(self.workloads())}."
            )
        return found

    def jobs(self) -> list[tuple[Task, str, Attempt]]:
        """(task as submitted, job id, attempt) of every submitted job, in submission order."""
        found = []
        for attempt in self.attempts:
            try:
                sweep = load_sweep(attempt.sweep)
            except UsageError:
                # the sweep's record is gone: its jobs are unknown (the verdict shows none)
                continue
            found += [
                (task, job, attempt)
                for task, job in zip(sweep.tasks, sweep.jobs, strict=False)
                if job
            ]
        return found

    def jobs_by_workload(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {w: [] for w in self.workloads()}
        for task, job, _ in self.jobs():
            found.setdefault(task.workload, []).append(job)
        return found

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "created_at": self.created_at,
            "gpu": self.gpu,
            "scale": self.scale,
            "proxy": self.proxy,
            "source": self.source,
            "tasks": [asdict(t) for t in self.tasks],
            "notes": self.notes,
            "attempts": [asdict(a) for a in self.attempts],
        }


def suites_root() -> str:
    return os.path.join(install_dir(), "certify")


def suite_dir(suite_id: str) -> str:
    return os.path.join(suites_root(), suite_id)


def new_suite(
    gpu: str | None,
    scale: int | None,
    proxy: bool,
    source: str,
    tasks: list[Task],
    notes: list[str],
) -> Suite:
    return Suite(
        id=f"cert-{secrets.token_hex(3)}",
        created_at=now(),
        gpu=gpu,
        scale=scale,
        proxy=proxy,
        source=source,
        tasks=tasks,
        notes=notes,
    )


def save_suite(suite: Suite) -> None:
    os.makedirs(suite_dir(suite.id), exist_ok=True)
    write_json(os.path.join(suite_dir(suite.id), SUITE_FILE), suite.to_dict())


def load_suite(suite_id: str | None) -> Suite:
    """The suite ``suite_id`` (None or ``last``: the most recent); UsageError naming the known ones;
    StateFileError, saying it is corrupt and why, when its record is there but cannot be used (cut short,
    not JSON, the wrong shape, a FIFO or anything but a regular file: never waited on)."""
    known = ids_by_recency(suites_root(), SUITE_FILE)
    if suite_id in (None, LAST):
        if not known:
            raise UsageError(
                f"there are no certification suites in {suites_root()} yet; start one with "
                f"llmb certify --gpu GPU."
            )
        suite_id = known[0]
    path = os.path.join(suite_dir(suite_id), SUITE_FILE)
    try:
        data = load_json_state(path) if "/" not in suite_id else None
        try:
            suite = (
                None
                if data is None
                else Suite(
                    **record_fields(
                        Suite,
                        {"gpu": None, "scale": None, "proxy": False, "source": "", **data},
                        "the record",
                        {"Task": Task, "Attempt": Attempt},
                    )
                )
            )
        except ValueError as exc:
            raise wrong_shape(path, exc) from None
    except StateFileError as exc:
        raise exc.about(
            f"certification suite {suite_id!r}", f"move {suite_dir(suite_id)} away to drop it."
        ) from None
    if suite is None:
        hint = f"known suites: {', '.join(known[:5])}" if known else "there are no suites yet"
        raise UsageError(
            f"no certification suite {suite_id!r} in {suites_root()} ({hint}; 'last' is the most "
            f"recent)."
        )
    return suite


def archive_roots(suite: Suite) -> list[tuple[str, str]]:
    """What ``llmb archive --suite`` packs, as (directory, name in the archive): the suite's record, the
    sweeps of its attempts and the run directory of each of its jobs, named from the install directory."""
    from llmb.runs.jobs import Job, read_job
    from llmb.runs.sweeps import sweeps_root

    install = install_dir()
    directories = [suite_dir(suite.id)] + [
        os.path.join(sweeps_root(), a.sweep) for a in suite.attempts
    ]
    for _, job_id, _ in suite.jobs():
        job = read_job(job_id)
        if isinstance(job, Job):
            directories.append(job.run_dir)
    found = [d for d in dict.fromkeys(directories) if os.path.isdir(d)]
    # a run directory outside the install keeps its name only
    names = [os.path.relpath(d, install) for d in found]
    return [
        (d, os.path.join("elsewhere", os.path.basename(d)) if n.startswith(os.pardir) else n)
        for d, n in zip(found, names, strict=True)
    ]


# ------------------------------------------------------------------ building the tasks


def published_suite(
    workloads: dict, gpu: str, scale: int, repeats: int, proxy: bool
) -> tuple[list[Task], list[str]]:
    """The published configurations of ``gpu`` at ``scale`` (tasks, notes on what was chosen): every
    configuration that has a figure a run of it is judged by, by the one reference policy plan, results,
    compare and report use (``llmb.runs.sweeps.survey``: its own recipe's figure, else another public
    document's, such as Megatron-Bridge's performance summary, at exactly its GPU count and batch), at a
    GPU count its recipe tests; each task's ``source`` names that figure."""
    tasks, notes = [], []
    if proxy:
        notes.append(
            f"proxy suite: every configuration runs on {scale} ranks of a scaled-down model and is not "
            f"compared with the published figures; certifying a cluster needs full-size runs"
        )
    configurations = published_configurations(workloads, gpu)
    for config in configurations:
        fitting = [n for n in config.scales if n <= scale]
        if proxy:
            at = scale
        elif not fitting:
            notes.append(
                f"{config.label}: left out, published from {config.scales[0]} GPUs only, more than "
                f"--scale {scale}"
            )
            continue
        else:
            at = fitting[-1]
            if at != scale:
                notes.append(
                    f"{config.label}: not published at {scale} GPUs; runs at {at}, its nearest published "
                    f"scale below (published: {', '.join(map(str, config.scales))})"
                )
        tasks += config.tasks([at], repeats)
    for label, why in unpublished_configurations(workloads, gpu):
        notes.append(f"{label}: left out, {why}")
    if not tasks:
        raise UsageError(
            f"no published {gpu} configuration runs on {scale} GPUs or fewer; raise --scale."
        )
    return tasks, notes


def with_options(
    tasks: list[Task], options: dict, gpu: str | None, profile_last: bool
) -> list[Task]:
    """Each task with ``options`` under its own (a suite file's win), ``gpu`` where it names none, and
    profiling on for the last repeat only with ``profile_last``; largest jobs first."""
    profiled = [t.source for t in tasks if any(t.options.get(name) for name in PROFILE_OPTIONS)]
    if profiled or any(options.get(name) for name in PROFILE_OPTIONS):
        where = f" ({profiled[0]})" if profiled else ""
        raise UsageError(
            f"certification runs are not profiled or traced{where}: a profiler's or a trace's overhead "
            f"is not part of the published figures. --profile-last profiles the last repeat of each "
            f"configuration."
        )
    out = []
    for task in with_gpu(tasks, gpu):
        merged = {**options, **task.options}
        if profile_last and task.repeat == task.repeats:
            merged["profile"] = True
        out.append(replace(task, options=merged))
    return sorted(out, key=lambda t: -t.gpus)


def for_rerun(tasks: list[Task], given: dict) -> list[Task]:
    """The recorded tasks with the run options given to ``--rerun`` over their own; ``--env`` replaces
    variables by name and keeps the others."""
    out = []
    for task in tasks:
        merged = {**task.options, **given}
        # else the check says why
        if "env_items" in given and all("=" in item for item in given["env_items"]):
            env = dict(item.partition("=")[::2] for item in task.options.get("env_items") or ())
            env.update(dict(item.partition("=")[::2] for item in given["env_items"]))
            merged["env_items"] = tuple(f"{name}={value}" for name, value in env.items())
        out.append(replace(task, options=merged))
    return out
