"""Sweeps: many runs submitted together, kept together.

A sweep lives in ``<install>/sweeps/<sweep id>/sweep.json``: when it was made,
its tasks (each a workload, size, GPU type, dtype, GPU count, repeat and run
options) and, once submitted, the job id of each task. ``llmb report --sweep``
reads the runs back through the jobs' experiment directories.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace

from llmb.env_names import env_name_problem
from llmb.errors import UsageError
from llmb.paths import install_dir
from llmb.runs.experiment import (
    StateFileError,
    load_json_state,
    record_fields,
    write_json,
    wrong_shape,
)

SWEEP_FILE = "sweep.json"
LAST = "last"  # --sweep last: the most recent sweep


@dataclass(frozen=True)
class Task:
    """One run of a sweep."""

    workload: str
    size: str | None
    gpu: str | None
    dtype: str | None
    gpus: int
    repeat: int = 1
    repeats: int = 1  # of this configuration
    strong_scaling: bool = False
    variant: str | None = None
    gpus_per_node: int | None = None
    # llmb run's options for this task (proxy, steps, profile, ...)
    options: dict = field(default_factory=dict)
    overrides: dict = field(default_factory=dict)  # --set key=value
    source: str = ""  # where it came from: "command line" or "<file>: <header>"

    @property
    def label(self) -> str:
        parts = [
            self.workload,
            self.size or "-",
            self.dtype or "-",
            f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}",
        ]
        if self.gpu:
            parts.insert(2, self.gpu)
        return " ".join(parts) + (f" #{self.repeat}" if self.repeats > 1 else "")


@dataclass
class Sweep:
    id: str
    created_at: str
    backend: str
    tasks: list[Task]
    jobs: list[str | None] = field(default_factory=list)  # job id per task (None: not submitted)

    @property
    def job_ids(self) -> list[str]:
        return [j for j in self.jobs if j]

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "created_at": self.created_at,
            "backend": self.backend,
            "tasks": [asdict(t) for t in self.tasks],
            "jobs": self.jobs,
        }


def sweeps_root() -> str:
    return os.path.join(install_dir(), "sweeps")


def new_sweep_id() -> str:
    return f"sweep-{secrets.token_hex(3)}"


def save_sweep(sweep: Sweep) -> None:
    directory = os.path.join(sweeps_root(), sweep.id)
    os.makedirs(directory, exist_ok=True)
    write_json(os.path.join(directory, SWEEP_FILE), sweep.to_dict())


def ids_by_recency(root: str, filename: str) -> list[str]:
    """The names of ``root``'s folders that hold ``filename``, most recently written first."""
    try:
        entries = [e for e in os.scandir(root) if os.path.exists(os.path.join(e.path, filename))]
    except OSError:
        return []
    entries.sort(key=lambda e: os.stat(os.path.join(e.path, filename)).st_mtime, reverse=True)
    return [e.name for e in entries]


def list_sweep_ids() -> list[str]:
    """Sweep ids, most recent first."""
    return ids_by_recency(sweeps_root(), SWEEP_FILE)


def load_sweep(sweep_id: str) -> Sweep:
    """The sweep ``sweep_id`` (or ``last``); UsageError naming the known ones; StateFileError when its
    record is there but corrupt (not JSON, cut short, the wrong shape, not a regular file)."""
    known = list_sweep_ids()
    if sweep_id == LAST:
        if not known:
            raise UsageError(
                f"there are no sweeps in {sweeps_root()} yet; start one with llmb sweep."
            )
        sweep_id = known[0]
    path = os.path.join(sweeps_root(), sweep_id, SWEEP_FILE)
    try:
        data = load_json_state(path)
        try:
            sweep = (
                None
                if data is None
                else Sweep(**record_fields(Sweep, data, "the record", {"Task": Task}))
            )
        except ValueError as exc:
            raise wrong_shape(path, exc) from None
    except StateFileError as exc:
        raise exc.about(
            f"sweep {sweep_id!r}", f"move {os.path.dirname(path)} away to drop it."
        ) from None
    if sweep is None:
        hint = f"known sweeps: {', '.join(known[:5])}" if known else "there are no sweeps yet"
        raise UsageError(
            f"no sweep {sweep_id!r} in {sweeps_root()} ({hint}; 'last' is the most recent)."
        )
    return sweep


# ------------------------------------------------------------------ building the tasks

FILE_KEYS = (
    "dtypes",
    "scales",
    "repeats",
    "profile",
    "gpu",
    "variant",
    "strong_scaling",
    "gpus_per_node",
    "set",
    "tasks",
    "size",
)
MATCH_KEYS = ("dtype", "scale", "dtypes", "scales")

