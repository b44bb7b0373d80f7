"""Resolve a ``RecipeRequest`` against a workload's recipe tables.

The rules, in the order they are applied:

1. variant, size, GPU type, dtype and scaling must name something the
   workload's tables contain (defaults come from the variant, i.e. the seed);
2. scale: a GPU count inside a series' tested span is accepted when it gives
   a valid layout in whole nodes. It is *validated* only where the table
   tests it (``RecipeSeries.tests``: a count its rows list, or any count
   inside a range row such as ``8-128``); one between two listed counts
   (Nemotron-4's 192, between 128 and 256) is accepted with a "not tested"
   warning. Above the largest tested count it is accepted with a "not
   validated" warning (weak scaling keeps GBS per GPU, strong scaling keeps
   GBS); below the smallest it is rejected;
3. ``--set`` overrides apply, then DP and GA are derived and checked
   (whole numbers, GA >= 1, expert groups fit);
4. a virtual pipeline (VP) without a pipeline (PP 1) is dropped, with an
   adjustment note (``without_idle_vp``): Megatron-Core refuses one, so what
   runs, the plan and the experiment name all have no VP (Llama 4 on H100
   publishes VP 12 with PP 1).

Every refusal is a ``RecipeError`` whose message names the bad value and the
valid ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import fields, replace
from fractions import Fraction

from llmb.errors import RecipeError
from llmb.recipes.gpus import (
    MAX_GPUS,
    catalogue,
    gpu_type,
    in_dtype_order,
    in_gpu_order,
    recipes_of,
    runs_note,
)
from llmb.recipes.records import (
    NOT_TESTED,
    NOT_VALIDATED,
    Recipe,
    RecipeLayout,
    RecipeRequest,
    RecipeSeries,
    Variant,
    Workload,
)
from llmb.recipes.scale_expr import ScaleExpr
from llmb.recipes.validity import check_layout, derive

# The recipe fields a series fixes and --set may override.
LAYOUT_KEYS = tuple(
    f.name
    for f in fields(RecipeLayout)
    if f.name not in ("variant", "gpu", "scaling", "size", "dtypes", "provenance")
)


def _join(values: Iterable[object]) -> str:
    return ", ".join(str(v) for v in values)


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


def choose_variant(workload: Workload, name: str | None) -> Variant:
    variant = workload.variant(name)
    if variant is None:
        raise RecipeError(
            f"{workload.name} has no recipe variant {name!r}; valid variants: "
            f"{_join(v.name for v in workload.variants)} (default {workload.default_variant.name})."
        )
    return variant


def _pick(
    what: str,
    flag: str,
    env: str,
    asked: str | None,
    default: str | None,
    valid: list[str],
    context: str,
) -> str:
    if asked is None:
        if default is not None and default in valid:
            return default
        raise RecipeError(
            f"{context}: no {what} given (use {flag} or set {env}); valid: {_join(valid)}."
        )
    value = asked.strip().lower()
    if value not in valid:
        # a GPU count where the GPU type goes: --gpu 8 for --gpus 8
        meant = f" (did you mean --gpus {value}?)" if flag == "--gpu" and value.isdigit() else ""
        raise RecipeError(
            f"{context} has no {what} {asked!r}{meant}; valid {what}s: {_join(valid)}."
        )
    return value


def resolve_from_tables(workload: Workload, request: RecipeRequest) -> Recipe:
    """The core's recipe resolution (see the module docstring)."""
    variant = choose_variant(workload, request.variant)
    defaulted = [
        f"{what} {variant.defaults[what]}"
        for what in ("size", "gpu", "dtype")
        if getattr(request, what) is None and what in variant.defaults
    ]
    try:
        return _resolve(workload, variant, request)
    except RecipeError as exc:
        if not defaulted:
            raise
        raise RecipeError(
            f"{exc} (The published recipe's defaults supplied {', '.join(defaulted)}; choose with --size, --gpu, --dtype.)"
        ) from None


