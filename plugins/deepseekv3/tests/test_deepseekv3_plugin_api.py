"""The plugin is written against the public API only, and its production configuration is the
recipes': Megatron-Bridge's deepseek_v3 and kimi_k2 recipes, FP8 as MXFP8 off H100 and sub-channel
scaling on H100, the launcher's recompute modules on 128 GPUs, Kimi-K2's B200 container, and the
pipeline layout each row's PP x VP needs."""

from __future__ import annotations

import ast
from pathlib import Path

import llmb_plugin_deepseekv3

SOURCE = Path(llmb_plugin_deepseekv3.__file__).parent
# written by the plugin's model helper alongside; the facade rule holds for it too
MB = "megatron.bridge.recipes"


def test_the_plugin_imports_llmb_only_through_the_facade():
    import llmb

    for path in sorted(SOURCE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                assert not any(a.name.split(".")[0] == "llmb" for a in node.names), path.name
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module.split(".")[0] == "llmb":
                    assert node.module == "llmb", (path.name, node.module)
                    for alias in node.names:
                        assert alias.name in llmb.__all__, (path.name, alias.name)


# the launch.sh settings of 128-GPU rows: (gpu, dtype) -> recompute modules
RECOMPUTE_128 = {
    ("gb300", "nvfp4"): ["mla_up_proj"],
    ("gb300", "fp8"): ["mla_up_proj"],
    ("gb300", "bf16"): ["mla_up_proj"],
    ("gb200", "fp8"): ["mla_up_proj"],
    ("b300", "fp8"): ["mla_up_proj", "core_attn"],
    ("b200", "fp8"): ["mla_up_proj", "core_attn", "moe"],
}


def _configs(tmp_path, monkeypatch, name):
    # a test may use llmb's internals: the configuration a cluster run hands Megatron-Bridge
    from llmb.engines.frameworks import build_config
    from llmb.plugins.host import PluginHost
    from llmb.recipes.records import RecipeRequest
    from llmb.runs.runspec import RunOptions

    monkeypatch.setenv("LLMB_INSTALL", str(tmp_path))
    host = PluginHost()
    workload = host.workload(name)
    (variant,) = workload.variants
    for series in variant.series:
        for dtype in series.dtypes:
            for gpus in series.listed_gpus or (series.min_gpus,):
                recipe = host.resolve(RecipeRequest(name, series.size, series.gpu, dtype, gpus))
                yield (
                    series.gpu,
                    dtype,
                    gpus,
                    build_config(
                        workload,
                        recipe,
                        RunOptions(),
                        experiment=f"pretrain_{name}_test",
                        inner_dir="/exp/inner",
                        checkpoint_save_dir=None,
                        checkpoint_load_dir=None,
                    ),
                )


def _stages(config):
    p = config["parallelism"]
    return p["pp"] * (p["vp"] or 1)


def _decoders(layout):
    return [stage.count("decoder") for stage in layout]


def test_every_deepseekv3_row_runs_megatron_bridges_deepseek_v3_recipe(tmp_path, monkeypatch):
    seen = 0
    for gpu, dtype, gpus, config in _configs(tmp_path, monkeypatch, "deepseekv3"):
        assert config["recipe_function"] == f"{MB}.deepseek:deepseek_v3_pretrain_config"
        assert config["container"] == "nvcr.io#nvidia/nemo:26.06.01"
        preset = config["precision"]["preset"]
        expected = {
            "bf16": "bf16_mixed",
            "nvfp4": "bf16_with_nvfp4_mixed",
            "fp8": "bf16_with_fp8_subchannel_scaling_mixed"
            if gpu == "h100"
            else "bf16_with_mxfp8_mixed",
        }[dtype]
        assert preset == expected, (gpu, dtype, gpus)
        overrides = config["overrides"]
        wanted = RECOMPUTE_128.get((gpu, dtype)) if gpus == 128 else None
        assert overrides.get("model.recompute_modules") == wanted, (gpu, dtype, gpus)
        assert config["env"].get("NCCL_P2P_NET_CHUNKSIZE") == "2097152"  # every row pipelines
        assert config["parallelism"]["etp"] == 1
        assert overrides["model.num_layers"] == 61
        layout = overrides["model.pipeline_model_parallel_layout"]
        assert len(layout) == _stages(config) and sum(_decoders(layout)) == 61
        assert layout[0][0] == "embedding" and layout[-1][-2:] == ["mtp", "loss"]
        assert overrides["model.moe_layer_freq"] == [0, 0, 0] + [1] * 58
        # Megatron-Bridge's own layouts for these stage counts
        assert (
            _decoders(layout)
            == {
                16: [4] * 15 + [1],
                32: [1] + [2] * 30 + [0],
                8: [8] * 7 + [5],
            }[_stages(config)]
        ), (gpu, dtype, gpus)
        assert config["huggingface"]["repo"] == "deepseek-ai/DeepSeek-V3"
        seen += 1
    # every published row: GB300 9, GB200 7, B300 9, B200 5, H100 2
    assert seen == 32


def test_every_kimik2_row_runs_megatron_bridges_kimi_k2_recipe(tmp_path, monkeypatch):
    seen = 0
    for gpu, dtype, _gpus, config in _configs(tmp_path, monkeypatch, "kimik2"):
        # the module Megatron-Bridge 0.4 and 0.6 both have, and its performance launcher imports
        assert config["recipe_function"] == f"{MB}.kimi.kimi_k2:kimi_k2_pretrain_config"
        assert dtype == "fp8" and config["precision"]["preset"] == "bf16_with_mxfp8_mixed"
        container = (
            "nvcr.io#nvidia/nemo:26.04.01" if gpu == "b200" else "nvcr.io#nvidia/nemo:26.06.01"
        )
        assert config["container"] == container, gpu
        overrides = config["overrides"]
        assert "model.recompute_modules" not in overrides
        layout = overrides["model.pipeline_model_parallel_layout"]
        assert _stages(config) == 16 and _decoders(layout) == [4] * 15 + [1]
        assert layout[-1][-1] == "loss" and "mtp" not in layout[-1]
        assert overrides["model.moe_layer_freq"] == [0] + [1] * 60
        assert config["huggingface"]["repo"] == "moonshotai/Kimi-K2-Instruct"
        seen += 1
    assert seen == 8


def test_a_proxy_keeps_a_layer_on_every_stage_but_the_last(tmp_path, monkeypatch):
    from llmb.engines.frameworks import build_config
    from llmb.errors import UsageError
    from llmb.plugins.host import PluginHost
    from llmb.recipes.records import RecipeRequest
    from llmb.runs.runspec import RunOptions

    monkeypatch.setenv("LLMB_INSTALL", str(tmp_path))
    host = PluginHost()
    workload = host.workload("deepseekv3")
    recipe = host.resolve(RecipeRequest("deepseekv3", "671b", "gb300", "fp8", 128))  # PP 4 x VP 4

    def build(layers):
        return build_config(
            workload,
            recipe,
            RunOptions(layers=layers),
            experiment="x",
            inner_dir="/exp/inner",
            checkpoint_save_dir=None,
            checkpoint_load_dir=None,
        )

    overrides = build(15)["overrides"]
    assert _decoders(overrides["model.pipeline_model_parallel_layout"]) == [1] * 15 + [0]
    assert overrides["model.moe_layer_freq"] == [0, 0, 0] + [1] * 12
    try:
        build(4)
    except UsageError as exc:
        assert "pipeline layout" in str(exc) and "15" in str(exc)
    else:
        raise AssertionError("--layers 4 over 16 stages was not refused")
