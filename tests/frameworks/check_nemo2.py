"""Run llmb's NeMo 2 configurations through the real NeMo 2 (on a CPU machine).

    python check_nemo2.py CONFIGS.json RESULTS.json

runs in a Python 3.12 environment with NeMo 2 installed
(``requirements/nemo-2.3.txt``), ``llmb`` importable (PYTHONPATH) and
``HF_HOME`` pointing at an offline Hugging Face cache holding the tokenizers
the configurations name (``nemo2_inputs.py`` writes stand-ins). For each
``{"id", "config"}`` of CONFIGS.json it builds the recipe as the worker does
(the recipe function, then ``llmb.engines.frameworks.overrides.apply``), reads back
the values that decide what runs, and builds with fiddle every part that
can be built without GPUs: the precision plugin, each callback, the data
module (with its tokenizer), the model configuration (Megatron's own
validation) and model, the strategy, the optimizer, the logger and its
checkpoint callback, ``resume``, and the trainer with the CPU accelerator in
place of the GPU one (the only field changed, on a copy). It then compares
what it read with what the configuration asked for. RESULTS.json:
``{"framework", "versions", "results": [{"id", "ok", "error", "observed"}]}``.

Only NeMo, NeMo-Run, fiddle and ``llmb.engines.frameworks.overrides`` are imported.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import sys
import time
import traceback


def versions() -> dict[str, str | None]:
    """What this environment runs, as the worker records it (``runtime.framework_versions``)."""
    from llmb.engines.frameworks import nemo2
    from llmb.engines.frameworks.runtime import framework_versions

    return framework_versions(nemo2.DISTRIBUTIONS + ("transformers",))


def _plain(value):
    if isinstance(value, (bool, int, float, str, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    target = getattr(value, "__fn_or_cls__", None)
    if target is not None:
        return f"Config[{getattr(target, '__name__', target)}]"
    enum_value = getattr(value, "value", None)
    if enum_value is not None and isinstance(enum_value, (int, str)):
        return enum_value
    return repr(value)


def _get(obj, path: str):
    for part in path.split("."):
        if obj is None:
            return None
        obj = getattr(obj, part, None)
    return obj


def _target(obj) -> str | None:
    target = getattr(obj, "__fn_or_cls__", None)
    if target is None:
        return None if obj is None else type(obj).__name__
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', target)}"


def _class(obj) -> str:
    target = getattr(obj, "__fn_or_cls__", None)
    return getattr(target, "__name__", None) or type(obj).__name__


OBSERVED = {
    "tp": "trainer.strategy.tensor_model_parallel_size",
    "pp": "trainer.strategy.pipeline_model_parallel_size",
    "cp": "trainer.strategy.context_parallel_size",
    "vp": "trainer.strategy.virtual_pipeline_model_parallel_size",
    "ep": "trainer.strategy.expert_model_parallel_size",
    "etp": "trainer.strategy.expert_tensor_parallel_size",
    "sequence_parallel": "trainer.strategy.sequence_parallel",
    "fsdp": "trainer.strategy.fsdp",
    "fsdp_sharding": "trainer.strategy.ddp.data_parallel_sharding_strategy",
    "check_for_nan_in_grad": "trainer.strategy.ddp.check_for_nan_in_grad",
    "use_te_rng_tracker": "trainer.strategy.use_te_rng_tracker",
    "num_nodes": "trainer.num_nodes",
    "devices": "trainer.devices",
    "max_steps": "trainer.max_steps",
    "val_check_interval": "trainer.val_check_interval",
    "limit_val_batches": "trainer.limit_val_batches",
    "log_every_n_steps": "trainer.log_every_n_steps",
    "enable_checkpointing": "trainer.enable_checkpointing",
    "mbs": "data.micro_batch_size",
    "gbs": "data.global_batch_size",
    "seq_len": "data.seq_length",
    "num_train_samples": "data.num_train_samples",
    "model_seq_len": "model.config.seq_length",
    "num_layers": "model.config.num_layers",
    "hybrid_override_pattern": "model.config.hybrid_override_pattern",
    "enable_cuda_graph": "model.config.enable_cuda_graph",
    "recompute_granularity": "model.config.recompute_granularity",
    "recompute_method": "model.config.recompute_method",
    "recompute_num_layers": "model.config.recompute_num_layers",
    "cpu_offloading": "model.config.cpu_offloading",
    "cpu_offloading_num_layers": "model.config.cpu_offloading_num_layers",
    "lr_warmup_steps": "optim.lr_scheduler.warmup_steps",
    "lr_max_steps": "optim.lr_scheduler.max_steps",
    "log_dir": "log.log_dir",
    "log_name": "log.name",
    "tensorboard": "log.tensorboard",
    "checkpoint_dir": "log.ckpt.dirpath",
    "checkpoint_every_n_train_steps": "log.ckpt.every_n_train_steps",
    "restore_path": "resume.restore_config.path",
    "resume_if_exists": "resume.resume_if_exists",
}
PRECISION_FIELDS = (
    "precision",
    "params_dtype",
    "fp8",
    "fp8_recipe",
    "fp8_margin",
    "fp8_amax_history_len",
    "fp8_amax_compute_algo",
    "fp8_param_gather",
    "grad_reduce_in_fp32",
)


def build_recipe(config: dict):
    """What ``llmb.engines.frameworks.runtime.build_recipe`` does (that module also imports llmb.errors)."""
    from llmb.engines.frameworks.overrides import apply, resolve_ref

    recipe = resolve_ref(config["recipe_function"])(**config["recipe_arguments"])
    return apply(recipe, config["overrides"])


def observe(recipe) -> dict:
    seen = {name: _plain(_get(recipe, path)) for name, path in OBSERVED.items()}
    plugins = _get(recipe, "trainer.plugins")
    seen["precision_plugin"] = _target(plugins)
    for name in PRECISION_FIELDS:
        seen[f"precision.{name}"] = _plain(getattr(plugins, name, None))
    seen["data_target"] = _target(_get(recipe, "data"))
    tokenizer = _get(recipe, "data.tokenizer")
    seen["tokenizer_target"] = _target(tokenizer)
    seen["tokenizer_name"] = _plain(
        getattr(tokenizer, "pretrained_model_name", None) or getattr(tokenizer, "model_name", None)
    )
    seen["tokenizer_vocab_size"] = _plain(getattr(tokenizer, "vocab_size", None))
    seen["model_tokenizer_is_data_tokenizer"] = _get(recipe, "model.tokenizer") is tokenizer
    seen["model_config"] = _target(_get(recipe, "model.config"))
    seen["checkpoint_callback"] = _target(_get(recipe, "log.ckpt"))
    seen["resume"] = _target(_get(recipe, "resume"))
    callbacks = _get(recipe, "trainer.callbacks") or []
    seen["callbacks"] = [_class(cb) for cb in callbacks]
    for cb in callbacks:
        name = _class(cb)
        if name == "MegatronCommOverlapCallback":
            seen["tp_comm_overlap"] = _plain(getattr(cb, "tp_comm_overlap", None))
            seen["overlap_param_gather_with_optimizer_step"] = _plain(
                getattr(cb, "overlap_param_gather_with_optimizer_step", None)
            )
        elif name == "FLOPsMeasurementCallback":
            seen["flops_model_name"] = _plain(getattr(cb, "model_name", None))
        elif name == "NsysCallback":
            seen["nsys"] = [
                _plain(getattr(cb, k, None)) for k in ("start_step", "end_step", "ranks")
            ]
    return seen


def expectations(config: dict, seen: dict) -> list[str]:
    """What the configuration asked for that the built recipe does not hold."""
    p, b, m, t = config["parallelism"], config["batch"], config["model"], config["training"]
    steps = t["train_iters"]
    want = {
        "tp": p["tp"],
        "pp": p["pp"],
        "cp": p["cp"],
        "vp": p["vp"],
        "ep": p["ep"],
        "etp": p["etp"],
        "sequence_parallel": p["sequence_parallel"],
        "mbs": b["mbs"],
        "gbs": b["gbs"],
        "seq_len": m["seq_len"],
        "model_seq_len": m["seq_len"],
        "num_layers": m["num_layers"],
        "max_steps": steps,
        "num_nodes": config["nodes"],
        "devices": config["gpus_per_node"],
        "enable_cuda_graph": m["cuda_graphs"],
        "checkpoint_dir": config["checkpoint"]["save_dir"],
        "enable_checkpointing": bool(config["checkpoint"]["save_dir"]),
        "hybrid_override_pattern": m["layer_pattern"]
        if m["layer_pattern"]
        else seen["hybrid_override_pattern"],
    }
    if config["checkpoint"]["load_dir"]:
        want["restore_path"] = config["checkpoint"]["load_dir"]
    if config["tp_comm_overlap"] is not None and "tp_comm_overlap" in seen:
        want["tp_comm_overlap"] = config["tp_comm_overlap"]
    if m["recompute_layers"]:
        want["recompute_num_layers"] = m["recompute_layers"]
    if m["offload_layers"]:
        want["cpu_offloading_num_layers"] = m["offload_layers"]
    problems = [
        f"{k}: configured {v!r}, recipe holds {seen.get(k)!r}"
        for k, v in want.items()
        if seen.get(k) != v
    ]
    preset = config["precision"]["preset"]
    if seen["precision_plugin"] is None or not seen["precision_plugin"].endswith(
        "MegatronMixedPrecision"
    ):
        problems.append(f"precision: {preset} gave {seen['precision_plugin']}")
    if config["precision"]["dtype"] == "fp8" and (
        seen["precision.fp8"] != "hybrid" or seen["precision.grad_reduce_in_fp32"] is not False
    ):
        problems.append(
            f"precision: fp8 asked, plugin has fp8={seen['precision.fp8']!r} "
            f"grad_reduce_in_fp32={seen['precision.grad_reduce_in_fp32']!r}"
        )
    if config["precision"]["dtype"] == "bf16" and seen["precision.fp8"] is not None:
        problems.append(f"precision: bf16 asked, plugin has fp8={seen['precision.fp8']!r}")
    if config["flops_callback"] and "FLOPsMeasurementCallback" not in seen["callbacks"]:
        problems.append("callbacks: no FLOPsMeasurementCallback")
    if config["profiling"]:
        want_nsys = [
            config["profiling"]["start_step"],
            config["profiling"]["stop_step"],
            config["profiling"]["ranks"],
        ]
        if seen.get("nsys") != want_nsys:
            problems.append(f"nsys: configured {want_nsys}, recipe holds {seen.get('nsys')}")
    if "ModelCheckpoint" in seen["callbacks"]:
        problems.append(
            "callbacks: a ModelCheckpoint in trainer.callbacks (checkpoints only where asked for)"
        )
    if (
        config["tokenizer"]["library"] == "huggingface"
        and seen["tokenizer_name"] != config["tokenizer"]["name"]
    ):
        problems.append(
            f"tokenizer: configured {config['tokenizer']['name']}, recipe holds {seen['tokenizer_name']}"
        )
    if not seen["model_tokenizer_is_data_tokenizer"]:
        problems.append("tokenizer: model.tokenizer is not the data module's tokenizer")
    return problems


def layer_split(recipe) -> str | None:
    """Megatron's split of the layers over the pipeline (``get_num_layers_to_build``, run on
    the GPUs when the model is built): the layers, plus the embedding and the loss where
    the strategy counts them, must divide into PP stages of VP chunks each."""
    strategy = recipe.trainer.strategy
    layers = recipe.model.config.num_layers
    pp = strategy.pipeline_model_parallel_size or 1
    vp = strategy.virtual_pipeline_model_parallel_size
    counted = (
        layers
        + bool(getattr(strategy, "account_for_embedding_in_pipeline_split", False))
        + bool(getattr(strategy, "account_for_loss_in_pipeline_split", False))
    )
    if counted % pp:
        return f"layer split: {counted} pipeline layers ({layers} + embedding/loss) do not divide into PP {pp}"
    if vp and pp > 1 and (counted // pp) % vp:
        return (
            f"layer split: {counted // pp} layers per pipeline stage ({layers} layers + "
            f"{counted - layers} embedding/loss) do not divide into VP {vp} chunks"
        )
    return None


def _built_trainer(recipe):
    """The trainer as NeMo builds it, with Lightning's CPU accelerator in place of the GPU one."""
    import fiddle as fdl

    trainer = copy.deepcopy(recipe.trainer)
    trainer.accelerator = "cpu"
    return fdl.build(trainer)