def size_key(size: str) -> tuple[float, str]:
    """Sizes in the order of their parameters: 8b, 70b, 405b, 405b-proxy (a name without a number last)."""
    match = re.match(r"(\d+(?:\.\d+)?)", size)
    return (float(match.group(1)) if match else float("inf"), size)


def _resolve(workload: Workload, variant: Variant, request: RecipeRequest) -> Recipe:
    label = f"{workload.name} ({variant.name} recipes)"
    series = list(variant.series)

    size = _pick(
        "size",
        "--size",
        "MODEL_SIZE",
        request.size,
        variant.defaults.get("size"),
        sorted(_unique(s.size for s in series), key=size_key),
        label,
    )
    series = [s for s in series if s.size == size]
    label = f"{workload.name} {size}"

    gpu = _pick(
        "GPU type",
        "--gpu",
        "GPU_TYPE",
        request.gpu,
        variant.defaults.get("gpu"),
        with_runners(_unique(s.gpu for s in series)),
        label,
    )
    # a GPU type that runs another's recipes (gpus.yaml runs_recipes_of: an H200 the H100's) takes its rows
    series = [s for s in series if s.gpu == recipes_of(gpu)]
    label = f"{workload.name} {size} on {gpu}"

    dtype = _pick(
        "dtype",
        "--dtype",
        "DTYPE",
        request.dtype,
        variant.defaults.get("dtype"),
        in_dtype_order(d for s in series for d in s.dtypes),
        label,
    )
    series = [s for s in series if dtype in s.dtypes]
    label = f"{workload.name} {size} {dtype} on {gpu}"

    scaling = "strong" if request.strong_scaling else "weak"
    matching = [s for s in series if s.scaling == scaling]
    if not matching:
        offered = with_runners(
            _unique(f"{s.gpu}" for s in variant.series if s.size == size and s.scaling == scaling)
        )
        where = (
            f"it has {scaling} scaling on: {_join(offered)}"
            if offered
            else f"it has no {scaling}-scaling recipes at all"
        )
        raise RecipeError(f"{label} has no {scaling}-scaling recipe; {where}.")
    series = matching

    gpus = request.gpus
    if gpus is None:
        raise RecipeError(
            f"{label}: no GPU count given (use --gpus or set JOB_TOTAL_GPUS); tested: {_scales(series)}."
        )
    if not 1 <= gpus <= MAX_GPUS:
        raise RecipeError(
            f"--gpus must be a number of GPUs from 1 to {MAX_GPUS:,}, not {gpus}; "
            f"tested: {_scales(series)}."
        )

    hardware = gpu_type(gpu)
    per_node = request.gpus_per_node or hardware.gpus_per_node
    try:
        chosen, untested, warnings = _choose_series(series, gpus, label, per_node)
        if gpus % per_node:
            raise RecipeError(
                f"{label}: {gpus} GPUs is not a whole number of {per_node}-GPU nodes; "
                f"use a multiple of {per_node} ({_valid_counts(chosen, per_node)})."
            )
        return build_recipe(
            workload,
            variant,
            chosen,
            request,
            dtype,
            gpus,
            per_node,
            not untested,
            warnings,
            label,
            gpu=gpu,
            untested=untested,
        )
    except RecipeError:
        if not request.any_scale:
            raise
    # A proxy runs on the GPU count asked for (its ranks); the warning that says what it takes from this
    # recipe and what it changes is llmb.recipes.proxies.proxy_run's.
    smallest = min(series, key=lambda s: s.min_gpus)
    return build_recipe(
        workload,
        variant,
        smallest,
        request,
        dtype,
        smallest.min_gpus,
        per_node,
        True,
        [],
        label,
        gpu=gpu,
    )


