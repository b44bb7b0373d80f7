"""What a production framework is told about a run, framework-independent.

``describe`` turns a resolved recipe and ``llmb run``'s options into the JSON
configuration a worker hands the framework (``RunSpec.framework_config``):
the seed's layout and batch, the benchmark's fixed training settings, the
precision preset, profiling, checkpoints, the production environment, and
the framework's ``overrides`` (``llmb.engines.frameworks.overrides``). The framework
module passed in supplies only names: presets, its launcher's variables, its
attribute paths. The keys are documented in ``docs/production-frameworks.md``.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from llmb.engines.frameworks import settings
from llmb.errors import UsageError
from llmb.paths import hf_home, install_dir
from llmb.recipes.gpus import gpu_type, recipes_of
from llmb.recipes.records import Production, Recipe, Workload
from llmb.runs.profiling import fit_window
from llmb.runs.runspec import NCCL_TRACE_STEPS, RunOptions

# field-facts §3, the benchmark overrides of the seeds' launchers (both frameworks).
EVAL_ITERS = 0
LOG_INTERVAL = 1
LR_WARMUP_ITERS = 10
LR_DECAY_ITERS = 50
CHECK_FOR_NAN_IN_GRAD = False
# field-facts §3: NCCL_P2P_NET_CHUNKSIZE=2097152 when PP > 1.
P2P_NET_CHUNKSIZE = 2097152
NCCL_TRACE_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "COLL"}
NSYS_OPTIONS = (
    "--trace=cuda,nvtx",
    "--capture-range=cudaProfilerApi",
    "--capture-range-end=stop",
    "--force-overwrite=true",
)
GPU_METRICS_OPTIONS = ("--gpu-metrics-devices=all",)


class Framework(Protocol):
    """What ``describe`` needs from a framework module (``megatron_bridge``, ``nemo2``)."""

    NAME: str
    TITLE: str
    PRESETS: dict[str, str]  # dtype -> its mixed-precision preset
    # recipe -> pipeline layers it adds (embedding, loss)
    PIPELINE_SPLIT_EXTRA_LAYERS: dict[str, int]
    PRECISION_NAMES: dict[str, str]  # preset -> the launcher's precision name (fp8_cs, ...)
    NSYS_REPORT: str  # nsys report name, with %q{VAR} for the launcher's variables

    def default_tp_comm_overlap(self, config: dict) -> bool | None: ...
    def recipe_function(self, recipe: str, family: str) -> str: ...
    def recipe_arguments(self, config: dict) -> dict[str, Any]: ...
    def checkpoint_paths(
        self, save_dir: str | None, load_dir: str | None
    ) -> tuple[str | None, str | None]: ...
    def loaded_step(self, load_dir: str) -> int | None: ...
    def production_env(self, config: dict) -> dict[str, str]: ...
    def overrides(self, config: dict) -> dict[str, Any]: ...


def memory_settings(model: dict) -> dict[str, object]:
    """Full recompute of N layers and CPU offload of N layers' activations, in the
    names of Megatron's transformer configuration (both frameworks use them)."""
    chosen: dict[str, object] = {}
    if model["recompute_layers"]:
        chosen.update(
            recompute_granularity="full",
            recompute_method="block",
            recompute_num_layers=model["recompute_layers"],
        )
    if model["offload_layers"]:
        chosen.update(
            cpu_offloading=True,
            cpu_offloading_weights=False,
            cpu_offloading_num_layers=model["offload_layers"],
        )
    return chosen


def production_of(workload: Workload, variant_name: str) -> Production:
    variant = workload.variant(variant_name)
    if variant is None or variant.production is None:
        raise UsageError(
            f"{workload.name}'s {variant_name} recipes name no production framework settings "
            f"(no 'production:' section in its workload.yaml), so only the torch engine runs them: "
            f"use --backend local."
        )
    return variant.production


def valid_layers(
    framework: Framework, recipe: str, full: int, pp: int, vp: int | None
) -> list[int] | None:
    """The layer counts (up to ``full``) Megatron splits over this pipeline: the layers, plus
    the embedding and loss where ``recipe`` counts them, in ``pp`` stages of ``vp`` chunks
    each; None without pipeline parallelism, where any count splits."""
    if pp == 1:
        return None
    if recipe in getattr(framework, "PIPELINE_LAYOUT_RECIPES", ()):
        # an explicit layout (llmb.engines.frameworks.megatron_bridge.pipeline_layout): a layer for
        # every stage but the last, which may hold only the MTP module and the loss
        return list(range(min(pp * (vp or 1) - 1, full), full + 1))
    extra = framework.PIPELINE_SPLIT_EXTRA_LAYERS.get(recipe, 0)
    return [n for n in range(1, full + 1) if (n + extra) % (pp * (vp or 1)) == 0]