# Counts a command line or a file may ask for, checked before anything is built (a suite file's
# repeats: 100000000 once spent minutes building tasks). Each task is a job to run, and each is checked
# (recipe, backend settings) before any is submitted.
# runs of one configuration: the step-time statistics settle within a handful; 100 is plenty
MAX_REPEATS = 100
# jobs in one sweep or suite: every published configuration (about 50) 100 times is 5,000
MAX_TASKS = 10_000
# entries of a section's tasks list: each picks tasks by dtype and GPU count, of which a
MAX_TASK_OVERRIDES = 256
#                           section has far fewer; every task is matched against every entry


def _count_problem(source: str, counts: list[tuple[int, str]], repeats: int) -> str | None:
    """Why ``repeats`` or the product of ``counts`` x ``repeats`` is too many; None when it is not."""
    where = (
        "--repeats"
        if source == "command line" or source.startswith("published")
        else f"{source}: repeats"
    )
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= MAX_REPEATS:
        return f"{where} must be a whole number from 1 to {MAX_REPEATS}, not {repeats!r}."
    total = repeats
    for number, _ in counts:
        total *= number
    if total > MAX_TASKS:
        product = " x ".join(f"{number:,} {what}" for number, what in counts if number > 1)
        return (
            f"{source}: {total:,} runs ({product} x {repeats} repeats) are more than the {MAX_TASKS:,} a sweep "
            f"may hold; split it into several sweeps."
        )
    return None


def expand(
    workload: str,
    sizes,
    dtypes,
    scales,
    repeats: int,
    *,
    gpu=None,
    variant=None,
    strong_scaling=False,
    gpus_per_node=None,
    options: dict | None = None,
    overrides: dict | None = None,
    source: str = "command line",
) -> list[Task]:
    """The cartesian product sizes x dtypes x GPU counts x repeats; a UsageError, before anything is built,
    when ``repeats`` is outside 1 to ``MAX_REPEATS`` or the product is more than ``MAX_TASKS``."""
    problem = _count_problem(
        source,
        [
            (len(sizes or [None]), "sizes"),
            (len(dtypes or [None]), "dtypes"),
            (len(scales), "GPU counts"),
        ],
        repeats,
    )
    if problem:
        raise UsageError(problem)
    return [
        Task(
            workload=workload,
            size=size,
            gpu=gpu,
            dtype=dtype,
            gpus=int(gpus),
            repeat=repeat,
            repeats=repeats,
            strong_scaling=strong_scaling,
            variant=variant,
            gpus_per_node=gpus_per_node,
            options=dict(options or {}),
            overrides=dict(overrides or {}),
            source=source,
        )
        for size in sizes or [None]
        for dtype in dtypes or [None]
        for gpus in scales
        for repeat in range(1, repeats + 1)
    ]


def _list(value, what: str, where: str, cast=str) -> list:
    items = value if isinstance(value, list) else [value]
    try:
        return [cast(v) for v in items]
    except (TypeError, ValueError):
        raise UsageError(
            f"{where}: {what} must be a list of {cast.__name__}s, got {value!r}."
        ) from None


def _options(raw: dict, where: str, option_names: Mapping[str, str]) -> dict:
    """A file's llmb run options, as run option parameters."""
    out = {}
    for key, value in raw.items():
        name = option_names[key]
        if key in ("env", "backend_opt"):
            if not isinstance(value, dict):
                raise UsageError(f"{where}: {key} must be a mapping NAME: value.")
            for variable in value if key == "env" else ():
                if problem := env_name_problem(variable, f"{where}: env key"):
                    raise UsageError(problem)
            value = tuple(f"{k}={v}" for k, v in value.items())
        elif key in ("mount", "secret"):
            value = tuple(_list(value, key, where))
        out[name] = value
    return out


def _split(header: str, workloads: dict) -> tuple[str, str | None]:
    """``llama31_8b`` -> (llama31, 8b); ``nemotronh`` -> (nemotronh, None); a workload's alias in
    place of its name, as NVIDIA's llmb-run bulk files write it: ``pretrain_llama3.1_8b`` ->
    (llama31, 8b), ``pretrain_llama4_maverick_400b`` -> (llama4, 400b)."""
    from llmb.recipes.records import workload_named

    if (whole := workload_named(workloads, header)) is not None:
        return whole.name, None
    name, sep, size = header.rpartition("_")  # the size is the last part: aliases hold '_'
    if sep and (named := workload_named(workloads, name)) is not None:
        return named.name, size
    raise UsageError(
        f"sweep header {header!r}: expected <workload>_<size> or <workload>, with a workload among "
        f"{', '.join(workloads)} (e.g. llama31_8b)."
    )


