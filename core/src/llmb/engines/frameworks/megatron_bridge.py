"""Megatron-Bridge: its names for what ``describe`` decided, and the run itself.

The run takes the Megatron-Bridge recipe of the size (``llama3_8b`` ->
``megatron.bridge.recipes.llama.llama3_8b_pretrain_config()``, a
``ConfigContainer``), applies the configuration's ``overrides`` to it, and
calls ``megatron.bridge.training.pretrain.pretrain`` with the GPT forward
step, which logs the per-iteration lines llmb's parser reads. Names come
from Megatron-Bridge's public API (recipes, ``ConfigContainer`` fields,
mixed-precision presets) and its performance launcher's settings.
"""

from __future__ import annotations

import os
import re
from typing import Any

from llmb.engines.frameworks.description import memory_settings
from llmb.errors import UsageError

NAME = "megatron_bridge"
TITLE = "Megatron-Bridge"
PACKAGE = "megatron.bridge"
RECIPES = "megatron.bridge.recipes"
MIXED_PRECISION = "megatron.bridge.training.mixed_precision:get_mixed_precision_config"
COMM_OVERLAP = "megatron.bridge.training.comm_overlap:CommOverlapConfig"
# field-facts §3: the precision names and their mixed-precision presets.
PRESETS = {
    "bf16": "bf16_mixed",
    "fp8": "bf16_with_fp8_current_scaling_mixed",
    "nvfp4": "bf16_with_nvfp4_mixed",
}
PRECISION_NAMES = {
    "bf16_mixed": "bf16",
    "bf16_with_fp8_current_scaling_mixed": "fp8_cs",
    "bf16_with_mxfp8_mixed": "fp8_mx",
    "bf16_with_nvfp4_mixed": "nvfp4",
    "bf16_with_fp8_subchannel_scaling_mixed": "fp8_sc",
}
# The seed's report names: profile_${SLURM_JOB_ID}_${SLURM_NODEID}_${SLURM_LOCALID}.nsys-rep
NSYS_REPORT = "profile_%q{SLURM_JOB_ID}_%q{SLURM_NODEID}_%q{SLURM_LOCALID}"
# Its performance launcher's environment for every run.
LAUNCHER_ENV = {
    "TORCH_NCCL_AVOID_RECORD_STREAMS": "1",
    "TORCH_NCCL_HIGH_PRIORITY": "1",
    "NCCL_NVLS_ENABLE": "0",
    "TOKENIZERS_PARALLELISM": "False",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",  # llmb install fetched the Hugging Face configs; jobs get no token
    "NVTE_FWD_LAYERNORM_SM_MARGIN": "16",
    "NVTE_BWD_LAYERNORM_SM_MARGIN": "16",
}
# What a run records it ran with (framework_versions.json beside the run).
DISTRIBUTIONS = ("megatron-bridge", "megatron-core", "transformer-engine", "torch")
MANUAL_GC_INTERVAL = 100
_ITERATION_DIR = re.compile(r"^iter_(\d+)$")
# Recipes whose model counts the embedding and the loss as pipeline layers
# (account_for_embedding/loss_in_pipeline_split).
PIPELINE_SPLIT_EXTRA_LAYERS = {"llama31_405b": 2, "qwen3_235b_a22b": 2}
# Recipes that place their layers by an explicit pipeline layout (pipeline_model_parallel_layout,
# set for the recipe's own PP x VP): llmb gives the layout of the run's (``pipeline_layout``).
PIPELINE_LAYOUT_RECIPES = ("deepseek_v3", "kimi_k2")
# Recipes whose module under megatron.bridge.recipes is not their family's package: Megatron-Bridge 0.4
# exports kimi_k2_pretrain_config from megatron.bridge.recipes.kimi.kimi_k2 only (no kimi/__init__.py),
# the module its performance launcher imports it from.
RECIPE_MODULES = {"kimi_k2": "kimi.kimi_k2"}
# Megatron FSDP saves and loads only this checkpoint format.
FSDP_CHECKPOINT_FORMAT = "fsdp_dtensor"


def default_tp_comm_overlap(config: dict) -> bool:
    """Overlap when there is tensor parallelism to overlap, except NVFP4 (its presets turn it off)."""
    return config["parallelism"]["tp"] > 1 and config["dtype"] != "nvfp4"