def layers_rule(framework: Framework, recipe: str, pp: int, vp: int | None) -> str:
    stages = f"{pp} pipeline stages" + (f" of {vp} virtual stages each" if vp else "")
    if recipe in getattr(framework, "PIPELINE_LAYOUT_RECIPES", ()):
        return (
            f"{framework.TITLE}'s {recipe} recipe places its layers by a pipeline layout over {stages}, "
            f"which needs a layer on every stage but the last"
        )
    extra = framework.PIPELINE_SPLIT_EXTRA_LAYERS.get(recipe, 0)
    if extra:
        return (
            f"{framework.TITLE}'s {recipe} recipe counts the embedding and the loss as pipeline layers, so the "
            f"layers plus {extra} must split evenly into {stages}"
        )
    return f"the layers must split evenly into {stages}"


def _layers(
    framework: Framework,
    production: Production,
    workload: Workload,
    recipe: Recipe,
    options: RunOptions,
    vp: int | None,
) -> int:
    if options.proxy:
        raise UsageError(
            f"--proxy {options.proxy} shrinks the model's width, which the production frameworks "
            f"do not do; use --layers N (the full width with N layers), or the torch engine "
            f"(--backend local)."
        )
    if options.layers is None:
        return recipe.layers
    full = workload.architecture(recipe.size).layers
    if not 1 <= options.layers <= full:
        raise UsageError(
            f"--layers {options.layers}: the {recipe.size} model has {full} layers; use 1 to {full}."
        )
    name = production.recipes[recipe.size]
    valid = valid_layers(framework, name, full, recipe.pp, vp)
    if valid is not None and options.layers not in valid:
        raise UsageError(
            f"--layers {options.layers}: {layers_rule(framework, name, recipe.pp, vp)}; valid here: "
            f"{', '.join(map(str, valid))}."
        )
    return options.layers


def _train_iters(
    recipe: Recipe, options: RunOptions, window: tuple[int, int] | None, load: bool
) -> tuple[int, list[str]]:
    steps = options.steps or recipe.steps
    if load:
        return 1, ["the published recipes train 1 step after loading a checkpoint"]
    if options.nccl_trace:
        return min(steps, NCCL_TRACE_STEPS), [
            f"NCCL trace: {NCCL_TRACE_STEPS} steps, as the published recipes' traced runs"
        ]
    if window is not None and options.steps is None and window[1] != steps:
        return window[1], [
            f"profiled runs end at the profile's last step ({window[1]}), as the published "
            f"recipes' launchers do"
        ]
    return steps, []  # steps asked for: a window lies within them (_window)


def _window(production: Production, options: RunOptions, load: bool) -> tuple[int, int] | None:
    if not options.profile:
        return None
    # A seed with its own window (Llama 3.1 NeMo 2: 20-25, Nemotron-H: 46-50) keeps
    # it unless another was asked for.
    window = options.profile_window or production.profile_window
    if load:
        return window
    # within the steps asked for: the default moved into them, an asked one past them refused
    return fit_window(window, options.profile_window is not None, options.steps)[0]


def _profiling(
    framework: Framework,
    production: Production,
    recipe: Recipe,
    options: RunOptions,
    window: tuple[int, int] | None,
    inner_dir: str,
) -> dict | None:
    if window is None:
        return None
    first, last = production.profile_ranks or (0, recipe.gpus)
    output_dir = os.path.join(inner_dir, "nsys_profile")
    return {
        "tool": "nsys",
        "start_step": window[0],
        "stop_step": window[1],
        "ranks": list(range(first, min(last, recipe.gpus))),
        "output_dir": output_dir,
        "nsys": [
            "nsys",
            "profile",
            *NSYS_OPTIONS,
            f"--output={os.path.join(output_dir, framework.NSYS_REPORT)}",
        ],
        "gpu_metrics": options.gpu_metrics,
        # Every process on a node would sample the same GPUs: local rank 0 samples for the node.
        "gpu_metrics_args": list(GPU_METRICS_OPTIONS) if options.gpu_metrics else [],
        "gpu_metrics_local_rank": 0,
    }