def _read_yaml(path: str) -> dict:
    import yaml

    from llmb.yamlio import load_user_yaml_file

    try:
        data = load_user_yaml_file(path)
    except OSError as exc:
        raise UsageError(f"cannot read the sweep file {path}: {exc.strerror or exc}.") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise UsageError(
            f"the sweep file {path} is not valid YAML{at}: {getattr(exc, 'problem', exc)}."
        ) from None
    if not isinstance(data, dict):
        raise UsageError(
            f"the sweep file {path} must be a mapping of sections such as llama31_8b: {{...}}."
        )
    return data


def tasks_from_file(path: str, workloads: dict, option_names: Mapping[str, str]) -> list[Task]:
    """The tasks of a sweep file (format: docs/sweeps.md). ``option_names``: each
    llmb run option a file may set, by its flag name with '_' for '-'
    (``time_limit``), to its parameter name (``llmb.cli.run_options.parameter_names``)."""
    data = _read_yaml(path)
    defaults = data.pop("defaults", {}) or {}
    if not isinstance(defaults, dict):
        raise UsageError(f"{path}: defaults must be a mapping.")
    tasks: list[Task] = []
    for header, section in data.items():
        where = f"{path}: {header}"
        if not isinstance(section, dict):
            raise UsageError(f"{where}: expected a mapping with dtypes, scales, repeats, ...")
        merged = {**defaults, **section}
        unknown = sorted(set(merged) - set(FILE_KEYS) - set(option_names))
        if unknown:
            raise UsageError(
                f"{where}: unknown keys {', '.join(unknown)}; valid: "
                f"{', '.join(dict.fromkeys(FILE_KEYS + tuple(option_names)))}."
            )
        workload, size = _split(str(header), workloads)
        if "scales" not in merged:
            raise UsageError(f"{where}: scales (the GPU counts) is required, e.g. scales: [8, 16].")
        repeats = merged.get("repeats", 1)
        if problem := _count_problem(where, [], repeats):
            raise UsageError(problem)
        entries = merged.get("tasks") or []
        if isinstance(entries, list) and len(entries) > MAX_TASK_OVERRIDES:
            raise UsageError(
                f"{where}: tasks has {len(entries):,} entries, more than the {MAX_TASK_OVERRIDES} "
                f"a section may have (each selects tasks by dtype and scale)."
            )
        options = _options(
            {k: v for k, v in merged.items() if k in option_names}, where, option_names
        )
        overrides = merged.get("set") or {}
        if not isinstance(overrides, dict):
            raise UsageError(
                f"{where}: set must be a mapping of recipe fields, e.g. set: {{mbs: 2}}."
            )
        base = expand(
            workload,
            [merged.get("size", size)] if merged.get("size", size) else None,
            _list(merged["dtypes"], "dtypes", where) if "dtypes" in merged else None,
            _list(merged["scales"], "scales", where, int),
            repeats,
            gpu=merged.get("gpu"),
            variant=merged.get("variant"),
            strong_scaling=bool(merged.get("strong_scaling", False)),
            gpus_per_node=merged.get("gpus_per_node"),
            options=options,
            overrides=overrides,
            source=where,
        )
        if len(tasks) + len(base) > MAX_TASKS:
            raise UsageError(
                f"{path}: its sections up to {header} make {len(tasks) + len(base):,} runs, more than "
                f"the {MAX_TASKS:,} a sweep may hold; split it into several files."
            )
        tasks += [_apply_task_overrides(t, entries, where, option_names) for t in base]
    if not tasks:
        raise UsageError(
            f"{path} describes no task: add a section such as llama31_8b: {{dtypes: [bf16], scales: [8]}}."
        )
    return tasks


def with_gpu(tasks: list[Task], gpu: str | None) -> list[Task]:
    """Each task with GPU type ``gpu`` (--gpu, or GPU_TYPE) where it names none; a sweep or suite file's
    section that names its own (or whose ``defaults`` does) keeps it. llmb sweep --file and llmb certify
    --file both fill their file's tasks through this."""
    if not gpu:
        return list(tasks)
    return [task if task.gpu else replace(task, gpu=gpu) for task in tasks]


