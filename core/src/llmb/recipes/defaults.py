"""The core's default answers to the recipe hooks, which workload plugins may replace (both run
``trylast``, so any plugin's answer comes first). A core plugin: ``llmb.plugins.host`` registers
it by name."""

from __future__ import annotations

from llmb import hookimpl
from llmb.recipes.flops import megatron_bridge_sample
from llmb.recipes.records import ModelArch, ModelFlops, Recipe, RecipeRequest, Workload
from llmb.recipes.resolve import resolve_from_tables


@hookimpl(trylast=True)
def llmb_resolve_recipe(workload: Workload, request: RecipeRequest) -> Recipe:
    return resolve_from_tables(workload, request)


@hookimpl(trylast=True)
def llmb_model_flops(workload: Workload, arch: ModelArch, seq_len: int) -> ModelFlops | None:
    return megatron_bridge_sample(arch, seq_len)