def _parallelism(recipe: Recipe) -> dict:
    # A VP with PP 1 never gets here: resolving the recipe dropped it, with a note (llmb.recipes.resolve).
    vp = recipe.vp if recipe.vp and recipe.vp > 1 and recipe.pp > 1 else None
    return {
        "tp": recipe.tp,
        "pp": recipe.pp,
        "cp": recipe.cp,
        "vp": vp,
        "ep": recipe.ep or 1,
        "etp": recipe.etp,
        "dp": recipe.dp,
        "sequence_parallel": recipe.tp > 1,
        "fsdp": recipe.fsdp,
    }


def _memory_layers(recipe: Recipe, layers: int, notes: list[str]) -> tuple[int, int]:
    """The recipe's recompute and CPU-offload layer counts, within a model cut to ``layers``:
    recompute at most every layer, offload fewer than all (Megatron's limit)."""
    recompute = min(recipe.recompute_layers, layers)
    offload = min(recipe.offload_layers, layers - 1)
    if (recompute, offload) != (recipe.recompute_layers, recipe.offload_layers):
        notes.append(
            f"with {layers} layers the recipe's recompute of {recipe.recompute_layers} and CPU offload of "
            f"{recipe.offload_layers} layers become {recompute} and {offload} (offload must leave a layer "
            f"on the GPU)"
        )
    return recompute, offload


def _model(workload: Workload, recipe: Recipe, layers: int, notes: list[str]) -> dict:
    arch = workload.architecture(recipe.size)
    recompute, offload = _memory_layers(recipe, layers, notes)
    model = {
        "num_layers": layers,
        "full_layers": arch.layers,
        # A hybrid model cut to fewer layers keeps the first `layers` of its pattern.
        "layer_pattern": arch.with_layers(layers).layer_pattern if layers < arch.layers else None,
        "seq_len": recipe.seq_len,
        "vocab_size": arch.vocab,
        "cuda_graphs": recipe.cuda_graphs,
        "recompute_layers": recompute,
        "offload_layers": offload,
    }
    if arch.dense_layers or arch.mtp_layers:
        # DeepSeekMoE: the multi-token-prediction modules, and which layers are MoE (1) after the dense
        # first ones: Megatron's list must have one entry per layer run
        model["mtp_layers"] = arch.mtp_layers
        model["moe_layer_pattern"] = [
            int(kind == "E") for kind in arch.with_layers(layers).layer_kinds()
        ]
    return model


def _training(train_iters: int, options: RunOptions) -> dict:
    return {
        "train_iters": train_iters,
        "eval_iters": EVAL_ITERS,
        "log_interval": LOG_INTERVAL,
        "lr_warmup_iters": LR_WARMUP_ITERS,
        "lr_decay_iters": max(
            LR_DECAY_ITERS, train_iters
        ),  # warm-up stays below decay (Megatron requires it)
        "check_for_nan_in_grad": CHECK_FOR_NAN_IN_GRAD,
        "mock_data": True,
        "seed": options.seed,
    }


def _precision(framework: Framework, production: Production, recipe: Recipe) -> dict:
    if recipe.dtype not in framework.PRESETS:
        raise UsageError(
            f"{framework.TITLE} has no preset for {recipe.dtype!r}; valid: "
            f"{', '.join(framework.PRESETS)}."
        )
    preset, source = framework.PRESETS[recipe.dtype], f"{framework.TITLE}'s {recipe.dtype} preset"
    for rule in production.rules:
        if rule.precision and rule.applies(
            recipe.size, recipes_of(recipe.gpu), recipe.dtype, recipe.scaling, recipe.gpus
        ):
            preset, source = rule.precision, rule.why
    name = framework.PRECISION_NAMES.get(preset, preset)
    return {"dtype": recipe.dtype, "preset": preset, "name": name, "source": source}


def _huggingface(production: Production, size: str) -> dict | None:
    files = production.huggingface
    if files is None or size not in files.repos:
        return None
    return {"repo": files.repos[size], "assets": list(files.assets), "home": hf_home(install_dir())}


def _environment(
    framework: Framework,
    config: dict,
    production: Production,
    recipe: Recipe,
    asked: dict[str, str],
) -> dict[str, str]:
    env = dict(framework.production_env(config))
    if config["parallelism"]["pp"] > 1:
        # Deliberately every recipe with pipeline parallelism, whatever its size: field-facts
        # §3 says the upstream launcher drops it for 70b/405b by mistake, and those are the
        # recipes that pipeline most.
        env["NCCL_P2P_NET_CHUNKSIZE"] = str(P2P_NET_CHUNKSIZE)
    if config["nccl_trace"]:
        env.update(NCCL_TRACE_ENV)
    if config["huggingface"]:
        env["HF_HOME"] = config["huggingface"]["home"]
    for rule in production.rules:
        if rule.env and rule.applies(
            recipe.size, recipes_of(recipe.gpu), recipe.dtype, recipe.scaling, recipe.gpus
        ):
            env.update(rule.env)
    env.update(asked)  # the recipe's and the user's variables win
    return env


