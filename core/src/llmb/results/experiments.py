"""Find the runs under experiment directories and what each run was.

The seeds' layout is ``experiments/<exp>/<exp>_<timestamp>/<exp>/log-<exp>.out``.
Every ``log-*.out`` is one run, whatever it is (a FIFO, a dangling link or
a directory of that name is a run whose log cannot be read, not a reason to
stop); a run directory ``<exp>/<exp>_<timestamp>`` without any log is
reported too (status ``no_log``).

What a run was comes from ``recipe.json`` beside its log or in its run
directory (llmb writes one for every run it starts), else from the
experiment name the seeds' launchers give (``pretrain_llama3_8b_nvfp4_gpus8
_tp1_..._mbs4_gbs128``, ``pretrain_llama3.1_8b_fp8_8``), matched against the
installed workloads' ``experiment_prefixes``. Names carry no GPU type.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace

from llmb.recipes.gpus import catalogue, recipes_of
from llmb.recipes.records import Workload
from llmb.results import record_values
from llmb.results.identity import against_name
from llmb.results.records import RunContext
from llmb.results.scan import read_regular
from llmb.runs.experiment import RECIPE_FILE

MAX_RECIPE = 1 << 20  # bytes: a recipe is a few hundred
MAX_PROVENANCE = 8 << 20  # bytes: a provenance record is tens of kilobytes

_LOG = re.compile(r"^log-.*\.out$")
_RUN_DIR = re.compile(r"^(?P<exp>.+)_(?P<stamp>\d{6,})$")
_JOB_ID = re.compile(r"_(\d+)(?:_\d+)?\.out$")


@dataclass(frozen=True)
class RunLocation:
    """A run found on disk: its log (None when missing), run directory and name."""

    log: str | None
    run_dir: str
    experiment: str
    short_name: str
    # The name's parts that say a dimension is unused (``cp1``, ``vpNone``, ``ep1``) but differ from the
    # recipe's layout for the run's configuration: its short form keeps them (``compact_name``).
    kept_parts: tuple[str, ...] = ()


def _is_run_dir(path: str) -> bool:
    m = _RUN_DIR.match(os.path.basename(path))
    return bool(m) and os.path.basename(os.path.dirname(path)) == m.group("exp")


def _location(log: str) -> RunLocation:
    directory = os.path.dirname(os.path.abspath(log))
    experiment = (
        os.path.basename(log)[len("log-") : -len(".out")]
        if _LOG.match(os.path.basename(log))
        else os.path.splitext(os.path.basename(log))[0]
    )
    run_dir = directory
    for candidate in (directory, os.path.dirname(directory)):
        if _is_run_dir(candidate):
            run_dir = candidate
            break
    if _is_run_dir(run_dir):
        experiment = _RUN_DIR.match(os.path.basename(run_dir)).group("exp")
        short = os.path.basename(run_dir)
    else:
        short = os.path.splitext(os.path.basename(log))[0].removeprefix("log-")
    return RunLocation(os.path.abspath(log), run_dir, experiment, short)


def find_runs(paths: list[str]) -> list[RunLocation]:
    """Every run under ``paths`` (directories are walked; anything else there is a log)."""
    runs: dict[str, RunLocation] = {}
    for path in paths:
        if not os.path.isdir(path):
            if os.path.lexists(path):
                location = _location(path)
                runs[location.log] = location
            continue
        run_dirs_with_logs: set[str] = set()
        candidate_run_dirs: set[str] = set()
        for directory, subdirs, files in os.walk(path):
            subdirs.sort()
            if _is_run_dir(directory):
                candidate_run_dirs.add(os.path.abspath(directory))
            for name in sorted(files + [d for d in subdirs if _LOG.match(d)]):
                if _LOG.match(name):
                    location = _location(os.path.join(directory, name))
                    runs[location.log] = location
                    run_dirs_with_logs.add(location.run_dir)
        for run_dir in sorted(candidate_run_dirs - run_dirs_with_logs):
            name = os.path.basename(run_dir)
            runs[run_dir] = RunLocation(None, run_dir, _RUN_DIR.match(name).group("exp"), name)
    return sorted(runs.values(), key=lambda r: (r.experiment, r.short_name, r.log or ""))


def read_recipe(location: RunLocation) -> dict | None:
    """The recipe llmb saved for the run, if any (beside the log, or in the run dir)."""
    places = [location.run_dir]
    if location.log:
        places.insert(0, os.path.dirname(location.log))
    for place in places:
        try:
            data = json.loads(read_regular(os.path.join(place, RECIPE_FILE), MAX_RECIPE))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return data
    return None


def context_for(location: RunLocation, workloads: dict[str, Workload]) -> RunContext:
    """What the run recorded (``recipe.json``), else what its name says; then what its
    ``provenance.json`` adds: the GPU type where neither names one, and the container."""
    job = _JOB_ID.search(location.log) if location.log else None
    # A log named for its experiment alone (``log-<exp>.out``) names no job: a number ending it belongs to
    # the experiment's name (``pretrain_llama3.1_8b_fp8_8``: 8 GPUs), not to a scheduler.
    named_alone = (
        location.log is not None
        and os.path.basename(location.log) == f"log-{location.experiment}.out"
    )
    job_id = job.group(1) if job and not named_alone else None
    recipe = read_recipe(location)
    named = infer_from_name(location.experiment, workloads, job_id)
    if recipe is None:
        return with_provenance(named, location, workloads)
    context = _from_recipe(location, recipe, job_id)
    doubts = (*context.doubts, *against_name(context, named))
    return with_provenance(replace(context, doubts=doubts), location, workloads)


_CONTAINER = re.compile(r"[:#/]nemo:(\d{2}\.\d{2}(?:\.\d+)?)")


def with_provenance(
    context: RunContext, location: RunLocation, workloads: dict[str, Workload]
) -> RunContext:
    """The GPU type the run's provenance recorded (the type the job saw, else the one it was submitted
    for) where the context has none, and the NeMo container release it ran in."""
    from llmb.runs import provenance

    try:  # bounded, and only a regular file: the tree may be anyone's
        record = json.loads(read_regular(provenance.path_of(location.run_dir), MAX_PROVENANCE))
    except (OSError, ValueError):
        return context
    if not isinstance(record, dict):
        return context
    submission = record.get("submission") if isinstance(record.get("submission"), dict) else {}
    job = record.get("job") if isinstance(record.get("job"), dict) else {}
    seen = job.get("gpu", {}).get("type") if isinstance(job.get("gpu"), dict) else None
    gpu = next(
        (
            g.lower()
            for g in (seen, submission.get("gpu"))
            if isinstance(g, str) and g.lower() in catalogue()
        ),
        None,
    )
    image = submission.get("image") if isinstance(submission.get("image"), dict) else {}
    container = (
        _CONTAINER.search(image.get("reference") or "")
        if isinstance(image.get("reference"), str)
        else None
    )
    if context.gpu is None and gpu is not None:
        context = complete_from_recipes(
            replace(context, gpu=gpu, gpu_source="provenance"),
            workloads.get(context.workload or ""),
        )
    if container is not None and context.container is None:
        context = replace(context, container=container.group(1))
    return context


def _from_recipe(location: RunLocation, recipe: dict, job_id: str | None) -> RunContext:
    """What recipe.json says, each field checked (``llmb.results.record_values``): a value that cannot
    be is left out, and the problem is among the run's doubts."""
    where = "its recipe.json"
    problems: list[str] = []

    def checked(found: tuple):
        value, problem = found
        if problem:
            problems.append(problem)
        return value

    def name(field: str) -> str | None:
        return checked(record_values.text(field, recipe.get(field), where))

    def count(field: str) -> int | None:
        return checked(record_values.whole(field, recipe.get(field), where))

    layout = {f: count(f) for f in ("tp", "pp", "cp", "ep", "mbs") if f in recipe}
    gpu = name("gpu")
    context = RunContext(
        experiment=location.experiment,
        source="recipe",
        workload=name("workload"),
        variant=name("variant"),
        size=name("size"),
        gpu=gpu,
        gpu_source="recipe" if gpu else None,
        dtype=name("dtype"),
        gpus=count("gpus"),
        nodes=count("nodes"),
        gbs=count("gbs"),
        seq_len=count("seq_len"),
        layers=count("layers"),
        scaling=name("scaling") or "weak",
        proxy=recipe.get("proxy", False) is True,
        job_id=name("job_id") or job_id,
        job_state=_job_state(recipe.get("job_id")),
        device=name("device"),
        flops_per_sample=checked(
            record_values.positive(
                "model_flops_per_sample",
                recipe.get("model_flops_per_sample"),
                where,
                record_values.MAX_FLOPS_PER_SAMPLE,
            )
        ),
        tuned=_tuned(recipe.get("tuned")),
        layout=layout or None,
    )
    return replace(context, doubts=tuple(problems))