def cpu_substitutions(recipe) -> tuple[object, list[str]]:
    """A copy of the recipe with what only imports on a GPU machine replaced, and what was
    replaced: Transformer Engine (not installable without CUDA) provides the fused RoPE
    the recipes ask for and the Mamba layer specification of the hybrid models."""
    recipe = copy.deepcopy(recipe)
    changed = []
    try:
        import transformer_engine  # noqa: F401
    except ImportError:
        config = recipe.model.config
        if getattr(config, "apply_rope_fusion", False):
            config.apply_rope_fusion = False
            changed.append(
                "model.config.apply_rope_fusion=False (fused RoPE needs Transformer Engine)"
            )
        from nemo.collections.llm.gpt.model import ssm

        fields = (
            {f.name for f in dataclasses.fields(config.__fn_or_cls__)}
            if dataclasses.is_dataclass(getattr(config, "__fn_or_cls__", None))
            else set()
        )
        if not getattr(ssm, "HAVE_MEGATRON_CORE_OR_TE", True) and "mamba_stack_spec" in fields:
            config.mamba_stack_spec = _no_mamba_spec
            changed.append(
                "model.config.mamba_stack_spec=placeholder (Megatron's Mamba specification imports "
                "Transformer Engine)"
            )
    return recipe, changed