def describe(
    framework: Framework,
    workload: Workload,
    recipe: Recipe,
    options: RunOptions,
    *,
    experiment: str,
    inner_dir: str,
    checkpoint_save_dir: str | None,
    checkpoint_load_dir: str | None,
) -> dict:
    """The framework configuration of ``recipe`` run with ``options`` (JSON-serialisable)."""
    production = production_of(workload, recipe.variant)
    if options.profile and options.nccl_trace:
        raise UsageError(
            "--profile and --nccl-trace cannot be combined (the published recipes run them separately)."
        )
    arch = workload.architecture(recipe.size)
    window = _window(production, options, checkpoint_load_dir is not None)
    train_iters, notes = _train_iters(recipe, options, window, checkpoint_load_dir is not None)
    parallelism = _parallelism(recipe)
    layers = _layers(framework, production, workload, recipe, options, parallelism["vp"])
    asked = dict(recipe.env) | dict(options.env)
    for secret in settings.SECRETS & set(asked):
        del asked[secret]
        notes.append(
            f"{secret} is not passed to the ranks: runs read the files llmb install fetched, offline."
        )
    chosen, applied, setting_notes = settings.apply(asked)
    save_dir, load_dir = framework.checkpoint_paths(checkpoint_save_dir, checkpoint_load_dir)
    huggingface = _huggingface(production, recipe.size)
    config: dict[str, Any] = {
        "framework": framework.NAME,
        # the recipe's GPU type's (an H200 runs the H100's recipe, in its container)
        "container": workload.variant(recipe.variant).container_for(recipes_of(recipe.gpu)),
        "workload": workload.name,
        "variant": recipe.variant,
        "size": recipe.size,
        "gpu": recipe.gpu,
        "gpu_sm": gpu_type(recipe.gpu).sm,
        "dtype": recipe.dtype,
        "recipe": production.recipes[recipe.size],
        "recipe_function": framework.recipe_function(production.recipes[recipe.size], arch.family),
        "experiment": experiment,
        "inner_dir": inner_dir,
        "gpus": recipe.gpus,
        "nodes": recipe.nodes,
        "gpus_per_node": recipe.gpus_per_node,
        "parallelism": parallelism,
        "batch": {"mbs": recipe.mbs, "gbs": recipe.gbs, "ga": recipe.ga},
        "model": _model(workload, recipe, layers, notes),
        "training": _training(train_iters, options),
        "precision": _precision(framework, production, recipe),
        "tp_comm_overlap": None,
        "profiling": _profiling(framework, production, recipe, options, window, inner_dir),
        "nccl_trace": options.nccl_trace,
        "checkpoint": {
            "save_dir": save_dir,
            "save_interval": train_iters if save_dir else None,
            "load_dir": load_dir,
            "load_step": framework.loaded_step(load_dir) if load_dir else None,
        },
        "huggingface": huggingface,
        "tokenizer": (
            {"library": "huggingface", "name": huggingface["repo"]}
            if huggingface and "tokenizer" in huggingface["assets"]
            else {"library": "null", "vocab_size": arch.vocab}
        ),
        "flops_callback": production.flops_callback,
        "settings": applied,
        "notes": notes + setting_notes,
    }
    config["recipe_arguments"] = framework.recipe_arguments(config)
    config["tp_comm_overlap"] = chosen.get(
        "tp_comm_overlap", framework.default_tp_comm_overlap(config)
    )
    config["env"] = _environment(framework, config, production, recipe, asked)
    config["overrides"] = framework.overrides(config)
    for rule in production.rules:  # the launcher's settings for some recipes only, after llmb's own
        if rule.overrides and rule.applies(
            recipe.size, recipes_of(recipe.gpu), recipe.dtype, recipe.scaling, recipe.gpus
        ):
            config["overrides"].update(rule.overrides)
    # --framework-arg: the user's fields, checked against the framework's catalogue, last: they win over llmb's
    from llmb.engines.frameworks.fields import check

    asked_fields = check(options.framework_args, framework.NAME)
    for path, value in asked_fields:
        config["overrides"].pop(path, None)
        config["overrides"][path] = value
    if asked_fields:
        config["framework_args"] = dict(asked_fields)
    return config
