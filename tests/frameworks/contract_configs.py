"""The framework configurations the contract tests hand the real frameworks.

Every seed row of every variant a framework runs (at its smallest tested
scale), in each of the run modes below: what ``llmb run`` on a cluster would
tell Megatron-Bridge or NeMo 2. Importable from the project's own venv
(Python 3.10+); the framework side only ever sees the JSON.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace

from llmb.engines.frameworks import build_config, framework
from llmb.engines.frameworks.description import production_of, valid_layers
from llmb.errors import UsageError
from llmb.recipes.records import RecipeRequest
from llmb.runs.runspec import RunOptions, checkpoint_dirs

INNER = "/exp/inner"  # the experiment's inner directory inside the job
LOAD_STEP = 50  # the seeds load the checkpoint their 50-step run saved

# name -> (options, checkpoint-save, checkpoint-load)
MODES: dict[str, tuple[RunOptions, bool, bool]] = {
    "default": (RunOptions(), False, False),
    "profile+save": (RunOptions(profile=True, checkpoint_save=True), True, False),
    "load": (RunOptions(checkpoint_load="<saved>"), False, True),
    "nccl-trace": (RunOptions(nccl_trace=True), False, False),
    "tp-comm-overlap-off": (RunOptions(env=(("TP_COMM_OVERLAP", "False"),)), False, False),
    "layers4": (RunOptions(layers=4), False, False),
}


def seed_rows(host, framework: str | None = None):
    """(workload, variant, series, dtype) for every seed row and precision."""
    for workload in host.workloads().values():
        for variant in workload.variants:
            if framework and variant.framework != framework:
                continue
            for series in variant.series:
                for dtype in series.dtypes:
                    yield workload, variant, series, dtype


def resolve_smallest(host, workload, variant, series, dtype):
    return host.resolve(
        RecipeRequest(
            workload.name,
            series.size,
            series.gpu,
            dtype,
            series.min_gpus,
            variant=variant.name,
            strong_scaling=series.scaling == "strong",
        )
    )


def _saved_dir(framework: str, gbs: int) -> str:
    """The directory the seeds' 50-step run with ENABLE_CHECKPOINT saved (LOAD_CHECKPOINT_PATH)."""
    saved, _ = checkpoint_dirs(RunOptions(checkpoint_save=True), framework, INNER, LOAD_STEP, gbs)
    # NeMo 2's seeds load the directory above weights/.
    return os.path.dirname(saved) if os.path.basename(saved) == "weights" else saved


def proxy_layers(workload, recipe, asked: int) -> int:
    """``asked``, or the smallest layer count the framework's recipe splits over this
    row's pipeline where it refuses ``asked`` (llmb refuses it too: UsageError)."""
    production = production_of(workload, recipe.variant)
    vp = recipe.vp if recipe.vp and recipe.vp > 1 and recipe.pp > 1 else None
    valid = valid_layers(
        framework(recipe.framework),
        production.recipes[recipe.size],
        workload.architecture(recipe.size).layers,
        recipe.pp,
        vp,
    )
    return asked if valid is None or asked in valid else min(valid)


def configuration(workload, recipe, mode: str) -> dict:
    options, save, load = MODES[mode]
    if options.layers:
        layers = proxy_layers(workload, recipe, options.layers)
        if layers != options.layers:
            try:
                build_config(
                    workload,
                    recipe,
                    options,
                    experiment="pretrain_contract",
                    inner_dir=INNER,
                    checkpoint_save_dir=None,
                    checkpoint_load_dir=None,
                )
            except UsageError:
                options = replace(options, layers=layers)
            else:
                raise AssertionError(
                    f"--layers {options.layers} was not refused where the framework refuses it"
                )
    save_dir = (
        checkpoint_dirs(
            options, recipe.framework, INNER, options.steps or recipe.steps, recipe.gbs
        )[0]
        if save
        else None
    )
    load_dir = _saved_dir(recipe.framework, recipe.gbs) if load else None
    return build_config(
        workload,
        recipe,
        options,
        experiment="pretrain_contract",
        inner_dir=INNER,
        checkpoint_save_dir=save_dir,
        checkpoint_load_dir=load_dir,
    )


def row_id(workload, variant, series, dtype) -> str:
    return f"{workload.name}/{variant.name} {series.gpu} {series.size} {dtype} {series.scaling} {series.min_gpus}"


def configurations(host, framework: str) -> Iterator[tuple[str, dict]]:
    """(id, configuration) for every seed row of ``framework`` in every mode."""
    for workload, variant, series, dtype in seed_rows(host, framework):
        recipe = resolve_smallest(host, workload, variant, series, dtype)
        for mode in MODES:
            yield (
                f"{row_id(workload, variant, series, dtype)} [{mode}]",
                configuration(workload, recipe, mode),
            )
