"""NeMo 2: its names for what ``describe`` decided, and the run itself.

The run takes the NeMo recipe of the size (``nemotron4_340b`` ->
``nemo.collections.llm.recipes.nemotron4_340b.pretrain_recipe(...,
performance_mode=True)``, a NeMo-Run ``Partial`` of ``llm.pretrain``),
applies the configuration's ``overrides`` to it, builds it with fiddle and
calls it on this rank; Lightning logs the ``Training epoch 0, iteration
i/N | ...`` lines llmb's parser reads. Names come from NeMo's public API
(recipes, trainer/strategy/data/log fields, precision presets, callbacks)
and the settings of the seeds' NeMo 2 performance launchers.
"""

from __future__ import annotations

import os
from typing import Any

from llmb.engines.frameworks.description import memory_settings

NAME = "nemo2"
TITLE = "NeMo 2"
PACKAGE = "nemo.collections.llm"
RECIPES = "nemo.collections.llm.recipes"
PRECISION = "nemo.collections.llm.recipes.precision.mixed_precision"
CONFIG = "nemo_run:Config"
NULL_TOKENIZER = "nemo.collections.nlp.modules.common.tokenizer_utils:get_nmt_tokenizer"
HF_TOKENIZER = "nemo.collections.common.tokenizers.huggingface:AutoTokenizer"
MOCK_DATA = "nemo.collections.llm.gpt.data.mock:MockDataModule"
CHECKPOINT = "nemo.lightning.pytorch.callbacks:ModelCheckpoint"
NSYS = "nemo.lightning.pytorch.callbacks:NsysCallback"
FLOPS = "nemo.lightning.pytorch.callbacks.flops_callback:FLOPsMeasurementCallback"
RESUME = "nemo.lightning:AutoResume"
RESTORE = "nemo.lightning:RestoreConfig"
# What a run records it ran with (framework_versions.json beside the run).
DISTRIBUTIONS = (
    "nemo-toolkit",
    "nemo-run",
    "megatron-core",
    "transformer-engine",
    "torch",
    "lightning",
)
# FP8 is per-tensor delayed scaling: the seeds' launchers' default FP8 recipe, and what
# the Nemotron-4 seed says ("Per-tensor delayed scaling recipe is used for FP8 training").
PRESETS = {"bf16": "bf16_mixed", "fp8": "bf16_with_fp8_mixed"}
PRECISION_NAMES = {
    "bf16_mixed": "bf16",
    "bf16_with_fp8_mixed": "fp8_ds",
    "bf16_with_fp8_current_scaling_mixed": "fp8_cs",
    "bf16_with_mxfp8_mixed": "fp8_mx",
}
# The NeMo 2 seeds' report names: profile_${SLURM_JOB_ID}_nodeId_rankId.nsys-rep
NSYS_REPORT = "profile_%q{SLURM_JOB_ID}_%q{SLURM_NODEID}_%q{SLURM_PROCID}"
# The seeds' NeMo 2 performance launcher's environment (its Slurm executor and PerfEnvPlugin).
LAUNCHER_ENV = {
    "TORCH_NCCL_AVOID_RECORD_STREAMS": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",  # llmb install fetched the Hugging Face files; jobs get no token
    "TOKENIZERS_PARALLELISM": "False",
    "NCCL_NVLS_ENABLE": "0",
    "NVTE_FLASH_ATTN": "1",
    "NVTE_FUSED_ATTN": "1",
    "NEMO_LOG_MEMORY_USAGE": "1",
    "NVTE_FWD_LAYERNORM_SM_MARGIN": "16",
    "NVTE_BWD_LAYERNORM_SM_MARGIN": "16",
}


def _config(target: str, **kwargs: Any) -> dict:
    """A NeMo-Run ``Config`` of ``target`` (built with the recipe, as the recipe's own parts are)."""
    return {"factory": CONFIG, "args": [{"ref": target}], "kwargs": kwargs}


def default_tp_comm_overlap(config: dict) -> None:
    """None: the performance recipe's own choice (its MegatronCommOverlapCallback)."""
    return None


def recipe_function(recipe: str, family: str) -> str:
    return f"{RECIPES}.{recipe}:pretrain_recipe"


def recipe_arguments(config: dict) -> dict[str, Any]:
    return {
        "num_nodes": config["nodes"],
        "num_gpus_per_node": config["gpus_per_node"],
        "performance_mode": True,
    }


def checkpoint_paths(save_dir: str | None, load_dir: str | None) -> tuple[str | None, str | None]:
    """NeMo saves ``<name>--...-consumed_samples=N/weights`` under the directory it is
    given, and loads the directory above ``weights/`` (the seeds' LOAD_CHECKPOINT_PATH)."""
    if save_dir and os.path.basename(save_dir.rstrip("/")) == "weights":
        save_dir = os.path.dirname(os.path.dirname(save_dir.rstrip("/")))
    if load_dir and os.path.basename(load_dir.rstrip("/")) == "weights":
        load_dir = os.path.dirname(load_dir.rstrip("/"))
    return save_dir, load_dir


def loaded_step(load_dir: str) -> int | None:
    """None: NeMo restores the weights and optimizer (RestoreConfig) and counts steps from 0."""
    return None


# NeMo 2 recipes whose strategy counts the embedding and the loss as pipeline layers
# (account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split).
PIPELINE_SPLIT_EXTRA_LAYERS = {"llama31_405b": 2}


def production_env(config: dict) -> dict[str, str]:
    env = dict(LAUNCHER_ENV)
    p = config["parallelism"]
    if p["tp"] > 1 or p["cp"] > 1:
        # Hopper: one connection keeps TP/CP communication in launch order; Blackwell: 32.
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "32" if (config["gpu_sm"] or 0) >= 100 else "1"
    return env