def _tuned(settings) -> str | None:
    """recipe.json's ``tuned`` list as the plan words it, ``tp 4 -> 8, mbs 1 -> 2``; None for an official run."""
    from llmb.recipes.planning import TunedSetting

    if not isinstance(settings, list) or not settings:
        return None
    parts = [
        TunedSetting(s.get("setting"), s.get("published"), s.get("run")).text()
        for s in settings
        if isinstance(s, dict)
    ]
    return ", ".join(parts)[:500] or None


def stored_location(key: str, result) -> RunLocation:
    """Where a stored run was found, from its key in the results database (its log, or without one its run
    directory): the same names a scan of that directory gives, the directory being there or not."""
    if result.log:
        return _location(result.log)
    run_dir = os.path.abspath(key)
    name = os.path.basename(run_dir)
    found = _RUN_DIR.match(name)
    return RunLocation(None, run_dir, found.group("exp") if found else name, name)


def differing_settings(context: RunContext) -> tuple[str, ...]:
    """The settings a tuned run's words name (``cp 2 -> 1, mbs 1 -> 4``: ``cp``, ``mbs``)."""
    return tuple(part.split(" ", 1)[0] for part in (context.tuned or "").split(", ") if part)


_LLMB_JOB_ID = re.compile(r"[a-z0-9][a-z0-9_.-]*")


