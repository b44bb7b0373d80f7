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
from typing import TYPE_CHECKING

from llmb.env_names import env_name_problem
from llmb.errors import UsageError
from llmb.paths import install_dir
from llmb.recipes.gpus import recipes_of
from llmb.recipes.references import AUTO, DEFAULT_SOURCE, Configuration, Figure, Missing, find
from llmb.runs.experiment import (
    StateFileError,
    load_json_state,
    record_fields,
    write_json,
    wrong_shape,
)

if TYPE_CHECKING:
    from llmb.recipes.records import Workload

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
    (llama31, 8b), ``pretrain_llama4_maverick_400b`` -> (llama4, 400b). A name two workloads claim
    (the host's index: ``llmb.plugins.names``) is refused, saying by whom, before any task runs."""
    from llmb.recipes.records import workload_named

    try:
        if (whole := workload_named(workloads, header)) is not None:
            return whole.name, None
        name, sep, size = header.rpartition("_")  # the size is the last part: aliases hold '_'
        if sep and (named := workload_named(workloads, name)) is not None:
            return named.name, size
    except UsageError as exc:
        raise UsageError(f"sweep header {header!r}: {exc}") from None
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
#
# What ``llmb certify``'s published suite and ``llmb sweep --all-workloads`` run: each configuration of the
# recipe tables at each GPU count the table tests where the one reference policy has a figure
# (``llmb.recipes.references.find``, source ``auto``: the figure plan shows and results, compare, report
# and certify judge a run by; the own recipe's, else another public document's, such as Megatron-Bridge's
# performance summary, at exactly that batch). So a suite runs what it can judge, and names the figure.


@dataclass(frozen=True)
class Published:
    """A configuration with a published figure at one GPU count or more: the counts, the recipe variant that
    runs each, and the figure a run at each is judged by."""

    workload: str
    size: str
    gpu: str
    dtype: str
    scaling: str
    scales: tuple[int, ...]  # ascending
    variants: tuple[str, ...]  # the recipe variant of each scale
    # the figure of each scale; not what tells configurations apart (an H200's are the H100's, so labelled)
    figures: tuple[Figure, ...] = field(default=(), compare=False)

    @property
    def label(self) -> str:
        return f"{self.workload} {self.size} {self.gpu} {self.dtype}" + (
            " strong" if self.scaling == "strong" else ""
        )

    def tasks(self, scales: list[int], repeats: int, options: dict | None = None) -> list[Task]:
        """The tasks at ``scales``, each naming in its ``source`` the figure it is judged by. A count that is
        not one of ``self.scales`` (a proxy suite's ranks: a proxy is never compared) takes the variant of
        the smallest, and its source says it is not compared."""
        at = {n: (v, f) for n, v, f in zip(self.scales, self.variants, self.figures, strict=True)}
        tasks: list[Task] = []
        for gpus in scales:
            variant, figure = at.get(gpus, (self.variants[0], None))
            source = (
                f"published: {judged_by(figure)}"
                if figure is not None
                else f"published: {self.label} (a proxy on {gpus} ranks: not compared)"
            )
            tasks += expand(
                self.workload,
                [self.size],
                [self.dtype],
                [gpus],
                repeats,
                gpu=self.gpu,
                variant=variant,
                strong_scaling=self.scaling == "strong",
                options=options,
                source=source,
            )
        return tasks


def judged_by(figure: Figure) -> str:
    """The figure a run is judged by, in one line: what it is, its step time, batch and GPU count, and its
    document, table and row, container and date (``Figure.describe``)."""
    batch = f"GBS {figure.gbs}" if figure.gbs else "an unstated global batch size"
    return (
        f"{figure.label}, {figure.headline()} at {batch} on {figure.gpus} GPUs: {figure.describe()}"
    )


def judging_figure(
    workload: Workload,
    variant: str,
    size: str,
    gpu: str,
    dtype: str,
    gpus: int,
    scaling: str = "weak",
) -> Figure | Missing:
    """The figure a run of this official configuration (in its recipe's container, at its recipe's batch)
    is judged by: ``llmb.recipes.references.find`` with source ``auto``, as results and compare find it."""
    own = workload.variant(variant) or workload.default_variant
    container = own.container_for(recipes_of(gpu))
    return find(
        workload,
        Configuration(own.name, size, gpu, dtype, gpus, scaling, container=container or None),
        AUTO,
    )


def _series_keys(workloads: dict, gpu: str | None) -> dict[tuple, tuple[Workload, str]]:
    """(workload, size, GPU type it runs on, dtype, scaling) of every series on ``gpu``'s tables (None:
    every table, each on its own type) -> (its workload, its table's GPU type); in the workloads' order."""
    table = recipes_of(gpu) if gpu else None
    on = gpu.strip().lower() if gpu else None
    keys: dict[tuple, tuple[Workload, str]] = {}
    for workload in workloads.values():
        for series in (s for v in workload.variants for s in v.series):
            if table is None or series.gpu == table:
                for dtype in series.dtypes:
                    key = (workload.name, series.size, on or series.gpu, dtype, series.scaling)
                    keys.setdefault(key, (workload, series.gpu))
    return keys


def _figure_counts(
    workload: Workload, table: str, size: str, dtype: str, scaling: str
) -> list[int]:
    """The GPU counts any document publishes a figure for, for this configuration's table."""
    return sorted(
        {
            r.gpus
            for r in (*workload.references, *workload.summary, *workload.cards)
            if (r.size, r.gpu, r.dtype, r.scaling) == (size, table, dtype, scaling)
        }
    )


def _judged_at(
    workload: Workload, table: str, key: tuple, gpus: int
) -> tuple[str, Figure] | Missing | None:
    """The variant that runs ``key`` at ``gpus`` and the figure it is judged by: of the variants whose table
    tests that count, one whose own recipe publishes the figure, else the first (the default) that any
    document's figure judges. ``Missing`` (why) where none does; None where no variant tests the count."""
    _, size, gpu, dtype, scaling = key
    found: list[tuple[str, Figure | Missing]] = []
    for variant in workload.variants:
        if any(
            (s.size, s.gpu, s.scaling) == (size, table, scaling)
            and dtype in s.dtypes
            and s.tests(gpus)
            for s in variant.series
        ):
            found.append(
                (
                    variant.name,
                    judging_figure(workload, variant.name, size, gpu, dtype, gpus, scaling),
                )
            )
    figures = [(v, f) for v, f in found if isinstance(f, Figure)]
    own = [(v, f) for v, f in figures if f.source == DEFAULT_SOURCE]
    if own or figures:
        return (own or figures)[0]
    return found[0][1] if found else None


def survey(workloads: dict, gpu: str | None) -> tuple[list[Published], list[tuple[str, str]]]:
    """(every configuration with a figure at a count its table tests, for GPU type ``gpu`` (None: every
    type); the label of each other configuration the tables lay out there and why it has none), both in the
    workloads' order. A type that runs another's recipes (an H200 the H100's) gets the other's
    configurations and figures, run on itself."""
    published: list[Published] = []
    unjudged: list[tuple[str, str]] = []
    for key, (workload, table) in _series_keys(workloads, gpu).items():
        at: list[tuple[int, str, Figure]] = []
        missing: list[Missing] = []
        _, size, _, dtype, scaling = key
        for gpus in _figure_counts(workload, table, size, dtype, scaling):
            judged = _judged_at(workload, table, key, gpus)
            if isinstance(judged, tuple):
                at.append((gpus, *judged))
            elif judged is not None:
                missing.append(judged)
        config = Published(*key, scales=(), variants=())
        if at:
            published.append(
                replace(
                    config,
                    scales=tuple(n for n, _, _ in at),
                    variants=tuple(v for _, v, _ in at),
                    figures=tuple(f for _, _, f in at),
                )
            )
        else:
            unjudged.append((config.label, _why_unjudged(missing)))
    return published, unjudged


def _why_unjudged(missing: list[Missing]) -> str:
    """Why a configuration is left out of a published suite: no figure at all, or figures only where a run
    of it would not be judged by them (another global batch size), as the reference lookup says."""
    said = "its recipe gives a layout but publishes no performance figure"
    if not missing:
        return (
            f"{said}, and no other public document publishes one at a GPU count it tests, so a run of it "
            f"could not be judged"
        )
    return f"{said} a run of it could be judged by: {missing[0].reason}"


def published_configurations(workloads: dict, gpu: str | None = None) -> list[Published]:
    """Every configuration with a figure a run of it is judged by (``survey``); a UsageError when ``gpu``
    has none, naming the GPU types that have."""
    found, unjudged = survey(workloads, gpu)
    if found:
        return found
    everywhere = survey(workloads, None)[0]
    types = ", ".join(sorted({p.gpu for p in everywhere})) or "none"
    laid_out = (
        f" (its recipes lay out {len(unjudged)} configuration{'s' if len(unjudged) != 1 else ''}, e.g. "
        f"{unjudged[0][0]}, but no public document publishes a figure a run of one could be judged by)"
        if unjudged
        else ""
    )
    raise UsageError(
        f"no installed workload publishes figures for GPU type {gpu!r}{laid_out}; published GPU types: "
        f"{types}."
    )


def unpublished_configurations(workloads: dict, gpu: str) -> list[tuple[str, str]]:
    """(label, as ``Published.label``; why) of each configuration the recipes lay out on ``gpu`` with no
    figure a run of it is judged by: a suite of published configurations leaves them out, and says so."""
    return survey(workloads, gpu)[1]


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