def with_runners(tables: list[str]) -> list[str]:
    """The GPU types of a workload's tables and every type that runs one of their recipes (gpus.yaml
    ``runs_recipes_of``: the H200 with the H100's), in the catalogue's order."""
    runners = [
        name
        for name, spec in catalogue().items()
        if spec.runs_recipes_of in tables and name not in tables
    ]
    return in_gpu_order(tables + runners)


def _scales(series: list[RecipeSeries]) -> str:
    ranges = _unique(f"{s.min_gpus}-{s.max_gpus}" for s in series if s.is_range)
    points = sorted({g for s in series if not s.is_range for g in s.listed_gpus})
    parts = ranges + ([", ".join(map(str, points))] if points else [])
    return " and ".join(parts) + " GPUs"


def _gbs_rule(series: RecipeSeries) -> str:
    return f"GBS = {series.gbs}" if series.gbs.per_gpu else f"GBS fixed at {series.gbs}"


def _choose_series(
    series: list[RecipeSeries], gpus: int, label: str, per_node: int
) -> tuple[RecipeSeries, str, list[str]]:
    """The series ``gpus`` runs, whether the table tests that count (``""``) or why not (``NOT_TESTED``:
    between two counts one series lists, ``NOT_VALIDATED``: above the largest), and the warning saying so.
    A count one series lists wins over a range that holds it; a count below the smallest, or in a gap
    between separate series, is refused."""
    inside = [s for s in series if s.min_gpus <= gpus <= s.max_gpus]
    if inside:
        tested = [s for s in inside if gpus in s.listed_gpus] or [
            s for s in inside if s.tests(gpus)
        ]
        if tested:
            return tested[0], "", []
        between = inside[0]
        return (
            between,
            NOT_TESTED,
            [
                f"{gpus} GPUs is between the counts the published recipe tests for {label} "
                f"({_scales([between])}): not tested, it runs the recipe's layout at this count "
                f"({between.scaling} scaling, {_gbs_rule(between)})."
            ],
        )
    largest = max(series, key=lambda s: s.max_gpus)
    smallest = min(s.min_gpus for s in series)
    if gpus > largest.max_gpus:
        return (
            largest,
            NOT_VALIDATED,
            [
                f"{gpus} GPUs is above the largest scale the published recipe tests for {label} "
                f"({largest.max_gpus}): not validated ({largest.scaling} scaling, {_gbs_rule(largest)})."
            ],
        )
    if gpus < smallest:
        raise RecipeError(
            f"{label} needs at least {smallest} GPUs; {gpus} is below the smallest tested scale "
            f"(tested: {_scales(series)})."
        )
    raise RecipeError(
        f"{label} is tested at {_scales(series)}; {gpus} GPUs falls between them. "
        f"Use one of those counts, or more than {largest.max_gpus} (not validated)."
    )


def _valid_counts(series: RecipeSeries, per_node: int, limit: int = 8) -> str:
    top = series.max_gpus
    counts = [
        n
        for n in range(per_node, top + 1, per_node)
        if n >= series.min_gpus and not check_layout(series, n)
    ]
    if not counts:
        return f"no GPU count from {series.min_gpus} to {top} works with these settings"
    if len(counts) <= limit:
        return f"valid here: {_join(counts)}"
    return f"valid here: {_join(counts[:4])}, ..., {counts[-1]}"