def accepted_job_id(job_id: str | None) -> str | None:
    """The id of the llmb job that ran a run, as ``llmb logs`` and ``llmb compare --baseline`` take it:
    the llmb job id the run recorded, when llmb has that job; for a Slurm job id (the number a foreign
    log's name ends with), the llmb job one of whose attempts it was. None where llmb knows no such job:
    a number in a foreign run's name or directory names nothing a command accepts. (A listing of many
    runs asks one ``JobIds``: each job's record is then read once.)"""
    return JobIds().accepted(job_id)


class JobIds:
    """``accepted_job_id`` for the runs of one listing: each llmb job's record is read once, and the
    Slurm job ids of every job's attempts are gathered once, the first time a run names a number (a
    listing of thousands of foreign logs read every job's record for each of them)."""

    def __init__(self) -> None:
        self._known: dict[str, str | None] = {}
        self._by_slurm_id: dict[str, str] | None = None

    def accepted(self, job_id: str | None) -> str | None:
        if not job_id or not _LLMB_JOB_ID.fullmatch(job_id) or not job_id.strip("."):
            return None
        if job_id not in self._known:
            try:
                self._known[job_id] = (
                    self._slurm_ids().get(job_id) if job_id.isdigit() else self._llmb_job(job_id)
                )
            except Exception:  # noqa: BLE001 - a damaged job store must not hide the run's result
                self._known[job_id] = None
        return self._known[job_id]

    @staticmethod
    def _llmb_job(job_id: str) -> str | None:
        from llmb.runs.jobs import Job, read_job

        return job_id if isinstance(read_job(job_id), Job) else None

    def _slurm_ids(self) -> dict[str, str]:
        """{Slurm job id: the llmb job one of whose attempts it was}, the most recently submitted job
        first where two name one (as a search in ``list_job_ids``' order finds)."""
        if self._by_slurm_id is None:
            from llmb.runs.jobs import Job, list_job_ids, read_job

            found: dict[str, str] = {}
            for candidate in list_job_ids():
                job = read_job(candidate)
                attempts = job.details.get("attempts") if isinstance(job, Job) else None
                for attempt in attempts if isinstance(attempts, list) else ():
                    if isinstance(attempt, dict):
                        found.setdefault(str(attempt.get("slurm_id")), job.id)
            self._by_slurm_id = found
        return self._by_slurm_id


def _job_state(job_id) -> str | None:
    """The end state llmb recorded for the job that ran this (None: unknown, or not ended)."""
    if not isinstance(job_id, str) or not job_id:
        return None
    from llmb.runs.jobs import read_exit

    try:
        ended = read_exit(job_id)
    except Exception:  # noqa: BLE001 - a damaged job record must not hide the run's result
        return None
    state = ended.get("state") if isinstance(ended, dict) else None
    return state if isinstance(state, str) else None


