"""The plugin is written against the public API only, and its production configuration is the
recipes': Megatron-Bridge's gpt_oss recipes per size, BF16 for 120B, the MLPerf launcher's precision
and environment for 20B, each recipe's container."""

from __future__ import annotations

import ast
from pathlib import Path

import llmb_plugin_gptoss

SOURCE = Path(llmb_plugin_gptoss.__file__).parent

# the MLPerf launcher's --custom_env_vars and -E for every run (launch.sh, NVIDIA exemplar-performance
# v26.08.00, gpt-oss/pretrain/mlperf/launch.sh), before its per-precision changes
MLPERF_ENV = {
    "NCCL_MIN_NCHANNELS": "4",
    "NCCL_P2P_NET_CHUNKSIZE": "2097152",
    "NCCL_SHARP_GROUP_SIZE_THRESH": "2",
    "NCCL_GRAPH_REGISTER": "0",
    "NCCL_MIN_CTAS": "16",
    "NCCL_MAX_CTAS": "32",
    "NVTE_NORM_FWD_USE_CUDNN": "1",
    "NVTE_NORM_BWD_USE_CUDNN": "1",
    "NVTE_NVFP4_DISABLE_STOCHASTIC_ROUNDING": "0",
    "NVTE_NVFP4_DISABLE_2D_QUANTIZATION": "0",
    "NVTE_DPA_FP8_RECIPE": "",
    "NVTE_DPA_FP8DS_REDUCE_AMAX": "0",
    "TE_UB_ATOMIC_GEMM_RS": "0",
    "MC_TP_OVERLAP_AG": "True",
    "MC_TP_OVERLAP_RS": "True",
    "TORCH_CPP_LOG_LEVEL": "ERROR",
    "TORCH_NCCL_AVOID_RECORD_STREAMS": "1",
    "TORCH_NCCL_HIGH_PRIORITY": "1",
    "USE_MNNVL": "1",  # GB300 and GB200
}


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


def expected_mlperf_env(gpu: str, dtype: str, gpus: int) -> dict[str, str]:
    env = dict(MLPERF_ENV)
    if dtype == "fp8":
        env["NVTE_CUTEDSL_FUSED_GROUPED_MLP"] = "1"
        env["PYTORCH_CUDA_ALLOC_CONF"] = (
            "expandable_segments:True,graph_capture_record_stream_reuse:True"
        )
        env["NCCL_UB_DP"] = "False" if gpu in ("gb300", "gb200") and gpus >= 72 else "True"
        env["NVTE_NVFP4_DISABLE_RHT"] = "0"
    else:  # nvfp4
        env["NVTE_CUTEDSL_FUSED_GROUPED_MLP"] = "0"
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        env["NCCL_UB_DP"] = "True"
        env["NVTE_NVFP4_DISABLE_RHT"] = "1"
    return env


def test_every_row_runs_megatron_bridges_gpt_oss_recipe(tmp_path, monkeypatch):
    # a test may use llmb's internals: the configuration a cluster run hands Megatron-Bridge
    from llmb.engines.frameworks import build_config
    from llmb.plugins.host import PluginHost
    from llmb.recipes.records import RecipeRequest
    from llmb.runs.runspec import RunOptions

    monkeypatch.setenv("LLMB_INSTALL", str(tmp_path))
    host = PluginHost()
    workload = host.workload("gptoss")
    assert [v.name for v in workload.variants] == ["megatron-bridge", "mlperf"]
    seen = 0
    for variant in workload.variants:
        for series in variant.series:
            for dtype in series.dtypes:
                recipe = host.resolve(
                    RecipeRequest(
                        "gptoss",
                        series.size,
                        series.gpu,
                        dtype,
                        series.min_gpus,
                        variant=variant.name,
                    )
                )
                config = build_config(
                    workload,
                    recipe,
                    RunOptions(),
                    experiment="pretrain_gpt_oss_test",
                    inner_dir="/exp/inner",
                    checkpoint_save_dir=None,
                    checkpoint_load_dir=None,
                )
                where = (variant.name, series.gpu, series.size, dtype, series.min_gpus)
                assert config["recipe_function"] == (
                    f"megatron.bridge.recipes.gpt_oss:gpt_oss_{series.size}_pretrain_config"
                ), where
                preset = config["precision"]["preset"]
                assert config["parallelism"]["etp"] == 1, where
                if variant.name == "megatron-bridge":
                    assert series.size == "120b" and dtype == "bf16", where
                    assert preset == "bf16_mixed", where
                    assert config["container"] == "nvcr.io#nvidia/nemo:26.06.01", where
                    # the GPT-OSS launcher sets no variables of its own: none of the MLPerf one's
                    for name in (
                        "NCCL_MIN_CTAS",
                        "NCCL_UB_DP",
                        "USE_MNNVL",
                        "NVTE_NVFP4_DISABLE_RHT",
                    ):
                        assert name not in config["env"], (where, name)
                    # Megatron-Bridge's performance presets' selective recompute on GB200, B200, H100
                    recompute = config["overrides"].get("model.recompute_modules")
                    if series.gpu in ("gb200", "b200", "h100"):
                        assert recompute == ["layernorm", "moe_act"], where
                        assert config["overrides"]["model.recompute_granularity"] == "selective"
                    else:
                        assert recompute is None, where
                else:
                    assert series.size == "20b" and series.gpu in ("gb300", "gb200"), where
                    assert (
                        preset
                        == {
                            "fp8": "bf16_with_mxfp8_mixed",
                            "nvfp4": "bf16_with_nvfp4_mixed",
                        }[dtype]
                    ), where
                    assert config["container"] == "nvcr.io#nvidia/nemo:26.06.00", where
                    want = expected_mlperf_env(series.gpu, dtype, series.min_gpus)
                    got = {k: config["env"].get(k) for k in want}
                    assert got == want, where
                    # a note: llmb mounts no custom communicator file
                    assert "NCCL_CFG_PATH" not in config["env"], where
                    # the MLPerf model's vocabulary and RoPE (Megatron-Bridge's performance config)
                    assert config["overrides"]["model.vocab_size"] == 128256, where
                    assert config["overrides"]["tokenizer.vocab_size"] == 128256, where
                    assert config["overrides"]["model.position_embedding_type"] == "rope", where
                seen += 1
    # 120b BF16 on five GPU types; 20b NVFP4 and FP8 at 8 and 72 GPUs and FP8 at 512, on two
    assert seen == 5 + 2 * 5