def build_recipe(
    workload: Workload,
    variant: Variant,
    series: RecipeSeries,
    request: RecipeRequest,
    dtype: str,
    gpus: int,
    per_node: int,
    validated: bool,
    warnings: list[str],
    label: str,
    gpu: str | None = None,
    untested: str = "",
) -> Recipe:
    """Apply ``request.overrides`` to ``series`` at ``gpus`` and derive the rest. ``gpu``: the GPU type the
    run is on, where it runs another's recipes (an H200 the H100's row): the recipe keeps it, and a
    warning says whose recipe it runs; None: the series' own. ``validated``: ``gpus`` is a count the
    series' table tests; ``untested``, where it is not, why (``Recipe.untested``)."""
    gpu = gpu or series.gpu
    if (note := runs_note(gpu)) is not None:
        warnings = [note, *warnings]
    layout = {key: getattr(series, key) for key in LAYOUT_KEYS}
    overrides = dict(request.overrides)
    steps = int(overrides.pop("steps", 50))
    for key, value in overrides.items():
        if key not in layout:
            raise RecipeError(f"cannot override {key!r}; settable: {_join(LAYOUT_KEYS)}.")
        if value != layout[key]:
            before = layout[key]
            warnings.append(
                f"--set {key}={value} overrides the published recipe's {key.upper()} {_show(before)}."
            )
        layout[key] = value
    gbs_expr = (
        layout["gbs"]
        if isinstance(layout["gbs"], ScaleExpr)
        else ScaleExpr.constant(int(layout["gbs"]))
    )
    probe = replace(series, **{k: v for k, v in layout.items() if k != "gbs"}, gbs=gbs_expr)
    problem = check_layout(probe, gpus)
    if problem:
        where = "" if not overrides else " with your --set overrides"
        hint = _valid_counts(probe, per_node)
        raise RecipeError(
            f"{label} at {gpus} GPUs{where} is impossible: {problem}. {hint[0].upper()}{hint[1:]}."
        )
    if layout["layers"] > workload.architecture(series.size).layers:
        raise RecipeError(
            f"{label}: --set layers={layout['layers']} exceeds the model's "
            f"{workload.architecture(series.size).layers} layers."
        )
    dp, gbs, ga = derive(probe, gpus)
    return without_idle_vp(
        Recipe(
            workload=workload.name,
            variant=variant.name,
            framework=variant.framework,
            size=series.size,
            gpu=gpu,
            dtype=dtype,
            gpus=gpus,
            nodes=gpus // per_node,
            gpus_per_node=per_node,
            tp=layout["tp"],
            pp=layout["pp"],
            cp=layout["cp"],
            ep=layout["ep"],
            etp=layout["etp"],
            vp=layout["vp"],
            dp=_whole(dp),
            mbs=layout["mbs"],
            gbs=_whole(gbs),
            ga=_whole(ga),
            fsdp=bool(layout["fsdp"]),
            cuda_graphs=bool(layout["cuda_graphs"]),
            seq_len=layout["seq_len"],
            layers=layout["layers"],
            scaling=series.scaling,
            validated=validated,
            steps=steps,
            recompute_layers=layout["recompute_layers"],
            offload_layers=layout["offload_layers"],
            warnings=tuple(warnings),
            errata=series.errata,
            adjustments=series.adjustments,
            # the layout's overrides: steps change how long a run is, not what it measures, so
            # --set steps=N is --steps N (neither makes a run tuned)
            overrides=tuple(sorted((k, v) for k, v in request.overrides.items() if k != "steps")),
            provenance=series.provenance,
            gbs_rule=str(gbs_expr),
            untested="" if validated else (untested or NOT_VALIDATED),
        )
    )


def without_idle_vp(recipe: Recipe) -> Recipe:
    """``recipe`` without a virtual pipeline where it has no pipeline to interleave (VP with PP 1), and a
    note in its adjustments saying so. Every recipe passes here (``PluginHost.resolve`` too), so the plan,
    the run and the experiment name say the same: Megatron-Core refuses a virtual pipeline with PP 1."""
    if recipe.vp is None or recipe.pp > 1:
        return recipe
    note = (
        f"VP {recipe.vp} dropped: with PP 1 there is no pipeline to interleave (Megatron-Core refuses a "
        f"virtual pipeline without one), so it runs with no virtual pipeline"
    )
    return replace(recipe, vp=None, adjustments=recipe.adjustments + (note,))


def _whole(value: Fraction) -> int:
    assert value.denominator == 1, value  # check_layout guarantees it
    return int(value)


def _show(value: object) -> str:
    return "NA" if value is None else str(value)