def recipe_function(recipe: str, family: str) -> str:
    return f"{RECIPES}.{RECIPE_MODULES.get(recipe, family)}:{recipe}_pretrain_config"


def pipeline_layout(layers: int, stages: int, mtp_layers: int) -> list[list[str]]:
    """The layout of ``layers`` decoder layers over ``stages`` pipeline stages (PP x VP, in Megatron's
    order): the embedding on the first stage, the MTP modules and the loss on the last. Every middle
    stage holds ceil(layers / stages) layers, the first stage as many of the rest as that allows, the
    last stage what remains: for 61 layers 16 stages 4/4.../1, 32 stages 1/2.../0 and 8 stages
    8/8.../5, the layouts Megatron-Bridge's own DeepSeek-V3 and Kimi-K2 recipes and performance
    configurations give. A count too small for that (a proxy's) is spread evenly from the first stage;
    every stage but the last needs a layer (``layers >= stages - 1``)."""
    if stages < 2 or layers < stages - 1:
        raise ValueError(f"{layers} layers do not fill {stages} pipeline stages")
    share = -(-layers // stages)
    rest = layers - share * (stages - 2)
    if rest >= 1:
        first = min(share, rest)
        counts = [first] + [share] * (stages - 2) + [rest - first]
    else:
        base, extra = divmod(layers, stages)
        counts = [base + (1 if i < extra else 0) for i in range(stages)]
    layout = [["decoder"] * n for n in counts]
    layout[0].insert(0, "embedding")
    layout[-1] += ["mtp"] * mtp_layers + ["loss"]
    return layout


def recipe_arguments(config: dict) -> dict[str, Any]:
    return {}  # the recipe functions take none; everything is an override


def checkpoint_paths(save_dir: str | None, load_dir: str | None) -> tuple[str | None, str | None]:
    """Megatron saves ``iter_NNNNNNN`` under the directory it is given; it loads the
    ``iter_NNNNNNN`` directory the seeds' LOAD_CHECKPOINT_PATH names."""
    if save_dir and _ITERATION_DIR.match(os.path.basename(save_dir.rstrip("/"))):
        save_dir = os.path.dirname(save_dir.rstrip("/"))
    if load_dir and loaded_step(load_dir) is None:
        raise UsageError(
            f"--checkpoint-load {load_dir}: {TITLE} loads the iter_NNNNNNN directory a run saved "
            f"(e.g. .../code/nemo_experiments/default/checkpoints/iter_0000050)."
        )
    return save_dir, load_dir


def loaded_step(load_dir: str) -> int | None:
    """The step a checkpoint directory ``iter_NNNNNNN`` was saved at: Megatron
    restores it (with the optimizer and RNG state) and goes on from there."""
    match = _ITERATION_DIR.match(os.path.basename(load_dir.rstrip("/")))
    return int(match[1]) if match else None


def production_env(config: dict) -> dict[str, str]:
    env = dict(LAUNCHER_ENV)
    p = config["parallelism"]
    if (config["gpu_sm"] or 0) >= 100:
        # Blackwell: more connections, no stream serialisation
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "32"
    else:
        # Hopper: one connection keeps the TP/CP communication kernels in launch order, so they overlap.
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1" if p["tp"] > 1 or p["cp"] > 1 else "8"
    if config["dtype"] == "nvfp4":
        env["NVTE_USE_FAST_MATH"] = "1"
    return env


def overrides(config: dict) -> dict[str, Any]:
    """The ``ConfigContainer`` fields to set, in order (``llmb.engines.frameworks.overrides``)."""
    p, b, m, t = config["parallelism"], config["batch"], config["model"], config["training"]
    checkpoint = config["checkpoint"]
    # A loaded checkpoint resumes at its step: run train_iters steps beyond it.
    train_iters = t["train_iters"] + (checkpoint["load_step"] or 0)
    out: dict[str, Any] = {
        "train.train_iters": train_iters,
        "validation.eval_iters": t["eval_iters"],
        "train.micro_batch_size": b["mbs"],
        "train.global_batch_size": b["gbs"],
        "train.manual_gc": True,
        "train.manual_gc_interval": MANUAL_GC_INTERVAL,
        "logger.log_interval": t["log_interval"],
        "logger.tensorboard_dir": None,
        "scheduler.lr_warmup_iters": t["lr_warmup_iters"],
        "scheduler.lr_decay_iters": max(t["lr_decay_iters"], train_iters),
        "ddp.check_for_nan_in_grad": t["check_for_nan_in_grad"],
        "rng.seed": t["seed"],
        "dataset.blend": None,  # no data path: mock data
        "dataset.seq_length": m["seq_len"],
        "tokenizer.vocab_size": m["vocab_size"],
        "model.seq_length": m["seq_len"],
        "model.num_layers": m["num_layers"],
        "model.tensor_model_parallel_size": p["tp"],
        "model.pipeline_model_parallel_size": p["pp"],
        "model.context_parallel_size": p["cp"],
        "model.virtual_pipeline_model_parallel_size": p["vp"],
        "model.expert_model_parallel_size": p["ep"],
        "model.expert_tensor_parallel_size": p["etp"],
        "model.sequence_parallel": p["sequence_parallel"],
        "mixed_precision": {"factory": MIXED_PRECISION, "args": [config["precision"]["preset"]]},
        "mixed_precision.grad_reduce_in_fp32": False,
        "ddp.grad_reduce_in_fp32": False,
        "ddp.use_megatron_fsdp": p["fsdp"],
        "model.cuda_graph_impl": "transformer_engine" if m["cuda_graphs"] else "none",
    }
    if m.get("moe_layer_pattern") is not None:  # dense first layers: one entry per layer run
        out["model.moe_layer_freq"] = m["moe_layer_pattern"]
    if config["recipe"] in PIPELINE_LAYOUT_RECIPES:
        stages = p["pp"] * (p["vp"] or 1)
        out["model.pipeline_model_parallel_layout"] = (
            pipeline_layout(m["num_layers"], stages, m.get("mtp_layers") or 0)
            if p["pp"] > 1
            else None
        )
    if config["tp_comm_overlap"]:  # the 8B recipe has no comm_overlap section: make one
        out["comm_overlap?"] = {"factory": COMM_OVERLAP, "kwargs": {"tp_comm_overlap": True}}
    out["comm_overlap.tp_comm_overlap"] = config["tp_comm_overlap"]
    if config["precision"]["name"] == "fp8_cs":
        # every layer in FP8, as the benchmarks run
        out["mixed_precision.first_last_layers_bf16"] = False
    if p["fsdp"]:
        out["ddp.data_parallel_sharding_strategy"] = "optim_grads_params"
        out["model.init_model_with_meta_device"] = True
    if m["cuda_graphs"]:
        out["rng.te_rng_tracker"] = True
        out["model.use_te_rng_tracker"] = True
    out.update({f"model.{name}": value for name, value in memory_settings(m).items()})
    profiling = config["profiling"]
    if profiling:
        out.update(
            {
                "profiling.use_nsys_profiler": True,
                "profiling.profile_step_start": profiling["start_step"],
                "profiling.profile_step_end": profiling["stop_step"],
                "profiling.profile_ranks": profiling["ranks"],
            }
        )
    # Both set, always: the recipe's own load directory (relative to the working
    # directory) would otherwise resume silently from whatever lies there.
    out["checkpoint.save"] = checkpoint["save_dir"]
    out["checkpoint.load"] = checkpoint["load_dir"]
    if checkpoint["save_dir"]:
        out["checkpoint.save_interval"] = checkpoint["save_interval"]
    if p["fsdp"] and (checkpoint["save_dir"] or checkpoint["load_dir"]):
        out["checkpoint.ckpt_format"] = FSDP_CHECKPOINT_FORMAT
    return out


def train(config: dict, rank: int, world: int, local_rank: int) -> None:
    from llmb.engines.frameworks.runtime import build_recipe, enter

    enter(config, rank, world, local_rank, DISTRIBUTIONS, (PACKAGE, TITLE))
    from megatron.bridge.training.gpt_step import forward_step
    from megatron.bridge.training.pretrain import pretrain

    pretrain(config=build_recipe(config), forward_step_func=forward_step)