def _no_mamba_spec():
    raise RuntimeError("placeholder: the Mamba layer specification needs Transformer Engine")


def exercise(recipe, config: dict, seen: dict) -> list[str]:
    """Build every part that builds without GPUs; the failures, by part."""
    import fiddle as fdl

    failures = []
    built = {}
    split = layer_split(recipe)
    if split:
        failures.append(split)
    recipe, seen["cpu_substitutions"] = cpu_substitutions(recipe)

    def attempt(name, make):
        try:
            built[name] = make()
        except Exception as exc:  # noqa: BLE001 -- reported per part
            failures.append(
                f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            )

    attempt("precision", lambda: fdl.build(recipe.trainer.plugins))
    if "precision" in built:
        dtype_config = getattr(built["precision"], "dtype_config", None)
        seen["built.precision"] = {
            k: _plain(getattr(dtype_config, k, None))
            for k in ("fp8", "fp8_recipe", "fp8_param", "grad_reduce_in_fp32", "bf16")
        }
    for cb in recipe.trainer.callbacks or []:
        attempt(f"callback {_class(cb)}", lambda cb=cb: fdl.build(cb))
    flops = built.get("callback FLOPsMeasurementCallback")
    if flops is not None:
        attempt("FLOPs formula", flops.eval_model_flops)
        if "FLOPs formula" in built:
            seen["flops_per_step"] = float(built["FLOPs formula"][0])
            seen["flops_formula"] = flops.model
    attempt("data", lambda: fdl.build(recipe.data))
    if "data" in built:
        tokenizer = getattr(built["data"], "tokenizer", None)
        seen["built.tokenizer"] = type(tokenizer).__name__
        seen["built.tokenizer_vocab_size"] = _plain(getattr(tokenizer, "vocab_size", None))
        # NeMo's null tokenizer adds an end-of-document token to the vocabulary it is given.
        extra = 0 if config["tokenizer"]["library"] == "huggingface" else 1
        if seen["built.tokenizer_vocab_size"] != config["model"]["vocab_size"] + extra:
            failures.append(
                f"tokenizer: vocabulary {seen['built.tokenizer_vocab_size']}, "
                f"the model's is {config['model']['vocab_size']}"
            )
    attempt("model.config", lambda: fdl.build(recipe.model.config))
    attempt("model", lambda: fdl.build(recipe.model))
    attempt("strategy", lambda: fdl.build(recipe.trainer.strategy))
    attempt("optim", lambda: fdl.build(recipe.optim))
    attempt("log", lambda: fdl.build(recipe.log))
    if "log" in built:
        ckpt = getattr(built["log"], "ckpt", None)
        seen["built.log.ckpt"] = (
            None
            if ckpt is None
            else {
                "class": type(ckpt).__name__,
                "dirpath": _plain(getattr(ckpt, "dirpath", None)),
                "every_n_train_steps": _plain(getattr(ckpt, "_every_n_train_steps", None)),
            }
        )
    if getattr(recipe, "resume", None) is not None:
        attempt("resume", lambda: fdl.build(recipe.resume))
        if "resume" in built:
            restore = getattr(built["resume"], "restore_config", None)
            seen["built.restore_path"] = _plain(getattr(restore, "path", None))
    attempt("trainer (CPU accelerator)", lambda: _built_trainer(recipe))
    if "trainer (CPU accelerator)" in built:
        trainer = built["trainer (CPU accelerator)"]
        seen["built.trainer"] = {
            "max_steps": trainer.max_steps,
            "callbacks": [type(c).__name__ for c in trainer.callbacks],
            "precision_plugin": type(trainer.strategy.precision_plugin).__name__,
        }
    if "trainer (CPU accelerator)" in built and "model" in built:
        # What the strategy does when the trainer attaches the model: its parallelism and
        # the precision's dtypes copied into the model's configuration, then Megatron's
        # validation of that configuration (TransformerConfig.__post_init__).
        def connect():
            model = built["model"]
            built["trainer (CPU accelerator)"].strategy.connect(model)
            return model.config

        attempt("strategy.connect(model)", connect)
        connected = built.get("strategy.connect(model)")
        if connected is not None:
            seen["connected"] = {
                k: _plain(getattr(connected, k, None))
                for k in (
                    "tensor_model_parallel_size",
                    "pipeline_model_parallel_size",
                    "virtual_pipeline_model_parallel_size",
                    "context_parallel_size",
                    "expert_model_parallel_size",
                    "expert_tensor_parallel_size",
                    "sequence_parallel",
                    "num_layers",
                    "fp8",
                    "fp8_recipe",
                    "bf16",
                    "params_dtype",
                    "account_for_embedding_in_pipeline_split",
                    "account_for_loss_in_pipeline_split",
                    "recompute_granularity",
                    "recompute_method",
                    "recompute_num_layers",
                    "cpu_offloading",
                    "cpu_offloading_num_layers",
                    "enable_cuda_graph",
                )
            }
    seen["parts_built"] = sorted(built)
    return failures


