"""The production frameworks' configuration (``llmb.engines.frameworks``) against the seeds.

Every seed row of every workload and variant, resolved at its smallest tested
scale, becomes a framework configuration; each is checked against the seed
row as the seed prints it (corrections only where an erratum or adjustment
says so), the recipe and precision names of field-facts §3 and the seeds'
launchers, the benchmark's fixed settings and the production environment.
Golden files under tests/golden/frameworks/ pin the whole configuration;
``LLMB_UPDATE_GOLDEN=1`` rewrites them. test_framework_contracts.py
hands these configurations to the real Megatron-Bridge and NeMo 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import pytest
from llmb.engines.frameworks import build_config, nemo2
from llmb.engines.frameworks.overrides import OverrideError, apply, class_name
from llmb.errors import UsageError
from llmb.recipes.records import RecipeRequest
from llmb.recipes.workload_file import COLUMN_NAMES, workload_from_dict
from llmb.runs.runspec import RunOptions, RunSpec, checkpoint_dirs
from seed_tables import read_tables

sys.path.insert(0, str(Path(__file__).parent / "frameworks"))
from contract_configs import resolve_smallest  # noqa: E402
from contract_configs import seed_rows as every_row  # noqa: E402
from workload_dicts import minimal_workload

# The seeds' workloads: the four plugins of this repository. An installed example plugin
# (examples/llmb-plugin-qwen3) has no seed here; its own tests and the contract tests check its rows.
SEEDED = ("llama31", "llama4", "nemotron4", "nemotronh")


def seed_rows(host, framework=None):
    return [row for row in every_row(host, framework) if row[0].name in SEEDED]


GOLDEN = Path(__file__).parent / "golden" / "frameworks"
INSTALL = "/llmb-install"  # LLMB_INSTALL while building golden configurations
INNER = "/exp/inner"

# Recipe names: field-facts §3 (Megatron-Bridge); the seeds' experiment names and
# launchers for NeMo 2 (pretrain_llama4_e128_..., pretrain_nemotron4_340b_..., ...).
RECIPES = {
    ("llama31", "megatron-bridge"): {
        "8b": "llama3_8b",
        "70b": "llama3_70b",
        "405b": "llama31_405b",
    },
    ("llama31", "nemo2"): {
        "8b": "llama3_8b",
        "70b": "llama3_70b",
        "405b": "llama31_405b",
        "405b-proxy": "llama31_405b",
    },
    ("llama4", "nemo2"): {"400b": "llama4_e128"},
    ("nemotron4", "nemo2"): {"340b": "nemotron4_340b"},
    ("nemotronh", "nemo2"): {"56b": "nemotronh_56b"},
}
BLACKWELL = ("b200", "b300", "gb200", "gb300")


def expected_preset(framework: str, gpu: str, size: str, dtype: str, gpus: int) -> str:
    """field-facts §3 for Megatron-Bridge; NeMo 2: delayed scaling (the Nemotron-4 seed's words)."""
    if framework == "nemo2":
        return {"bf16": "bf16_mixed", "fp8": "bf16_with_fp8_mixed"}[dtype]
    if dtype == "fp8" and size == "70b" and gpu in ("b200", "b300") and gpus >= 128:
        return "bf16_with_mxfp8_mixed"
    return {
        "bf16": "bf16_mixed",
        "fp8": "bf16_with_fp8_current_scaling_mixed",
        "nvfp4": "bf16_with_nvfp4_mixed",
    }[dtype]


def config_of(host, workload, recipe, options=None, save=None, load=None):
    return build_config(
        workload,
        recipe,
        options or RunOptions(),
        experiment="pretrain_test",
        inner_dir=INNER,
        checkpoint_save_dir=save,
        checkpoint_load_dir=load,
    )


def label(series, dtype) -> str:
    return (
        f"{series.gpu} {series.size} {dtype} {series.scaling} at {series.min_gpus} GPUs "
        f"({series.provenance.describe()})"
    )


@pytest.fixture
def fixed_install(monkeypatch):
    monkeypatch.setenv("LLMB_INSTALL", INSTALL)


# ------------------------------------------------------------------ every seed row


def _printed_row(seeds: Path, series):
    """The seed row as printed (column -> cell), read from the seed itself."""
    table = read_tables((seeds / series.provenance.seed).read_text())[series.provenance.table]
    cells = table.rows[series.provenance.rows[0]]
    return {
        COLUMN_NAMES.get(h.strip().lower(), h.strip().lower()): c.strip()
        for h, c in zip(table.header, cells, strict=True)
    }


def _printed_int(cell: str | None) -> int | None:
    return None if cell is None or cell.upper() == "NA" else int(cell)


def test_every_seed_row_becomes_the_seeds_configuration(host, seeds, fixed_install):
    covered = set()
    for workload, variant, series, dtype in seed_rows(host):
        recipe = resolve_smallest(host, workload, variant, series, dtype)
        config = config_of(host, workload, recipe)
        where = label(series, dtype)
        assert json.loads(json.dumps(config)) == config, where

        # The layout is the seed row's, changed only in the fields an erratum or adjustment sets
        # (each field on its own: one erratum on a series does not excuse the others).
        printed = _printed_row(seeds, series)
        p = config["parallelism"]
        for key, have in (
            ("tp", p["tp"]),
            ("pp", p["pp"]),
            ("cp", p["cp"]),
            ("mbs", config["batch"]["mbs"]),
            ("seq_len", config["model"]["seq_len"]),
            ("layers", config["model"]["num_layers"]),
        ):
            assert have == int(printed[key]) or key in series.amended, (where, key)
        assert (p["tp"], p["pp"], p["cp"], p["ep"], p["etp"]) == (
            series.tp,
            series.pp,
            series.cp,
            series.ep or 1,
            series.etp,
        ), where
        vp = _printed_int(printed.get("vp"))
        assert p["vp"] == (series.vp if series.pp > 1 and series.vp and series.vp > 1 else None), (
            where
        )
        assert vp == series.vp or "vp" in series.amended, where
        assert p["fsdp"] == series.fsdp and config["model"]["cuda_graphs"] == series.cuda_graphs, (
            where
        )
        assert p["sequence_parallel"] == (series.tp > 1), where

        # Batch: GBS by the seed's rule at this scale; DP and GA derived.
        gpus = series.min_gpus
        assert config["gpus"] == gpus and config["batch"]["gbs"] == series.gbs.at(gpus), where
        assert p["dp"] == gpus // (p["tp"] * p["pp"] * p["cp"]), where
        assert config["batch"]["ga"] == Fraction(
            config["batch"]["gbs"], config["batch"]["mbs"] * p["dp"]
        ), where

        # Names: the framework's recipe and precision preset.
        assert config["framework"] == variant.framework == recipe.framework, where
        assert config["recipe"] == RECIPES[(workload.name, variant.name)][series.size], where
        assert config["precision"]["preset"] == expected_preset(
            variant.framework, series.gpu, series.size, dtype, gpus
        ), where
        assert config["container"] == variant.container_for(series.gpu), where

        # The benchmark's fixed settings (field-facts §3).
        t = config["training"]
        assert (
            t["train_iters"],
            t["eval_iters"],
            t["log_interval"],
            t["lr_warmup_iters"],
            t["lr_decay_iters"],
        ) == (50, 0, 1, 10, 50), where
        assert t["check_for_nan_in_grad"] is False and t["mock_data"] is True, where
        assert config["profiling"] is None and config["nccl_trace"] is False, where
        assert config["checkpoint"] == {
            "save_dir": None,
            "save_interval": None,
            "load_dir": None,
            "load_step": None,
        }, where

        # The production environment.
        env = config["env"]
        assert (env.get("NCCL_P2P_NET_CHUNKSIZE") == "2097152") == (p["pp"] > 1), where
        assert env["HF_HUB_OFFLINE"] == "1" and env["NVTE_FWD_LAYERNORM_SM_MARGIN"] == "16", where
        connections = env.get("CUDA_DEVICE_MAX_CONNECTIONS")
        communicates = p["tp"] > 1 or p["cp"] > 1
        if variant.framework == "megatron_bridge":
            assert connections == (
                "32" if series.gpu in BLACKWELL else "1" if communicates else "8"
            ), where
            assert (env.get("NVTE_USE_FAST_MATH") == "1") == (dtype == "nvfp4"), where
        else:
            assert connections == (
                ("32" if series.gpu in BLACKWELL else "1") if communicates else None
            ), where
        assert "HF_TOKEN" not in json.dumps(config), where
        covered |= {
            (series.provenance.seed, series.provenance.table, row, dtype)
            for row in series.provenance.rows
        }
    printed = {
        (row.provenance.seed, row.provenance.table, row.provenance.rows[0], dtype)
        for w in host.workloads().values()
        if w.name in SEEDED
        for v in w.variants
        for row in v.seed_rows
        for dtype in row.dtypes
    }
    # every row and precision of the five seeds' tables
    assert covered == printed and len(printed) > 100


def test_framework_overrides_carry_the_configuration(host, fixed_install):
    for workload, variant, series, dtype in seed_rows(host):
        config = config_of(host, workload, resolve_smallest(host, workload, variant, series, dtype))
        o, p, b, m = config["overrides"], config["parallelism"], config["batch"], config["model"]
        where = label(series, dtype)
        if variant.framework == "megatron_bridge":
            assert (
                o["model.tensor_model_parallel_size"] == p["tp"]
                and o["model.pipeline_model_parallel_size"] == p["pp"]
            )
            assert o["model.context_parallel_size"] == p["cp"], where
            assert o["model.virtual_pipeline_model_parallel_size"] == p["vp"], where
            assert (o["train.micro_batch_size"], o["train.global_batch_size"]) == (
                b["mbs"],
                b["gbs"],
            ), where
            assert (
                o["train.train_iters"],
                o["validation.eval_iters"],
                o["logger.log_interval"],
            ) == (50, 0, 1), where
            assert (o["scheduler.lr_warmup_iters"], o["scheduler.lr_decay_iters"]) == (10, 50), (
                where
            )
            assert o["ddp.check_for_nan_in_grad"] is False and o["dataset.blend"] is None, where
            assert (
                o["model.num_layers"] == m["num_layers"] and o["model.seq_length"] == m["seq_len"]
            ), where
            assert o["mixed_precision"]["args"] == [config["precision"]["preset"]], where
            assert o["ddp.use_megatron_fsdp"] == p["fsdp"], where
            assert o["model.cuda_graph_impl"] == (
                "transformer_engine" if m["cuda_graphs"] else "none"
            ), where
            assert o.get("model.cpu_offloading_num_layers", 0) == series.offload_layers, where
            assert o.get("model.recompute_num_layers", 0) == series.recompute_layers, where
            assert (
                config["recipe_function"]
                == f"megatron.bridge.recipes.llama:{config['recipe']}_pretrain_config"
            )
        else:
            s = "trainer.strategy."
            assert (
                o[s + "tensor_model_parallel_size"],
                o[s + "pipeline_model_parallel_size"],
                o[s + "context_parallel_size"],
                o[s + "virtual_pipeline_model_parallel_size"],
            ) == (p["tp"], p["pp"], p["cp"], p["vp"]), where
            assert (o[s + "expert_model_parallel_size"], o[s + "expert_tensor_parallel_size"]) == (
                p["ep"],
                p["etp"],
            )
            assert (o["trainer.num_nodes"], o["trainer.devices"]) == (
                config["nodes"],
                config["gpus_per_node"],
            )
            assert (
                o["trainer.max_steps"],
                o["trainer.limit_val_batches"],
                o["trainer.log_every_n_steps"],
            ) == (50, 0, 1)
            data = o["data"]
            assert data["args"] == [{"ref": nemo2.MOCK_DATA}], where
            assert (data["kwargs"]["micro_batch_size"], data["kwargs"]["global_batch_size"]) == (
                b["mbs"],
                b["gbs"],
            )
            assert data["kwargs"]["num_train_samples"] == 50 * b["gbs"], where
            assert (
                o["optim.lr_scheduler.warmup_steps"] == 10
                and o["optim.lr_scheduler.max_steps"] == 50
            ), where
            assert o["trainer.plugins"] == {
                "factory": f"{nemo2.PRECISION}:{config['precision']['preset']}"
            }, where
            assert o["model.config.enable_cuda_graph"] == m["cuda_graphs"], where
            assert o["log.ckpt"] is None and o["trainer.enable_checkpointing"] is False, where
            assert (
                config["recipe_function"]
                == f"nemo.collections.llm.recipes.{config['recipe']}:pretrain_recipe"
            )
            assert config["recipe_arguments"]["performance_mode"] is True, where


def test_golden_configurations(host, fixed_install):
    """The whole configuration of every seed row, pinned. After a deliberate change,
    regenerate with LLMB_UPDATE_GOLDEN=1 and review the diff."""
    found: dict[str, dict] = {}
    for workload, variant, series, dtype in seed_rows(host):
        config = config_of(host, workload, resolve_smallest(host, workload, variant, series, dtype))
        found.setdefault(f"{workload.name}-{variant.name}", {})[label(series, dtype)] = config
    if os.environ.get("LLMB_UPDATE_GOLDEN"):
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for name, configs in found.items():  # key order kept: overrides apply in order
            (GOLDEN / f"{name}.json").write_text(json.dumps(configs, indent=1) + "\n")
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == sorted(found), (
        "run with LLMB_UPDATE_GOLDEN=1"
    )
    for name, configs in found.items():
        golden = json.loads((GOLDEN / f"{name}.json").read_text())
        assert sorted(golden) == sorted(configs), name
        for key, config in configs.items():
            assert json.dumps(golden[key]) == json.dumps(config), (
                f"{name}: {key} (LLMB_UPDATE_GOLDEN=1 to accept)"
            )


def _references(value) -> list[str]:
    if isinstance(value, dict):
        found = [value["path"]] if "path" in value else []
        return found + [p for v in value.values() for p in _references(v)]
    return [p for v in value for p in _references(v)] if isinstance(value, list) else []


def test_overrides_set_what_they_build_on_first(host, fixed_install):
    """An override of a.b.c comes after one that replaces a.b; a {"path": p} value after p is set."""
    for workload, variant, series, dtype in seed_rows(host):
        recipe = resolve_smallest(host, workload, variant, series, dtype)
        load = "/c/iter_0000050" if recipe.framework == "megatron_bridge" else "/c/weights"
        for option in (
            RunOptions(),
            RunOptions(profile=True, checkpoint_save=True, checkpoint_load=load),
        ):
            keys = list(
                config_of(
                    host,
                    workload,
                    recipe,
                    option,
                    save="/c/iter_0000050",
                    load=option.checkpoint_load,
                )["overrides"].items()
            )
            for index, (key, value) in enumerate(keys):
                earlier = [k.rstrip("?+-") for k, _ in keys[:index]]
                later = [k.rstrip("?+-") for k, _ in keys[index + 1 :]]
                for parent in (
                    key.rstrip("?+-").rsplit(".", n)[0] for n in range(1, key.count(".") + 1)
                ):
                    assert parent not in later, (label(series, dtype), key, parent)
                for path in _references(value):
                    assert path not in later and (
                        path in earlier or path.split(".")[0] not in later
                    ), (key, path)


# ------------------------------------------------------------------ run options


def resolve(host, workload, size=None, gpu=None, dtype=None, gpus=None, **kw):
    return host.resolve(RecipeRequest(workload, size, gpu, dtype, gpus, **kw))


def test_profiling_maps_to_each_frameworks_nsys_settings(host):
    w = host.workload("llama31")
    mb = config_of(
        host, w, resolve(host, "llama31", "8b", "b200", "fp8", 16), RunOptions(profile=True)
    )
    prof = mb["profiling"]
    # "all ranks"
    assert (prof["start_step"], prof["stop_step"], prof["ranks"]) == (45, 50, list(range(16)))
    o = mb["overrides"]
    assert (
        o["profiling.use_nsys_profiler"],
        o["profiling.profile_step_start"],
        o["profiling.profile_step_end"],
    ) == (True, 45, 50)
    assert o["profiling.profile_ranks"] == list(range(16))
    assert (
        prof["nsys"][:2] == ["nsys", "profile"]
        and "--capture-range=cudaProfilerApi" in prof["nsys"]
    )
    assert (
        prof["nsys"][-1]
        == f"--output={INNER}/nsys_profile/profile_%q{{SLURM_JOB_ID}}_%q{{SLURM_NODEID}}_"
        "%q{SLURM_LOCALID}"
    )
    assert prof["gpu_metrics_args"] == []

    # The Llama 3.1 NeMo 2 seed profiles steps 20-25 of a 25-step run on ranks 0-7.
    nemo = config_of(
        host,
        w,
        resolve(host, "llama31", "8b", "h100", "bf16", 16, variant="nemo2"),
        RunOptions(profile=True, gpu_metrics=True),
    )
    prof = nemo["profiling"]
    assert (prof["start_step"], prof["stop_step"], prof["ranks"]) == (20, 25, list(range(8)))
    assert nemo["training"]["train_iters"] == 25 and nemo["overrides"]["trainer.max_steps"] == 25
    assert (
        prof["gpu_metrics_args"] == ["--gpu-metrics-devices=all"]
        and prof["gpu_metrics_local_rank"] == 0
    )
    nsys = [
        c for c in nemo["overrides"]["trainer.callbacks+"] if c["args"] == [{"ref": nemo2.NSYS}]
    ]
    assert nsys[0]["kwargs"] == {
        "start_step": 20,
        "end_step": 25,
        "ranks": list(range(8)),
        "gen_shape": False,
    }

    # Nemotron-H: steps 46-50; a window asked for explicitly wins over the seed's.
    h = host.workload("nemotronh")
    assert (
        config_of(host, h, resolve(host, "nemotronh", gpus=32), RunOptions(profile=True))[
            "profiling"
        ]["start_step"]
        == 46
    )
    asked = config_of(
        host,
        h,
        resolve(host, "nemotronh", gpus=32),
        RunOptions(profile=True, profile_window=(30, 40)),
    )
    assert (asked["profiling"]["start_step"], asked["training"]["train_iters"]) == (30, 40)


def test_nccl_trace_and_its_exclusion_with_profiling(host):
    w = host.workload("nemotron4")
    r = resolve(host, "nemotron4", gpu="h100", gpus=256)
    traced = config_of(host, w, r, RunOptions(nccl_trace=True))
    assert (traced["env"]["NCCL_DEBUG"], traced["env"]["NCCL_DEBUG_SUBSYS"]) == ("INFO", "COLL")
    assert traced["training"]["train_iters"] == 5 and traced["nccl_trace"] is True
    with pytest.raises(UsageError, match="cannot be combined"):
        config_of(host, w, r, RunOptions(nccl_trace=True, profile=True))


def test_checkpoints_map_to_each_frameworks_settings(host, tmp_path):
    w = host.workload("llama31")
    r = resolve(host, "llama31", "8b", "h100", "bf16", 8)
    save, _ = checkpoint_dirs(RunOptions(checkpoint_save=True), "megatron_bridge", INNER, 50, r.gbs)
    mb = config_of(host, w, r, RunOptions(checkpoint_save=True), save=save)
    base = f"{INNER}/code/nemo_experiments/default/checkpoints"  # the seed's layout
    assert mb["checkpoint"] == {
        "save_dir": base,
        "save_interval": 50,
        "load_dir": None,
        "load_step": None,
    }
    assert (mb["overrides"]["checkpoint.save"], mb["overrides"]["checkpoint.save_interval"]) == (
        base,
        50,
    )
    # Never the recipe's own (working-directory relative) load directory: no silent resume.
    assert "checkpoint.load" in mb["overrides"] and mb["overrides"]["checkpoint.load"] is None
    loaded = config_of(
        host, w, r, RunOptions(checkpoint_load=f"{base}/iter_0000050"), load=f"{base}/iter_0000050"
    )
    # the seed's LOAD_CHECKPOINT_PATH
    assert loaded["overrides"]["checkpoint.load"] == f"{base}/iter_0000050"
    assert loaded["training"]["train_iters"] == 1 and loaded["overrides"]["checkpoint.save"] is None
    # Megatron resumes at the saved step (50): the loop runs one step beyond it.
    assert loaded["checkpoint"]["load_step"] == 50
    assert (
        loaded["overrides"]["train.train_iters"] == 51
        and loaded["overrides"]["scheduler.lr_decay_iters"] == 51
    )
    with pytest.raises(UsageError, match="loads the iter_NNNNNNN directory"):
        config_of(host, w, r, RunOptions(checkpoint_load=base), load=base)

    r = resolve(host, "llama31", "8b", "h100", "bf16", 8, variant="nemo2")
    save, _ = checkpoint_dirs(
        RunOptions(checkpoint_save=True, checkpoint_dir=str(tmp_path)), "nemo2", INNER, 50, r.gbs
    )
    nemo = config_of(
        host, w, r, RunOptions(checkpoint_save=True, checkpoint_dir=str(tmp_path)), save=save
    )
    assert nemo["checkpoint"]["save_dir"] == str(tmp_path)  # CHECKPOINT_DIR
    o = nemo["overrides"]
    assert o["trainer.enable_checkpointing"] is True and o["log.ckpt"]["args"] == [
        {"ref": nemo2.CHECKPOINT}
    ]
    assert (o["log.ckpt"]["kwargs"]["dirpath"], o["log.ckpt"]["kwargs"]["every_n_train_steps"]) == (
        str(tmp_path),
        50,
    )
    assert o["log.log_dir"] == f"{INNER}/code/nemo_experiments" and o["log.name"] == "default"
    weights = f"{tmp_path}/default--None=0.0000-epoch=0-consumed_samples=6400.0/weights"
    loaded = config_of(host, w, r, RunOptions(checkpoint_load=weights), load=weights)
    restore = loaded["overrides"]["resume"]["kwargs"]["restore_config"]
    # the parent of weights/, as the seeds say
    assert restore["kwargs"]["path"] == os.path.dirname(weights)
    assert loaded["training"]["train_iters"] == 1


def test_tp_comm_overlap_and_other_seed_variables(host):
    w = host.workload("nemotron4")
    r = resolve(host, "nemotron4", gpu="gb200", gpus=128)
    default = config_of(host, w, r)
    assert default["tp_comm_overlap"] is None and not any(
        "MegatronCommOverlap" in k for k in default["overrides"]
    )
    off = config_of(host, w, r.with_env(TP_COMM_OVERLAP="False"))  # a site plugin's recipe.with_env
    assert off["tp_comm_overlap"] is False
    assert (
        off["overrides"]["trainer.callbacks[MegatronCommOverlapCallback].tp_comm_overlap"] is False
    )
    assert off["settings"] == [
        {"variable": "TP_COMM_OVERLAP", "value": "False", "sets": "tp_comm_overlap", "to": False}
    ]
    assert off["env"]["TP_COMM_OVERLAP"] == "False"
    with pytest.raises(UsageError, match=r"TP_COMM_OVERLAP='maybe' is not a boolean; valid: true"):
        config_of(host, w, r, RunOptions(env=(("TP_COMM_OVERLAP", "maybe"),)))

    llama = host.workload("llama31")
    tp4 = config_of(host, llama, resolve(host, "llama31", "70b", "h100", "bf16", 64))
    assert (
        tp4["tp_comm_overlap"] is True and tp4["overrides"]["comm_overlap.tp_comm_overlap"] is True
    )
    assert tp4["overrides"]["comm_overlap?"]["kwargs"] == {"tp_comm_overlap": True}
    nvfp4 = config_of(host, llama, resolve(host, "llama31", "70b", "gb200", "nvfp4", 64))
    assert nvfp4["parallelism"]["tp"] == 2 and nvfp4["tp_comm_overlap"] is False
    user = config_of(
        host,
        llama,
        resolve(host, "llama31", "70b", "h100", "bf16", 64),
        RunOptions(env=(("TP_COMM_OVERLAP", "0"),)),
    )
    assert (
        user["overrides"]["comm_overlap.tp_comm_overlap"] is False
        and "comm_overlap?" not in user["overrides"]
    )

    noted = config_of(
        host,
        llama,
        resolve(host, "llama31", "8b", "b200", "fp8", 8),
        RunOptions(
            env=(("ENABLE_PROFILE", "true"), ("HF_TOKEN", "hf_secret"), ("NCCL_IB_HCA", "mlx5"))
        ),
    )
    assert noted["profiling"] is None and any(
        "ENABLE_PROFILE" in n and "--profile" in n for n in noted["notes"]
    )
    assert "hf_secret" not in json.dumps(noted) and "HF_TOKEN" not in noted["env"]
    assert noted["env"]["NCCL_IB_HCA"] == "mlx5"  # the user's variables reach every rank


def test_production_rules_of_the_data(host):
    llama = host.workload("llama31")
    r = resolve(host, "llama31", "405b", "gb200", "fp8", 128)
    env = config_of(host, llama, r)["env"]
    assert (env["PYTORCH_CUDA_ALLOC_CONF"], env["NCCL_GRAPH_REGISTER"]) == (
        "expandable_segments:True",
        "0",
    )
    assert (
        "PYTORCH_CUDA_ALLOC_CONF"
        not in config_of(host, llama, resolve(host, "llama31", "405b", "b200", "fp8", 128))["env"]
    )
    mx = config_of(host, llama, resolve(host, "llama31", "70b", "b200", "fp8", 128))["precision"]
    cs = config_of(host, llama, resolve(host, "llama31", "70b", "b200", "fp8", 64))["precision"]
    assert (mx["name"], cs["name"]) == ("fp8_mx", "fp8_cs") and "128 GPUs" in mx["source"]
    assert (
        "mixed_precision.first_last_layers_bf16"
        not in config_of(host, llama, resolve(host, "llama31", "70b", "b200", "fp8", 128))[
            "overrides"
        ]
    )


def test_proxies_on_the_production_frameworks(host):
    h = host.workload("nemotronh")
    r = resolve(host, "nemotronh", gpus=32)
    cut = config_of(host, h, r, RunOptions(layers=4))
    pattern = h.architecture("56b").layer_pattern
    assert cut["model"]["num_layers"] == 4 and cut["model"]["layer_pattern"] == pattern[:4]
    assert cut["overrides"]["model.config.hybrid_override_pattern"] == pattern[:4]
    assert "model.config.hybrid_override_pattern" not in config_of(host, h, r)["overrides"]
    with pytest.raises(UsageError, match="use --layers N"):
        config_of(host, h, r, RunOptions(proxy="tiny"))
    with pytest.raises(UsageError, match="has 118 layers; use 1 to 118"):
        config_of(host, h, r, RunOptions(layers=200))
    llama = host.workload("llama31")
    layers = [
        config_of(
            host, llama, resolve(host, "llama31", "405b-proxy", "h100", "fp8", g, variant="nemo2")
        )
        for g in (32, 64, 128)
    ]
    assert [c["model"]["num_layers"] for c in layers] == [8, 30, 62]
    assert {c["recipe"] for c in layers} == {"llama31_405b"}


def test_a_variant_without_production_settings_is_refused(host):
    raw = minimal_workload("mini")
    workload = workload_from_dict(raw)
    recipe = host.resolve(RecipeRequest("llama31", "8b", "h100", "bf16", 8))
    from dataclasses import replace

    recipe = replace(recipe, workload="mini", variant="v", framework="nemo2", size="1b")
    with pytest.raises(
        UsageError,
        match=r"mini's v recipes name no production framework settings .*--backend local",
    ):
        build_config(
            workload,
            recipe,
            RunOptions(),
            experiment="e",
            inner_dir=INNER,
            checkpoint_save_dir=None,
            checkpoint_load_dir=None,
        )


# ------------------------------------------------------------------ the seeds' variables

NOT_VARIABLES = {"TFLOPS_GPU"}  # a term of the MFU formula ("avg(TFLOPS_GPU)"), not a variable


def test_every_seed_variable_has_a_place(seeds):
    import re

    from llmb.engines.frameworks.settings import FRAMEWORK_SETTINGS, RECIPE_VARIABLES

    named = set()
    for path in seeds.glob("*.md"):
        text = path.read_text()
        # Upper-case words with an underscore; a lower-case letter may precede one where the
        # Nemotron-4 seed lost its formatting ("llmb-qaAPP_SECRET- ...").
        named |= set(re.findall(r"(?:\b|(?<=[a-z]))[A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9]\b", text))
        named |= set(re.findall(r"\bDTYPE\b", text))
    assert named - NOT_VARIABLES == set(RECIPE_VARIABLES), "every seed variable, and only those"
    assert set(FRAMEWORK_SETTINGS) <= {
        k for k, (kind, _) in RECIPE_VARIABLES.items() if kind == "framework"
    }
    doc = (Path(__file__).parents[1] / "docs" / "production-frameworks.md").read_text()
    assert [v for v in RECIPE_VARIABLES if f"`{v}`" not in doc] == []


# ------------------------------------------------------------------ the data: production sections


def _with_production(production: dict) -> dict:
    raw = minimal_workload("mini")
    raw["variants"][0]["production"] = production
    return raw


def test_production_sections_load_and_are_checked():
    loaded = (
        workload_from_dict(
            _with_production(
                {
                    "recipes": {"1b": "mini_1b"},
                    "profile_window": [20, 25],
                    "profile_ranks": [0, 8],
                    "rules": [
                        {
                            "match": {"gpu": ["h100", "h200"], "dtype": "bf16"},
                            "min_gpus": 16,
                            "env": {"X": 1},
                            "why": "test",
                        }
                    ],
                    "huggingface": {
                        "gated": True,
                        "assets": ["tokenizer"],
                        "repos": {"1b": "org/mini-1b"},
                    },
                }
            )
        )
        .variants[0]
        .production
    )
    assert (
        loaded.recipes == {"1b": "mini_1b"}
        and loaded.profile_window == (20, 25)
        and loaded.profile_ranks == (0, 8)
    )
    rule = loaded.rules[0]
    assert rule.env == {"X": "1"} and rule.applies("1b", "h100", "bf16", "weak", 16)
    assert not rule.applies("1b", "h100", "bf16", "weak", 8) and not rule.applies(
        "1b", "b200", "bf16", "weak", 16
    )
    assert loaded.huggingface.repos == {"1b": "org/mini-1b"} and loaded.huggingface.gated
    assert workload_from_dict(minimal_workload("mini")).variants[0].production is None

    for production, message in (
        ({}, "production recipes must map each size"),
        (
            {"recipes": {"2b": "x"}},
            r"names sizes \['2b'\] this variant does not have; its sizes: 1b",
        ),
        (
            {"recipes": {"1b": "x"}, "recipe": 1},
            r"unknown production keys \['recipe'\]; valid: recipes",
        ),
        ({"recipes": {"1b": "x"}, "profile_ranks": [8, 0]}, "must have 0 <= first < last"),
        (
            {
                "recipes": {"1b": "x"},
                "rules": [{"match": {"gpu": "b200"}, "env": {"X": "1"}, "why": "w"}],
            },
            "matches no recipe of the variant",
        ),
        (
            {"recipes": {"1b": "x"}, "rules": [{"match": {"gpu": "tpu"}, "env": {}, "why": "w"}]},
            r"rule match gpu \['tpu'\] is unknown",
        ),
        ({"recipes": {"1b": "x"}, "rules": [{"env": {"X": "1"}}]}, "a rule needs 'why'"),
        (
            {
                "recipes": {"1b": "x"},
                "huggingface": {"assets": ["weights"], "repos": {"1b": "o/n"}},
            },
            "give one or more of config, tokenizer",
        ),
        (
            {
                "recipes": {"1b": "x"},
                "huggingface": {"assets": ["config"], "repos": {"1b": "noslash"}},
            },
            "not 'owner/name' repository ids",
        ),
    ):
        with pytest.raises(ValueError, match=f"variant v: production: .*{message}"):
            workload_from_dict(_with_production(production))


# ------------------------------------------------------------------ applying overrides (no framework needed)


class Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class ModelCheckpoint(Obj):
    pass


class MegatronCommOverlapCallback(Obj):
    pass


def test_overrides_apply_to_an_object_tree():
    root = Obj(
        train=Obj(train_iters=1),
        comm=None,
        opt=None,
        trainer=Obj(
            callbacks=[ModelCheckpoint(), MegatronCommOverlapCallback(tp_comm_overlap=True)]
        ),
        model=Obj(config=Obj(hidden=8)),
    )
    apply(
        root,
        {
            "train.train_iters": 50,
            "comm?": {"factory": "fractions:Fraction", "args": [1, 2]},
            "trainer.callbacks[ModelCheckpoint]-": None,
            "trainer.callbacks[MegatronCommOverlapCallback].tp_comm_overlap": False,
            "trainer.callbacks+": [
                {
                    "factory": "collections:OrderedDict",
                    "kwargs": {"model": {"path": "model.config"}},
                }
            ],
            "opt.lr": None,  # nothing to turn off under a None: a no-op
            "trainer.callbacks[Absent].flag": False,
        },
    )
    assert root.train.train_iters == 50 and root.comm == Fraction(1, 2)
    assert [class_name(c) for c in root.trainer.callbacks] == [
        "MegatronCommOverlapCallback",
        "OrderedDict",
    ]
    assert root.trainer.callbacks[0].tp_comm_overlap is False
    assert root.trainer.callbacks[1]["model"] is root.model.config
    apply(root, {"comm?": {"ref": "fractions:Fraction"}})
    assert root.comm == Fraction(1, 2)  # "?" sets only what is None
    for bad, message in (
        ({"train.nosuch": 1}, "the recipe has no 'train.nosuch'"),
        ({"nosuch.x": 1}, "the recipe has no 'nosuch'"),
        ({"opt.lr": 0.1}, "opt is None in this recipe"),
        ({"trainer.callbacks[Absent].flag": True}, "has no Absent entry"),
    ):
        with pytest.raises(OverrideError, match=message):
            apply(root, bad)


# ------------------------------------------------------------------ without the framework


TRIPWIRES = ("torch", "megatron", "nemo", "nemo_run", "transformer_engine", "lightning", "fiddle")


def _tripwires(root: Path, names=TRIPWIRES, exit_code: int | None = 97) -> Path:
    for name in names:
        package = root / name
        package.mkdir(parents=True, exist_ok=True)
        action = (
            f"os._exit({exit_code})"
            if exit_code
            else f"raise ImportError('{name} is a test tripwire')"
        )
        (package / "__init__.py").write_text(
            textwrap.dedent(f"""
            import os, sys
            sys.stderr.write("TRIPWIRE: {name} was imported\\n")
            {action}
        """)
        )
    return root


def test_building_a_configuration_imports_no_framework(tmp_path):
    script = textwrap.dedent("""
        import json
        from llmb.plugins.host import PluginHost
        from llmb.recipes.records import RecipeRequest
        from llmb.runs.runspec import RunOptions
        from llmb.engines.frameworks import build_config
        host = PluginHost()
        for args, variant in ((("llama31", "8b", "b200", "nvfp4", 8), None), (("llama4", "400b", "h100", "fp8", 512), None)):
            recipe = host.resolve(RecipeRequest(*args, variant=variant))
            config = build_config(host.workload(args[0]), recipe, RunOptions(profile=True), experiment="e",
                                  inner_dir="/x", checkpoint_save_dir=None, checkpoint_load_dir=None)
            json.dumps(config)
        print("ok")
    """)
    env = dict(os.environ, PYTHONPATH=str(_tripwires(tmp_path / "wires")))
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    assert "TRIPWIRE" not in proc.stderr


def _worker_run(
    host, tmp_path, workload: str, args: tuple, options: RunOptions | None = None
) -> Path:
    """run.json for the worker, as a backend writes it for a production-engine run."""
    options = options or RunOptions()
    w = host.workload(workload)
    recipe = host.resolve(RecipeRequest(workload, *args))
    config = build_config(
        w,
        recipe,
        options,
        experiment="e",
        inner_dir=str(tmp_path / "inner"),
        checkpoint_save_dir=None,
        checkpoint_load_dir=None,
    )
    spec = RunSpec(
        job_id="t-1",
        workload=workload,
        variant=recipe.variant,
        framework=recipe.framework,
        engine=recipe.framework,
        size=recipe.size,
        arch=dict(w.architecture(recipe.size).__dict__),
        proxy=None,
        gpu=recipe.gpu,
        dtype=recipe.dtype,
        compute_dtype="bfloat16",
        device="cuda",
        ranks=recipe.gpus,
        mbs=recipe.mbs,
        ga=recipe.ga,
        gbs=recipe.gbs,
        seq_len=recipe.seq_len,
        steps=50,
        seed=1234,
        compile=False,
        flops_per_sample=1.0,
        experiment="e",
        run_dir=str(tmp_path),
        inner_dir=str(tmp_path / "inner"),
        log=str(tmp_path / "log.out"),
        framework_config=config,
    )
    tmp_path.mkdir(parents=True, exist_ok=True)
    run_json = tmp_path / "run.json"
    run_json.write_text(json.dumps(spec.to_dict()))
    return run_json


def _worker(run_json: Path, env: dict, rank: int = 0) -> subprocess.CompletedProcess:
    env = dict(os.environ, **env, RANK=str(rank), WORLD_SIZE="1", LOCAL_RANK=str(rank % 8))
    return subprocess.run(
        [sys.executable, "-m", "llmb.worker", str(run_json)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("workload", "args", "package", "title", "image"),
    [
        (
            "llama31",
            ("8b", "b200", "nvfp4", 8),
            "megatron.bridge",
            "Megatron-Bridge",
            "nvcr.io#nvidia/nemo:25.11.01",
        ),
        (
            "nemotronh",
            ("56b", "h100", "fp8", 32),
            "nemo.collections.llm",
            "NeMo 2",
            "nvcr.io#nvidia/nemo:25.04.01",
        ),
    ],
)
def test_training_without_the_framework_says_where_it_runs(
    host, tmp_path, workload, args, package, title, image
):
    """The worker, as a backend starts it, with the framework's package shadowed by one that fails to import."""
    run_json = _worker_run(host, tmp_path, workload, args)
    wires = _tripwires(tmp_path / "wires", names=(package.split(".")[0], "torch"), exit_code=None)
    proc = _worker(run_json, {"PYTHONPATH": str(wires)})
    assert proc.returncode == 1
    message = " ".join(line.removeprefix("[rank0]: ") for line in proc.stderr.splitlines())
    assert f"{title} (Python package {package}) cannot be imported here" in message
    assert f"NVIDIA's NeMo container, {image}" in message and "--backend slurm" in message
    # the framework check comes before anything imports torch
    assert "TRIPWIRE: torch" not in proc.stderr


FAKE_NSYS = """#!{python}
import json, os, sys
with open(os.environ["FAKE_NSYS_LOG"], "w") as log:
    json.dump({{"argv": sys.argv[1:], "wrapped": os.environ.get("LLMB_NSYS_WRAPPED"),
               "chunk": os.environ.get("NCCL_P2P_NET_CHUNKSIZE")}}, log)
"""


def test_profiled_ranks_run_their_worker_under_nsys(host, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nsys").write_text(FAKE_NSYS.format(python=sys.executable))
    (bin_dir / "nsys").chmod(0o755)
    run_json = _worker_run(
        host,
        tmp_path,
        "llama31",
        ("70b", "h100", "bf16", 64),
        RunOptions(profile=True, gpu_metrics=True),
    )
    config = json.loads(run_json.read_text())["framework_config"]
    wires = _tripwires(tmp_path / "wires", names=("megatron", "torch"), exit_code=None)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_NSYS_LOG": str(tmp_path / "nsys.json"),
        "PYTHONPATH": str(wires),
    }
    proc = _worker(run_json, env, rank=0)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads((tmp_path / "nsys.json").read_text())
    assert seen["argv"] == [
        *config["profiling"]["nsys"][1:],
        "--gpu-metrics-devices=all",
        sys.executable,
        "-m",
        "llmb.worker",
        str(run_json),
    ]
    # the production environment is already set
    assert seen["wrapped"] == "1" and seen["chunk"] == "2097152"
    assert (tmp_path / "inner" / "nsys_profile").is_dir()
    (tmp_path / "nsys.json").unlink()
    # profiled, but not the node's GPU-metrics sampler
    not_local_zero = _worker(run_json, env, rank=9)
    assert json.loads((tmp_path / "nsys.json").read_text())["argv"][-4] == sys.executable
    assert not_local_zero.returncode == 0
    (tmp_path / "nsys.json").unlink()
    nemo_json = _worker_run(
        host, tmp_path / "nemo", "nemotronh", ("56b", "h100", "fp8", 32), RunOptions(profile=True)
    )
    unprofiled = _worker(
        nemo_json, {**env, "PYTHONPATH": str(_tripwires(tmp_path / "w2", ("nemo",), None))}, rank=9
    )
    # ranks 0-7 only
    assert unprofiled.returncode == 1 and "cannot be imported here" in unprofiled.stderr
    assert not (tmp_path / "nsys.json").exists()


# The contracts with the real frameworks: test_framework_contracts.py.


def test_a_run_records_the_framework_versions_it_ran_with(tmp_path, capsys):
    from llmb.engines.frameworks.runtime import VERSIONS_FILE, record_versions

    config = {"framework": "megatron_bridge", "inner_dir": str(tmp_path / "inner")}
    found = record_versions(config, 0, ("pluggy", "click", "no-such-distribution"))
    from importlib.metadata import version

    assert found == {
        "pluggy": version("pluggy"),
        "click": version("click"),
        "no-such-distribution": None,
    }
    assert json.loads((tmp_path / "inner" / VERSIONS_FILE).read_text()) == found
    assert f"megatron_bridge runs with pluggy {version('pluggy')}" in capsys.readouterr().out
    record_versions(dict(config, inner_dir=str(tmp_path / "other")), 3, ("pluggy",))
    assert not (tmp_path / "other").exists()  # only rank 0 writes the file