_DTYPE = re.compile(r"(?:^|_)(bf16|fp8|nvfp4)(?:_|$)")
_GPUS = re.compile(r"(?:^|_)gpus(\d+)(?:_|$)")
_NODES = re.compile(r"(?:^|_)(\d+)nodes?(?:_|$)")  # Llama 4's pretrain_llama4_e128_fp8_64nodes_...
_TRAILING = re.compile(r"_(\d+)$")
_GBS = re.compile(r"(?:^|_)(?:gbs(\d+)|(\d+)gbs)(?:_|$)")
# llmb's proxy runs end ``_proxy-<label>``: ``tiny``, ``layers10`` (--layers 10), or --fit's slice
# ``layers2-experts8`` / ``layers1-vocab6272`` (llmb.recipes.fit.Fit.label): never the published model
_PROXY = re.compile(r"_proxy-([a-z0-9-]+)$")
_PROXY_LAYERS = re.compile(r"(?:^|-)layers(\d+)(?:-|$)")


# What the last workloads' experiment names said: (those workloads, {name: context}). The runs of one
# experiment share its name (a configuration run again and again), so a listing reads each name once.
_NAMED: tuple[dict[str, Workload] | None, dict[str, RunContext]] = (None, {})
_NAMED_MOST = 4096


def infer_from_name(
    name: str, workloads: dict[str, Workload], job_id: str | None = None
) -> RunContext:
    """What the seeds' experiment names say: workload (by prefix), size,
    dtype, GPU count and GBS where present. Unknown parts stay None."""
    global _NAMED
    owner, named = _NAMED
    if owner is not workloads:
        named = {}
        _NAMED = (workloads, named)
    context = named.get(name)
    if context is None:
        context = _from_name(name, workloads)
        if len(named) >= _NAMED_MOST:
            named.clear()
        named[name] = context
    return context if job_id is None else replace(context, job_id=job_id)


def _from_name(name: str, workloads: dict[str, Workload]) -> RunContext:
    lowered = name.lower()
    matches = [
        (len(prefix), workload)
        for workload in workloads.values()
        for prefix in workload.experiment_prefixes
        if lowered.startswith(prefix.lower())
    ]
    if not matches:
        return RunContext(experiment=name, source="none")
    prefix_len, workload = max(matches, key=lambda m: m[0])
    rest = lowered[prefix_len:]
    sizes = workload.sizes()
    size = next(
        (s for s in sorted(sizes, key=len, reverse=True) if rest.startswith(s + "_") or rest == s),
        None,
    )
    if size is None and len(sizes) == 1:
        size = sizes[0]  # e.g. Llama 4's e128 names one size only
    dtype = _DTYPE.search(lowered)
    gpus = _GPUS.search(lowered) or _TRAILING.search(lowered)
    nodes = _NODES.search(lowered)
    gbs = _GBS.search(lowered)
    proxy = _PROXY.search(lowered)
    proxy_layers = _PROXY_LAYERS.search(proxy.group(1)) if proxy else None
    seq_len = next((s.seq_len for v in workload.variants for s in v.series if s.size == size), None)
    problems: list[str] = []

    def count(field: str, found: re.Match | None) -> int | None:
        digits = next((g for g in found.groups() if g), None) if found else None
        value, problem = record_values.whole(field, digits or None, "its experiment's name")
        if problem:
            problems.append(problem)
        return value

    layout = {}
    for setting, value in name_layout(name).items():
        value, problem = record_values.whole(setting, value, "its experiment's name")
        if problem:
            problems.append(problem)
        else:
            layout[setting] = value
    context = RunContext(
        experiment=name,
        source="name",
        workload=workload.name,
        size=size,
        dtype=dtype.group(1) if dtype else None,
        gpus=count("gpus", gpus),
        nodes=count("nodes", nodes),
        gbs=count("gbs", gbs),
        seq_len=seq_len,
        layers=count("layers", proxy_layers),
        proxy=proxy is not None,
        layout=layout or None,
        doubts=tuple(problems),
    )
    return complete_from_recipes(context, workload)