def check(entry: dict) -> dict:
    config = entry["config"]
    seen: dict = {}
    try:
        recipe = build_recipe(config)
        seen.update(observe(recipe))
        # the fields --framework-arg set, read back from the built recipe
        seen["framework_args"] = {
            path: _plain(_get(recipe, path)) for path in config.get("framework_args") or {}
        }
        problems = expectations(config, seen)
        problems += exercise(recipe, config, seen)
        error = "; ".join(problems) or None
    except Exception as exc:  # noqa: BLE001 -- reported per configuration
        error = f"{type(exc).__name__}: {exc}"
        seen["traceback"] = traceback.format_exc(limit=6)[-3000:]
    return {"id": entry["id"], "ok": error is None, "error": error, "observed": seen}


def load_each_tokenizer_once() -> None:
    """Every configuration of a model reads the same Hugging Face tokenizer files, twice (the data
    module's and the model's tokenizer): the stand-in of a 128,256-entry vocabulary takes 0.3 s to load,
    most of this checker's time. ``AutoTokenizer.from_pretrained`` is made to load each (repository,
    arguments) once and hand out that tokenizer again; NeMo's own tokenizer wrapper is still built for
    every configuration. A tokenizer something has grown (special tokens added) is loaded afresh."""
    from transformers import AutoTokenizer

    load = AutoTokenizer.from_pretrained
    loaded: dict[str, tuple[object, int]] = {}

    def from_pretrained(*args, **kwargs):
        key = repr((args, sorted(kwargs.items())))
        if key not in loaded or len(loaded[key][0]) != loaded[key][1]:
            tokenizer = load(*args, **kwargs)
            loaded[key] = (tokenizer, len(tokenizer))
        return loaded[key][0]

    AutoTokenizer.from_pretrained = from_pretrained
    count_each_vocabulary_once()


