"""Run llmb's Megatron-Bridge configurations through the real Megatron-Bridge.

    python check_megatron_bridge.py CONFIGS.json RESULTS.json

runs in a Python 3.12 environment with Megatron-Bridge installed (see
``tests/frameworks/envs.py``) and ``llmb`` importable (PYTHONPATH). For each
``{"id", "config"}`` of CONFIGS.json it builds the recipe's
``ConfigContainer`` exactly as the worker does (``llmb.engines.frameworks.runtime.
build_recipe``: the recipe function, then llmb's overrides), runs
``ConfigContainer.validate()`` with WORLD_SIZE set to the run's GPU count,
and reads back the values that decide what runs. RESULTS.json:
``{"framework", "versions", "results": [{"id", "ok", "error", "observed"}]}``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback


def versions() -> dict[str, str | None]:
    """What this environment runs, as the worker records it (``runtime.framework_versions``)."""
    from llmb.engines.frameworks import megatron_bridge
    from llmb.engines.frameworks.runtime import framework_versions

    return framework_versions(megatron_bridge.DISTRIBUTIONS + ("transformers",))


def _value(obj, path: str):
    for part in path.split("."):
        if obj is None:
            return None
        obj = getattr(obj, part, None)
    if (
        hasattr(obj, "value")
        and type(obj).__module__ != "builtins"
        and not isinstance(obj, (int, float, str))
    ):
        return obj.value  # enums
    if isinstance(obj, (list, tuple)):
        return [getattr(v, "value", v) for v in obj]
    return obj if isinstance(obj, (int, float, str, bool, type(None))) else repr(obj)


OBSERVED = {
    "tp": "model.tensor_model_parallel_size",
    "pp": "model.pipeline_model_parallel_size",
    "cp": "model.context_parallel_size",
    "vp": "model.virtual_pipeline_model_parallel_size",
    "ep": "model.expert_model_parallel_size",
    "etp": "model.expert_tensor_parallel_size",
    "sequence_parallel": "model.sequence_parallel",
    "dp": "data_parallel_size",
    "mbs": "train.micro_batch_size",
    "gbs": "train.global_batch_size",
    "train_iters": "train.train_iters",
    "seq_length": "model.seq_length",
    "dataset_seq_length": "dataset.seq_length",
    "num_layers": "model.num_layers",
    "log_interval": "logger.log_interval",
    "lr_warmup_iters": "scheduler.lr_warmup_iters",
    "lr_decay_iters": "scheduler.lr_decay_iters",
    "check_for_nan_in_grad": "ddp.check_for_nan_in_grad",
    "fsdp": "ddp.use_megatron_fsdp",
    "fsdp_sharding": "ddp.data_parallel_sharding_strategy",
    "recompute_granularity": "model.recompute_granularity",
    "recompute_method": "model.recompute_method",
    "recompute_num_layers": "model.recompute_num_layers",
    "recompute_modules": "model.recompute_modules",
    "moe_layer_freq": "model.moe_layer_freq",
    "mtp_num_layers": "model.mtp_num_layers",
    "vocab_size": "model.vocab_size",
    "position_embedding_type": "model.position_embedding_type",
    "cpu_offloading": "model.cpu_offloading",
    "cpu_offloading_num_layers": "model.cpu_offloading_num_layers",
    "cuda_graph_impl": "model.cuda_graph_impl",
    "fp8": "mixed_precision.fp8",
    "fp8_recipe": "mixed_precision.fp8_recipe",
    "fp4": "mixed_precision.fp4",
    "fp4_recipe": "mixed_precision.fp4_recipe",
    "bf16": "mixed_precision.bf16",
    "first_last_layers_bf16": "mixed_precision.first_last_layers_bf16",
    "tp_comm_overlap": "comm_overlap.tp_comm_overlap",
    "dataset_blend": "dataset.blend",
    "checkpoint_save": "checkpoint.save",
    "checkpoint_save_interval": "checkpoint.save_interval",
    "checkpoint_load": "checkpoint.load",
    "checkpoint_format": "checkpoint.ckpt_format",
    "checkpoint_step": "checkpoint.ckpt_step",
    "finetune": "checkpoint.finetune",
    "nsys": "profiling.use_nsys_profiler",
    "profile_step_start": "profiling.profile_step_start",
    "profile_step_end": "profiling.profile_step_end",
    "profile_ranks": "profiling.profile_ranks",
    "eval_iters": "validation.eval_iters",
    "seed": "rng.seed",
}


def observe(container) -> dict:
    observed = {key: _value(container, path) for key, path in OBSERVED.items()}
    observed["dataset_type"] = type(container.dataset).__name__
    # before Megatron-Bridge 0.6 the field was sequence_length
    if observed["dataset_seq_length"] is None:
        observed["dataset_seq_length"] = _value(container, "dataset.sequence_length")
    if observed["eval_iters"] is None:
        observed["eval_iters"] = _value(container, "train.eval_iters")
    return observed


def observe_asked(container, config: dict) -> dict:
    """The fields --framework-arg set (``config["framework_args"]``), read back from the built object."""
    return {path: _value(container, path) for path in config.get("framework_args") or {}}


# What torch.cuda.get_device_properties(0) names each GPU type (the product names NVIDIA's driver reports).
DEVICE_NAMES = {
    "h100": "NVIDIA H100 80GB HBM3",
    "h200": "NVIDIA H200",
    "b200": "NVIDIA B200",
    "b300": "NVIDIA B300 SXM6 AC",
    "gb200": "NVIDIA GB200",
    "gb300": "NVIDIA GB300",
}


@contextlib.contextmanager
def the_rows_gpu(config: dict):
    """Without a GPU here, ``torch.cuda.get_device_properties`` answers for the row's GPU type: Megatron-Bridge's
    MoE recipes (Qwen3's ``apply_flex_dispatcher_backend``) read the device to pick the token dispatcher, as
    they do on the cluster's nodes. Where a GPU is present it answers itself."""
    import types

    import torch

    if torch.cuda.is_available():
        yield
        return
    sm = int(config["gpu_sm"] or 0)
    device = types.SimpleNamespace(
        name=DEVICE_NAMES.get(config["gpu"], config["gpu"]),
        major=sm // 10,
        minor=sm % 10,
        multi_processor_count=132 if sm < 100 else 148,
        total_memory=80 * 2**30,
    )
    # Megatron-Bridge 0.6 picks the dispatcher by the device only where CUDA is available (without it,
    # it keeps the recipe's flex dispatcher, which validate() then checks against the device).
    originals = torch.cuda.get_device_properties, torch.cuda.is_available
    torch.cuda.get_device_properties = lambda *args, **kwargs: device
    torch.cuda.is_available = lambda: True
    try:
        yield
    finally:
        torch.cuda.get_device_properties, torch.cuda.is_available = originals


def check(config: dict) -> dict:
    from llmb.engines.frameworks.runtime import build_recipe

    os.environ["WORLD_SIZE"] = str(config["gpus"])
    # The recipe and validate() print progress; only the outcome goes to RESULTS.json.
    with contextlib.redirect_stdout(io.StringIO()), the_rows_gpu(config):
        container = build_recipe(config)
        container.validate()
    return {**observe(container), "framework_args": observe_asked(container, config)}


def main(configs_path: str, results_path: str) -> int:
    with open(configs_path, encoding="utf-8") as handle:
        items = json.load(handle)
    results = []
    for item in items:
        try:
            results.append(
                {"id": item["id"], "ok": True, "error": None, "observed": check(item["config"])}
            )
        except Exception as exc:  # every failure is a result, named with its configuration
            last = traceback.extract_tb(exc.__traceback__)[-1]
            where = f"{os.path.basename(last.filename)}:{last.lineno}"
            message = " ".join(f"{type(exc).__name__}: {exc}".split())
            results.append(
                {"id": item["id"], "ok": False, "error": f"{message} ({where})", "observed": None}
            )
    found = versions()
    with open(results_path, "w", encoding="utf-8") as handle:
        json.dump(
            {"framework": "megatron_bridge", "versions": found, "results": results},
            handle,
            indent=1,
        )
    passed = sum(r["ok"] for r in results)
    print(
        f"megatron-bridge {found['megatron-bridge']} (megatron-core {found['megatron-core']}): "
        f"{passed}/{len(results)} configurations validated"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