def _tokenizer(config: dict) -> dict:
    tokenizer = config["tokenizer"]
    if tokenizer["library"] == "huggingface":
        return _config(HF_TOKENIZER, pretrained_model_name=tokenizer["name"], use_fast=True)
    return _config(
        NULL_TOKENIZER,
        library="null",
        model_name="NullTokenizer",
        vocab_size=tokenizer["vocab_size"],
    )


def overrides(config: dict) -> dict[str, Any]:
    """The recipe's fields to set, in order (``llmb.engines.frameworks.overrides``)."""
    p, b, m, t = config["parallelism"], config["batch"], config["model"], config["training"]
    steps = t["train_iters"]
    out: dict[str, Any] = {
        "trainer.num_nodes": config["nodes"],
        "trainer.devices": config["gpus_per_node"],
        "trainer.max_steps": steps,
        "trainer.val_check_interval": steps,
        "trainer.limit_val_batches": t["eval_iters"],
        "trainer.log_every_n_steps": t["log_interval"],
        "trainer.strategy.tensor_model_parallel_size": p["tp"],
        "trainer.strategy.pipeline_model_parallel_size": p["pp"],
        "trainer.strategy.context_parallel_size": p["cp"],
        "trainer.strategy.virtual_pipeline_model_parallel_size": p["vp"],
        "trainer.strategy.expert_model_parallel_size": p["ep"],
        "trainer.strategy.expert_tensor_parallel_size": p["etp"],
        "trainer.strategy.sequence_parallel": p["sequence_parallel"],
        "trainer.strategy.ddp.check_for_nan_in_grad": t["check_for_nan_in_grad"],
        "data": _config(
            MOCK_DATA,
            seq_length=m["seq_len"],
            micro_batch_size=b["mbs"],
            global_batch_size=b["gbs"],
            num_train_samples=steps * b["gbs"],
            tokenizer=_tokenizer(config),
        ),
        "model.tokenizer": {"path": "data.tokenizer"},
        "model.config.seq_length": m["seq_len"],
        "model.config.num_layers": m["num_layers"],
        "model.config.enable_cuda_graph": m["cuda_graphs"],
        "trainer.strategy.use_te_rng_tracker": m["cuda_graphs"],
        "optim.lr_scheduler.warmup_steps": t["lr_warmup_iters"],
        "optim.lr_scheduler.constant_steps": 0,
        "optim.lr_scheduler.max_steps": t["lr_decay_iters"],
        "trainer.plugins": {"factory": f"{PRECISION}:{config['precision']['preset']}"},
    }
    if config["precision"]["dtype"] == "fp8":
        out["trainer.plugins.grad_reduce_in_fp32"] = False
    if m["layer_pattern"]:
        out["model.config.hybrid_override_pattern"] = m["layer_pattern"]
    if p["fsdp"]:
        out["trainer.strategy.fsdp"] = "megatron"
        out["trainer.strategy.ddp.data_parallel_sharding_strategy"] = "optim_grads_params"
    out.update({f"model.config.{name}": value for name, value in memory_settings(m).items()})
    if config["tp_comm_overlap"] is not None:
        out["trainer.callbacks[MegatronCommOverlapCallback].tp_comm_overlap"] = config[
            "tp_comm_overlap"
        ]
    out.update(_logging_and_checkpoints(config))
    callbacks = _callbacks(config)
    if callbacks:
        out["trainer.callbacks+"] = callbacks
    return out


def _logging_and_checkpoints(config: dict) -> dict[str, Any]:
    checkpoint = config["checkpoint"]
    out: dict[str, Any] = {
        "log.log_dir": os.path.join(
            config["inner_dir"], "code", "nemo_experiments"
        ),  # the seeds' layout
        "log.name": "default",
        "log.use_datetime_version": False,
        "log.tensorboard": None,
        "trainer.callbacks[ModelCheckpoint]-": None,  # checkpoints only where asked for
        "trainer.enable_checkpointing": bool(checkpoint["save_dir"]),
        "log.ckpt": None,
    }
    if checkpoint["save_dir"]:
        out["log.ckpt"] = _config(
            CHECKPOINT,
            dirpath=checkpoint["save_dir"],
            every_n_train_steps=checkpoint["save_interval"],
            save_last=False,
            save_top_k=1,
        )
    if checkpoint["load_dir"]:
        out["resume"] = _config(
            RESUME,
            resume_if_exists=True,
            resume_ignore_no_checkpoint=False,
            restore_config=_config(
                RESTORE,
                path=checkpoint["load_dir"],
                load_model_state=True,
                load_optim_state=True,
                load_artifacts=False,
            ),
        )
    return out


def _callbacks(config: dict) -> list[dict]:
    callbacks = []
    if config["flops_callback"]:  # the TFLOPS_per_GPU of the log lines
        callbacks.append(
            _config(
                FLOPS,
                model_config={"path": "model.config"},
                data_config={"path": "data"},
                model_name=config["flops_callback"],
            )
        )
    profiling = config["profiling"]
    if profiling:
        callbacks.append(
            _config(
                NSYS,
                start_step=profiling["start_step"],
                end_step=profiling["stop_step"],
                ranks=profiling["ranks"],
                gen_shape=False,
            )
        )
    return callbacks


def train(config: dict, rank: int, world: int, local_rank: int) -> None:
    from llmb.engines.frameworks.runtime import build_recipe, enter

    enter(
        config, rank, world, local_rank, DISTRIBUTIONS, (PACKAGE, TITLE), ("nemo_run", "NeMo-Run")
    )
    import fiddle as fdl

    fdl.build(build_recipe(config))()