def count_each_vocabulary_once() -> None:
    """``len(tokenizer)`` (the vocabulary with its added tokens) asks the Rust tokenizer to count a
    128,256-entry vocabulary, 22 ms a time, and NeMo asks about 8 times a configuration: a third of
    this checker's time. The count is kept on the tokenizer, with the backend it counted and the number
    of added tokens then: the base vocabulary of a loaded tokenizer never changes, and a token added
    (or another backend, a deep copy's) counts afresh."""
    from transformers import PreTrainedTokenizerFast

    count = PreTrainedTokenizerFast.__len__

    def __len__(self) -> int:
        backend = self._tokenizer
        added = len(backend.get_added_tokens_decoder())
        kept = self.__dict__.get("_llmb_vocabulary_count")
        if kept is None or kept[0] is not backend or kept[1] != added:
            kept = (backend, added, count(self))
            self.__dict__["_llmb_vocabulary_count"] = kept
        return kept[2]

    PreTrainedTokenizerFast.__len__ = __len__


def main(configs_path: str, results_path: str) -> int:
    with open(configs_path, encoding="utf-8") as handle:
        entries = json.load(handle)
    found = versions()
    load_each_tokenizer_once()
    results = []
    start = time.time()
    for entry in entries:
        results.append(check(entry))
        if not results[-1]["ok"]:
            print(f"FAIL {entry['id']}: {results[-1]['error']}", file=sys.stderr, flush=True)
    with open(results_path, "w", encoding="utf-8") as handle:
        json.dump(
            {"framework": "nemo2", "versions": found, "results": results},
            handle,
            indent=1,
            default=repr,
        )
    passed = sum(r["ok"] for r in results)
    print(
        f"nemo2 {found['nemo-toolkit']}: {passed}/{len(results)} configurations validated "
        f"({time.time() - start:.0f} s)"
    )
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    sys.exit(main(sys.argv[1], sys.argv[2]))
