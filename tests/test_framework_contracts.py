"""Contracts with the real production frameworks, on this CPU machine.

Every seed row of every variant, in each run mode of
``frameworks/contract_configs.MODES``, becomes llmb's framework configuration
here (Python 3.10+); a Python 3.12 environment with the real framework
(``frameworks/envs.py``: Megatron-Bridge 0.4.2 and 0.6.2, NeMo 2.3) builds
the framework's own object from it exactly as the worker does and validates
it: ``ConfigContainer.validate()`` for Megatron-Bridge; for NeMo 2 the
recipe, with its trainer plugins, callbacks, data, logger, checkpointing and
resume built. The values that decide what runs are read back and compared
with what llmb asked for. Only what needs a GPU (the training loop itself)
is out of reach.

Outside CI a missing environment skips these tests, saying how to build it
(``./dev.sh frameworks``); under CI (``CI`` set) it fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "frameworks"))

import envs  # noqa: E402
from contract_configs import MODES, configurations  # noqa: E402
from hf_cache import write_model_configs  # noqa: E402
from llmb.engines.frameworks import megatron_bridge  # noqa: E402
from llmb.engines.frameworks.description import valid_layers  # noqa: E402
from llmb.errors import UsageError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHECK_TIMEOUT = 3600  # seconds for one leg's checker; a loaded 2-core machine is slow
INSTALL = "/llmb-install"  # LLMB_INSTALL while building the configurations

# What each Megatron-Bridge precision preset sets (fp8, fp8_recipe, fp4).
MB_PRESETS = {
    "bf16_mixed": (None, None),
    "bf16_with_fp8_current_scaling_mixed": ("hybrid", "tensorwise"),
    "bf16_with_mxfp8_mixed": ("e4m3", "mxfp8"),
    "bf16_with_nvfp4_mixed": (None, None),
    "bf16_with_fp8_subchannel_scaling_mixed": ("hybrid", "blockwise"),
}


def interpreter(leg: envs.Leg) -> Path:
    python = envs.built(leg)
    if python is None:
        message = (
            f"the {leg.name} environment is not built: ./dev.sh frameworks (or python tests/frameworks/envs.py "
            f"build {leg.name}) builds it"
        )
        if os.environ.get("CI"):
            pytest.fail(message + "; CI runs it before the tests")
        pytest.skip(message)
    return python


def _framework_env(hf_home: Path) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "LLMB_"))
    }
    env.update(
        PYTHONPATH=str(ROOT / "core" / "src"),
        HF_HOME=str(hf_home),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


FRAMEWORK_ARGS_ID = "framework-args"


def leg_inputs(leg: envs.Leg, host) -> tuple[list[dict], list[dict]]:
    """What the leg's tests ask of it: every configuration of its framework in every mode, then the
    --framework-arg row (``framework_args_config``), for its checker; every published row's default
    configuration (llmb's own workloads': an installed example plugin changes nothing in the
    catalogue llmb ships) for the field catalogue."""
    checked = [{"id": id_, "config": config} for id_, config in configurations(host, leg.framework)]
    listed = [
        item
        for item in checked
        if item["id"].endswith("[default]") and not item["id"].startswith("qwen3/")
    ]
    args_row = {"id": FRAMEWORK_ARGS_ID, "config": framework_args_config(host, leg)}
    return [*checked, args_row], listed


def shared_dir(tmp_path_factory) -> Path:
    """A directory this session's xdist workers share (the session's base temporary directory; one
    worker's own without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def leg_outputs(leg: envs.Leg, host, tmp_path_factory) -> dict:
    """The leg's checker results and field catalogue, from one process that imports the framework
    once (``frameworks/run_leg.py``) for the whole session: the first test to ask runs it, under a
    lock that the session's other workers wait on, and every test of the leg reads what it wrote.
    ``{"checked": RESULTS or None, "catalogue": CATALOGUE or None, "stderr": its tail}``."""
    import fcntl

    python = interpreter(leg)
    where = shared_dir(tmp_path_factory) / "framework-legs" / leg.name
    where.mkdir(parents=True, exist_ok=True)
    done = where / "outputs.json"
    with open(where / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return json.loads(done.read_text(encoding="utf-8"))
        checked, listed = leg_inputs(leg, host)
        hf_home = where / "hf_home"
        if leg.framework == "nemo2":
            import nemo2_inputs

            nemo2_inputs.write_hf_stand_ins(str(hf_home), [item["config"] for item in checked])
        else:
            write_model_configs(str(hf_home), host)
        files = {
            name: where / f"{name}.json"
            for name in ("configs", "results", "catalogue_configs", "catalogue")
        }
        files["configs"].write_text(json.dumps(checked), encoding="utf-8")
        files["catalogue_configs"].write_text(json.dumps(listed), encoding="utf-8")
        ran = subprocess.run(
            [
                str(python),
                str(Path(envs.HERE) / "run_leg.py"),
                str(Path(envs.HERE) / leg.checker),
                *(
                    str(files[name])
                    for name in ("configs", "results", "catalogue_configs", "catalogue")
                ),
            ],
            cwd=where,
            env=_framework_env(hf_home),
            capture_output=True,
            text=True,
            timeout=2 * CHECK_TIMEOUT,
        )

        def output(name: str) -> dict | None:
            path = files[name]
            return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None

        outputs = {
            "checked": output("results"),
            "catalogue": output("catalogue"),
            "stderr": f"(exit {ran.returncode})\n{ran.stderr[-4000:]}",
        }
        done.write_text(json.dumps(outputs), encoding="utf-8")
        return outputs


def leg_output(leg: envs.Leg, host, tmp_path_factory, part: str) -> dict:
    """One part of ``leg_outputs`` ("checked" or "catalogue"); the test fails, with the process's
    stderr, where it wrote none."""
    outputs = leg_outputs(leg, host, tmp_path_factory)
    found = outputs[part]
    writer = leg.checker if part == "checked" else "field_catalogue.py"
    assert found is not None, f"{writer} wrote no {part} results {outputs['stderr']}"
    return found


def checked_results(leg: envs.Leg, host, tmp_path_factory) -> dict:
    """The leg's checker results for every configuration (the --framework-arg row's left out)."""
    results = leg_output(leg, host, tmp_path_factory, "checked")
    return {
        **results,
        "results": [r for r in results["results"] if r["id"] != FRAMEWORK_ARGS_ID],
    }


def report(request, leg: envs.Leg, results: dict) -> None:
    """The counts for the session's summary; the environment runs the leg's version."""
    assert (results["versions"][leg.distribution] or "").startswith(leg.series + "."), results[
        "versions"
    ]
    passed = sum(r["ok"] for r in results["results"])
    versions = ", ".join(f"{k} {v}" for k, v in results["versions"].items() if v)
    # A user property travels with the test's report from an xdist worker to the session's summary.
    request.node.user_properties.append(
        (
            COUNTS,
            f"{leg.name}: {passed}/{len(results['results'])} configurations validated ({versions})",
        )
    )


COUNTS = "framework contract"  # the user property conftest's summary prints


def failures(results: dict) -> str:
    return "\n".join(f"  {r['id']}: {r['error']}" for r in results["results"] if not r["ok"])


@pytest.fixture(scope="module")
def host():
    from llmb.plugins.host import PluginHost

    return PluginHost()


@pytest.fixture
def fixed_install(monkeypatch):
    monkeypatch.setenv("LLMB_INSTALL", INSTALL)


# ------------------------------------------------------------------ Megatron-Bridge


# The Qwen3 recipe's rows (NVIDIA exemplar-performance v26.08.00): 30B FP8 and BF16 on GB300, GB200, B300
# and B200 and BF16 on H100 (9), 235B BF16 and FP8 (their layouts differ) on the four Blackwell types and
# BF16 on H100 (9).
QWEN3_ROWS = 18
# The llmb-plugin-deepseekv3 workloads' rows (NVIDIA exemplar-performance v26.08.00): DeepSeek-V3 671B, one
# per layout and precision (GB300 6, GB200 4, B300 3, B200 2, H100 2), and Kimi-K2 1T FP8 on GB300, GB200,
# B300 and B200. Both recipes are in both Megatron-Bridge legs (kimi_k2 in 0.4 only as
# megatron.bridge.recipes.kimi.kimi_k2, where llmb names it).
# The llmb-plugin-gptoss rows (the same release): GPT-OSS 120B BF16 on GB300, GB200, B300, B200 and H100
# (5), and the MLPerf GPT-OSS 20B on GB300 and GB200, NVFP4 and FP8 at 8 and 72 GPUs and FP8 at 512 (10);
# both Megatron-Bridge legs have the gpt_oss recipes.
PLUGIN_ROWS = {"deepseekv3": 17, "kimik2": 4, "gptoss": 15}


def mb_expected(config: dict) -> dict:
    """What the validated ConfigContainer must hold for ``config``."""
    p, b, m, t, ckpt = (
        config[k] for k in ("parallelism", "batch", "model", "training", "checkpoint")
    )
    fp8, fp8_recipe = MB_PRESETS[config["precision"]["preset"]]
    expected = {
        "tp": p["tp"],
        "pp": p["pp"],
        "cp": p["cp"],
        "vp": p["vp"],
        "ep": p["ep"],
        "etp": p["etp"],
        "sequence_parallel": p["sequence_parallel"],
        "dp": p["dp"],
        "mbs": b["mbs"],
        "gbs": b["gbs"],
        "train_iters": t["train_iters"] + (ckpt["load_step"] or 0),
        "seq_length": m["seq_len"],
        "dataset_seq_length": m["seq_len"],
        "num_layers": m["num_layers"],
        "log_interval": 1,
        "eval_iters": 0,
        "lr_warmup_iters": 10,
        "check_for_nan_in_grad": False,
        "fsdp": p["fsdp"],
        "cuda_graph_impl": "transformer_engine" if m["cuda_graphs"] else "none",
        "fp8": fp8,
        "fp4": "e2m1" if config["precision"]["preset"] == "bf16_with_nvfp4_mixed" else None,
        "dataset_blend": None,
        "checkpoint_save": ckpt["save_dir"],
        "checkpoint_load": ckpt["load_dir"],
        "nsys": bool(config["profiling"]),
        "seed": t["seed"],
        "cpu_offloading_num_layers": m["offload_layers"] if m["offload_layers"] else None,
    }
    # llmb sets recompute only where a row asks for it; elsewhere the recipe's own stays (Megatron-Bridge
    # 0.4's qwen3_30b_a3b recipe recomputes 1 layer, 0.6's none)
    if m["recompute_layers"]:
        expected["recompute_num_layers"] = m["recompute_layers"]
    # a production rule's launcher settings (DeepSeek-V3's recompute modules on 128 GPUs), the dense first
    # layers of a model cut to fewer layers, and the MTP modules the recipe keeps
    if "model.recompute_modules" in config["overrides"]:
        expected["recompute_modules"] = config["overrides"]["model.recompute_modules"]
    if "model.recompute_granularity" in config["overrides"]:
        expected["recompute_granularity"] = config["overrides"]["model.recompute_granularity"]
    # a production rule's model fields (the MLPerf GPT-OSS 20B's vocabulary and RoPE)
    for key in ("vocab_size", "position_embedding_type"):
        if f"model.{key}" in config["overrides"]:
            expected[key] = config["overrides"][f"model.{key}"]
    if m.get("moe_layer_pattern") is not None:
        expected["moe_layer_freq"] = m["moe_layer_pattern"]
    if m.get("mtp_layers"):
        expected["mtp_num_layers"] = m["mtp_layers"]
    if fp8:
        expected["fp8_recipe"] = fp8_recipe
        expected["first_last_layers_bf16"] = False
    if p["fsdp"]:
        expected["fsdp_sharding"] = "optim_grads_params"
        if ckpt["save_dir"] or ckpt["load_dir"]:
            expected["checkpoint_format"] = megatron_bridge.FSDP_CHECKPOINT_FORMAT
    if config["profiling"]:
        expected.update(
            profile_step_start=config["profiling"]["start_step"],
            profile_step_end=config["profiling"]["stop_step"],
        )
    if ckpt["save_dir"]:
        expected["checkpoint_save_interval"] = ckpt["save_interval"]
    if config["tp_comm_overlap"] is not None and p["tp"] > 1:
        expected["tp_comm_overlap"] = config["tp_comm_overlap"]
    return expected


def mismatches(observed: dict, expected: dict) -> list[str]:
    wrong = []
    for key, want in expected.items():
        got = observed.get(key)
        if key == "cpu_offloading_num_layers" and want is None:
            if observed.get("cpu_offloading"):
                wrong.append("cpu_offloading on, llmb asked for none")
            continue
        if key == "tp_comm_overlap" and want is False and got is None:
            continue  # a recipe without a comm_overlap section (Qwen3's) overlaps nothing
        if got != want:
            wrong.append(f"{key}: {got!r}, llmb asked for {want!r}")
    return wrong


@pytest.mark.frameworks
@pytest.mark.parametrize("leg_name", ["megatron-bridge-0.4", "megatron-bridge-0.6"])
def test_megatron_bridge_validates_every_configuration(
    request, host, fixed_install, tmp_path_factory, leg_name
):
    leg = envs.LEGS[leg_name]
    interpreter(leg)
    items = [
        {"id": id_, "config": config} for id_, config in configurations(host, "megatron_bridge")
    ]
    # every Megatron-Bridge seed row in every mode: Llama 3.1's 22, and the Qwen3 recipe's 18 where the
    # example plugin examples/llmb-plugin-qwen3 is installed (CI installs it)
    rows = 22 + (QWEN3_ROWS if "qwen3" in host.workloads() else 0)
    rows += sum(n for name, n in PLUGIN_ROWS.items() if name in host.workloads())
    assert len(items) == rows * len(MODES)
    results = checked_results(leg, host, tmp_path_factory)
    report(request, leg, results)
    assert [r["id"] for r in results["results"]] == [item["id"] for item in items]
    assert all(r["ok"] for r in results["results"]), (
        f"not validated by {leg_name}:\n{failures(results)}"
    )
    wrong = {}
    for item, result in zip(items, results["results"], strict=True):
        found = mismatches(result["observed"], mb_expected(item["config"]))
        if found:
            wrong[item["id"]] = found
    assert not wrong, "values that did not survive:\n" + "\n".join(
        f"  {k}: {'; '.join(v)}" for k, v in wrong.items()
    )


def test_405b_pipeline_layouts_refuse_layer_counts_megatron_refuses(host, fixed_install):
    from contract_configs import resolve_smallest, seed_rows

    refused = 0
    for workload, variant, series, dtype in seed_rows(host, "megatron_bridge"):
        recipe = resolve_smallest(host, workload, variant, series, dtype)
        if series.size != "405b" or recipe.pp == 1:
            continue
        valid = valid_layers(
            megatron_bridge, "llama31_405b", 126, recipe.pp, recipe.vp if recipe.pp > 1 else None
        )
        assert 126 in valid  # the full model always splits
        if 4 not in valid:
            refused += 1
            with pytest.raises(
                UsageError, match=r"--layers 4: .*embedding and the loss.*valid here: \d+"
            ):
                _build_with_layers(workload, recipe, 4)
    assert refused >= 4


def _build_with_layers(workload, recipe, layers):
    from contract_configs import INNER
    from llmb.engines.frameworks import build_config
    from llmb.runs.runspec import RunOptions

    return build_config(
        workload,
        recipe,
        RunOptions(layers=layers),
        experiment="x",
        inner_dir=INNER,
        checkpoint_save_dir=None,
        checkpoint_load_dir=None,
    )


# ------------------------------------------------------------------ NeMo 2


@pytest.mark.frameworks
def test_nemo2_builds_every_configuration(request, host, fixed_install, tmp_path_factory):
    leg = envs.LEGS["nemo-2.3"]
    interpreter(leg)
    items = [{"id": id_, "config": config} for id_, config in configurations(host, "nemo2")]
    assert len(items) == 31 * len(MODES)  # every NeMo 2 seed row in every mode
    results = checked_results(leg, host, tmp_path_factory)
    report(request, leg, results)
    assert [r["id"] for r in results["results"]] == [item["id"] for item in items]
    assert all(r["ok"] for r in results["results"]), f"not accepted by NeMo 2:\n{failures(results)}"


# ------------------------------------------------------------------ --framework-arg

# Fields a user tunes (the recompute of every layer, the gradient buckets' size), by framework: each leg
# builds one published row with them, validates it and reads them back.
FRAMEWORK_ARGS = {
    "megatron_bridge": (
        "model.recompute_granularity=full",
        "model.recompute_method=uniform",
        "model.recompute_num_layers=1",
        "ddp.bucket_size=40000000",
    ),
    "nemo2": (
        "model.config.recompute_granularity=full",
        "model.config.recompute_method=uniform",
        "model.config.recompute_num_layers=1",
        "trainer.strategy.ddp.bucket_size=40000000",
    ),
}


def framework_args_config(host, leg: envs.Leg) -> dict:
    """llmb's configuration of the first published row of the leg's framework that neither recomputes
    nor offloads (the frameworks refuse recompute with offload), with ``FRAMEWORK_ARGS``."""
    from contract_configs import INNER, resolve_smallest, seed_rows
    from llmb.engines.frameworks import build_config
    from llmb.runs.runspec import RunOptions

    workload, recipe = next(
        (w, r)
        for w, v, s, d in seed_rows(host, leg.framework)
        if not (r := resolve_smallest(host, w, v, s, d)).offload_layers and not r.recompute_layers
    )
    return build_config(
        workload,
        recipe,
        RunOptions(framework_args=FRAMEWORK_ARGS[leg.framework]),
        experiment="pretrain_contract",
        inner_dir=INNER,
        checkpoint_save_dir=None,
        checkpoint_load_dir=None,
    )


@pytest.mark.frameworks
@pytest.mark.parametrize("framework", ["megatron_bridge", "nemo2"])
def test_the_field_catalogue_is_the_real_frameworks(
    host, fixed_install, tmp_path_factory, framework
):
    """llmb/data/framework_fields.json holds exactly the fields present, with the same kind, in every leg of
    the framework (LLMB_UPDATE_GOLDEN=1 rewrites it from them)."""
    from llmb.engines.frameworks import fields
    from llmb.paths import packaged_data

    found = [
        leg_output(
            leg, host, tmp_path_factory, "catalogue"
        )  # every published row's recipe's fields
        for leg in envs.LEGS.values()
        if leg.framework == framework
    ]
    common = dict(found[0]["fields"])
    for other in found[1:]:
        common = {k: v for k, v in common.items() if other["fields"].get(k) == v}
    path = Path(packaged_data(fields.CATALOGUE))
    shipped = json.loads(path.read_text(encoding="utf-8"))
    if os.environ.get("LLMB_UPDATE_GOLDEN"):
        shipped["fields"][framework] = dict(sorted(common.items()))
        shipped["versions"][framework] = [
            {k: v for k, v in f["versions"].items() if v} for f in found
        ]
        path.write_text(json.dumps(shipped, indent=0) + "\n", encoding="utf-8")
        fields.catalogue.cache_clear()
    assert shipped["fields"][framework] == dict(sorted(common.items())), (
        "LLMB_UPDATE_GOLDEN=1 to accept"
    )
    assert len(common) > 300  # the model, training, parallelism, DDP and optimizer fields at least


@pytest.mark.frameworks
@pytest.mark.parametrize("leg_name", list(envs.LEGS))
def test_framework_args_reach_the_real_configuration(
    host, fixed_install, tmp_path_factory, leg_name
):
    """A published row with --framework-arg fields validates in the real framework, which holds them."""
    leg = envs.LEGS[leg_name]
    interpreter(leg)
    config = framework_args_config(host, leg)
    asked = config["framework_args"]
    assert list(asked.values()) == ["full", "uniform", 1, 40000000]
    # last: they win over llmb's own
    assert list(config["overrides"].items())[-4:] == list(asked.items())
    checked = leg_output(leg, host, tmp_path_factory, "checked")
    (result,) = [r for r in checked["results"] if r["id"] == FRAMEWORK_ARGS_ID]
    assert result["ok"], result["error"]
    assert result["observed"]["framework_args"] == asked