def complete_from_recipes(context: RunContext, workload: Workload | None) -> RunContext:
    """What a name leaves implicit, from the workload's recipes (a recipe.json says it outright):

    - the GPU count of a name that gives nodes, by the GPU type's GPUs per node (or the one count per
      node every matching recipe has);
    - strong scaling, when the name's GBS is the strong-scaling recipe's GBS at that scale and no
      weak-scaling recipe has it (Nemotron-4's ..._gpus128_..._gbs512 is its strong series);
    - once the GPU type is known (the name's own, --gpu, the cluster file, provenance: every place that
      gives it calls this), whether the name's layout is the recipe's: where it is not, the run is tuned
      (``layout_differences``)."""
    if context.source != "name" or workload is None:
        return context
    series = [
        s
        for v in workload.variants
        if context.variant in (None, v.name)
        for s in v.series
        if s.size == context.size
        and (context.dtype is None or context.dtype in s.dtypes)
        and (context.gpu is None or s.gpu == recipes_of(context.gpu))  # an H200 runs the H100's
    ]
    gpus = context.gpus
    if gpus is None and context.nodes:
        per_node = {
            catalogue()[g].gpus_per_node
            for g in ([context.gpu] if context.gpu in catalogue() else [s.gpu for s in series])
        }
        if len(per_node) == 1:
            gpus = context.nodes * per_node.pop()
    scaling = context.scaling
    if gpus and context.gbs:
        kinds = {
            s.scaling
            for s in series
            if s.min_gpus <= gpus <= s.max_gpus
            and (s.is_range or gpus in s.listed_gpus)
            and s.gbs.at(gpus) == context.gbs
        }
        if kinds == {"strong"}:
            scaling = "strong"
    context = replace(context, gpus=gpus, scaling=scaling)
    return replace(context, tuned=layout_differences(context, workload))


# The layout parts of a Megatron-Bridge experiment name: ``..._tp1_pp1_cp1_vpNone_ep1_etpNone_mbs4_gbs128``.
_LAYOUT_PARTS = {
    setting: re.compile(rf"(?:^|_){setting}(\d+|none)(?=_|$)")
    for setting in ("tp", "pp", "cp", "vp", "ep", "etp", "mbs")
}


def name_layout(name: str) -> dict[str, int | None]:
    """The parallel layout and micro batch an experiment name gives (None: the name says ``None``);
    a part the name lacks is left out."""
    lowered = name.lower()
    found = {}
    for setting, pattern in _LAYOUT_PARTS.items():
        if (part := pattern.search(lowered)) is not None:
            digits = part.group(1)
            # more digits than any count has are kept as written, for the reader to refuse
            found[setting] = (
                None if digits == "none" else int(digits) if len(digits) <= 18 else digits
            )
    return found


def _same_setting(setting: str, published, named, official, layout: dict) -> bool:
    """Whether the name's value is the recipe's, in the names' ways of saying "unused": no expert
    parallelism is EP None or 1; an expert TP of None (or a recipe's None) is the TP; a virtual pipeline
    means nothing without a pipeline (llmb drops one: ``without_idle_vp``)."""
    if setting == "ep":
        return (published or 1) == (named or 1)
    if setting == "etp":
        return named is None or named == (official.tp if published is None else published)
    if setting == "vp" and layout.get("pp", official.pp) == 1 and official.pp == 1:
        return True
    return published == named


def layout_differences(context: RunContext, workload: Workload) -> str | None:
    """Where a run's experiment name gives another layout (TP, PP, CP, VP, EP, ETP, MBS) or GBS than the
    published recipe resolves to for its configuration (workload, variant, size, GPU type, dtype, GPU
    count, scaling), what ``llmb plan --set`` says of those settings (``cp 2 -> 1, dp 4 -> 8, mbs 1 -> 4,
    ga 32 -> 4``: the derived DP and GA too): the run is tuned, not the official configuration. None
    where they agree, or where the configuration is not known in full (no GPU type yet) or resolves to
    no recipe."""
    from llmb.errors import LlmbError
    from llmb.recipes.planning import tuned_settings
    from llmb.recipes.records import RecipeRequest
    from llmb.recipes.resolve import resolve_from_tables

    layout = dict(context.layout or {}) if context.source == "name" else {}
    if context.gbs is not None:
        layout["gbs"] = context.gbs
    if not layout or None in (context.gpu, context.size, context.dtype, context.gpus):
        return None
    request = RecipeRequest(
        workload.name,
        context.size,
        context.gpu,
        context.dtype,
        context.gpus,
        variant=context.variant,
        strong_scaling=context.scaling == "strong",
    )
    try:  # as ``llmb plan`` resolves the configuration: without --set, then with the name's settings
        official = resolve_from_tables(workload, request)
    except LlmbError:
        return None
    ran = {
        setting: named
        for setting, named in layout.items()
        if not _same_setting(setting, getattr(official, setting), named, official, layout)
    }
    if not ran:
        return None
    try:
        tuned = resolve_from_tables(workload, replace(request, overrides=ran))
    except LlmbError:  # a layout llmb would refuse to run here: the settings as the name gives them
        tuned = replace(official, **ran)
    return ", ".join(s.text() for s in tuned_settings(official, tuned))[:500] or None
