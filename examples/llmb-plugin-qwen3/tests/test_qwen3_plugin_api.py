"""The plugin is written against the public API only, and its production configuration is the
recipe's: Megatron-Bridge's Qwen3 recipe per size, FP8 as MXFP8 on Blackwell, the launcher's NCCL
setting for 235B BF16 off H100."""

from __future__ import annotations

import ast
from pathlib import Path

import llmb_plugin_qwen3

SOURCE = Path(llmb_plugin_qwen3.__file__).parent


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


def test_every_row_runs_megatron_bridges_qwen3_recipe(tmp_path, monkeypatch):
    # a test may use llmb's internals: the configuration a cluster run hands Megatron-Bridge
    from llmb.engines.frameworks import build_config
    from llmb.plugins.host import PluginHost
    from llmb.recipes.records import RecipeRequest
    from llmb.runs.runspec import RunOptions

    monkeypatch.setenv("LLMB_INSTALL", str(tmp_path))
    host = PluginHost()
    workload = host.workload("qwen3")
    (variant,) = workload.variants
    seen = 0
    for series in variant.series:
        for dtype in series.dtypes:
            recipe = host.resolve(
                RecipeRequest("qwen3", series.size, series.gpu, dtype, series.min_gpus)
            )
            config = build_config(
                workload,
                recipe,
                RunOptions(),
                experiment="pretrain_qwen3_test",
                inner_dir="/exp/inner",
                checkpoint_save_dir=None,
                checkpoint_load_dir=None,
            )
            size = {"30b": "30b_a3b", "235b": "235b_a22b"}[series.size]
            assert config["recipe_function"] == (
                f"megatron.bridge.recipes.qwen:qwen3_{size}_pretrain_config"
            )
            preset = config["precision"]["preset"]
            if dtype == "fp8":
                assert series.gpu != "h100" and preset == "bf16_with_mxfp8_mixed"
            else:
                assert preset == "bf16_mixed"
            qps = config["env"].get("NCCL_IB_QPS_PER_CONNECTION")
            wants_qps = series.size == "235b" and dtype == "bf16" and series.gpu != "h100"
            assert qps == ("4" if wants_qps else None), (series.gpu, series.size, dtype)
            assert config["container"] == "nvcr.io#nvidia/nemo:26.06.01"
            assert config["parallelism"]["etp"] == 1
            seen += 1
    assert seen == 18