def _apply_task_overrides(
    task: Task, entries: list, where: str, option_names: Mapping[str, str]
) -> Task:
    """Per-task overrides: each entry's dtype/scale (or lists) selects tasks; its other keys
    (run options, ``set``) apply to them."""
    if not isinstance(entries, list):
        raise UsageError(
            f"{where}: tasks must be a list of overrides, e.g. tasks: [{{scale: 16, set: {{mbs: 1}}}}]."
        )
    for number, entry in enumerate(entries, start=1):
        at = f"{where}: tasks[{number}]"
        if not isinstance(entry, dict):
            raise UsageError(f"{at}: expected a mapping.")
        unknown = sorted(set(entry) - set(MATCH_KEYS) - {"set"} - set(option_names))
        if unknown:
            raise UsageError(f"{at}: unknown keys {', '.join(unknown)}.")
        dtypes = scales = None
        if "dtype" in entry or "dtypes" in entry:
            dtypes = _list(entry.get("dtypes", entry.get("dtype")), "dtype", at)
        if "scale" in entry or "scales" in entry:
            scales = _list(entry.get("scales", entry.get("scale")), "scale", at, int)
        if (dtypes is not None and task.dtype not in dtypes) or (
            scales is not None and task.gpus not in scales
        ):
            continue
        options = {
            **task.options,
            **_options({k: v for k, v in entry.items() if k in option_names}, at, option_names),
        }
        task = replace(
            task, options=options, overrides={**task.overrides, **(entry.get("set") or {})}
        )
    return task


# ------------------------------------------------------------------ the published configurations


@dataclass(frozen=True)
class Published:
    """A configuration the recipe documents publish performance figures for, and the GPU counts they do."""

    workload: str
    variant: str
    size: str
    gpu: str
    dtype: str
    scaling: str
    scales: tuple[int, ...]  # ascending
    document: str  # the public document that publishes it

    @property
    def label(self) -> str:
        return f"{self.workload} {self.size} {self.gpu} {self.dtype}" + (
            " strong" if self.scaling == "strong" else ""
        )

    def tasks(self, scales: list[int], repeats: int, options: dict | None = None) -> list[Task]:
        return expand(
            self.workload,
            [self.size],
            [self.dtype],
            scales,
            repeats,
            gpu=self.gpu,
            variant=self.variant,
            strong_scaling=self.scaling == "strong",
            options=options,
            source=f"published: {self.document} ({self.variant})",
        )


def published_configurations(workloads: dict, gpu: str | None = None) -> list[Published]:
    """Every configuration with published figures (for GPU type ``gpu``; None: every type), in the workloads'
    order; a UsageError when ``gpu`` has none. A type that runs another's recipes (an H200 the H100's)
    gets the other's configurations, run on itself."""
    from llmb.recipes.gpus import recipes_of

    table = recipes_of(gpu)
    found: dict[tuple, tuple[set[int], str]] = {}
    for workload in workloads.values():
        for ref in workload.references:
            if gpu is None or ref.gpu == table:
                on = ref.gpu if gpu is None else gpu.strip().lower()
                key = (workload.name, ref.variant, ref.size, on, ref.dtype, ref.scaling)
                found.setdefault(key, (set(), ref.provenance.document))[0].add(ref.gpus)
    if not found:
        types = sorted({ref.gpu for w in workloads.values() for ref in w.references})
        raise UsageError(
            f"no installed workload publishes figures for GPU type {gpu!r}; published GPU types: "
            f"{', '.join(types) or 'none'}."
        )
    return [
        Published(*key, scales=tuple(sorted(scales)), document=document)
        for key, (scales, document) in found.items()
    ]


def unpublished_configurations(workloads: dict, gpu: str) -> list[str]:
    """The labels (as ``Published.label``) of the configurations the recipes give a layout for on
    ``gpu`` but publish no figure for: a suite of published configurations leaves them out, and says
    so. In the workloads' order."""
    from llmb.recipes.gpus import recipes_of

    table = recipes_of(gpu)
    published = {
        (p.workload, p.size, p.dtype, p.scaling) for p in published_configurations(workloads, gpu)
    }
    found: dict[str, None] = {}
    for workload in workloads.values():
        for variant in workload.variants:
            for series in variant.series:
                if series.gpu != table:
                    continue
                for dtype in series.dtypes:
                    if (workload.name, series.size, dtype, series.scaling) not in published:
                        label = f"{workload.name} {series.size} {gpu} {dtype}" + (
                            " strong" if series.scaling == "strong" else ""
                        )
                        found.setdefault(label)
    return list(found)


def published_tasks(workloads: dict, gpu: str | None, max_gpus: int, repeats: int) -> list[Task]:
    """``llmb sweep --all-workloads``: each published configuration at each of its published GPU counts up to
    ``max_gpus``; a UsageError when none is that small."""
    configurations = published_configurations(workloads, gpu)
    tasks = [
        t for c in configurations for t in c.tasks([n for n in c.scales if n <= max_gpus], repeats)
    ]
    if not tasks:
        smallest = min(n for c in configurations for n in c.scales)
        raise UsageError(
            f"no published configuration{' for ' + gpu if gpu else ''} runs on {max_gpus} GPUs or "
            f"fewer; the smallest published GPU count is {smallest} (raise --max-gpus)."
        )
    return tasks
