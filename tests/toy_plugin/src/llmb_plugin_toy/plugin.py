"""The toy workload for llmb: a test fixture and the documentation's worked example."""

from __future__ import annotations

from llmb import ModelArch, ModelFlops, Workload, dense_transformer, hookimpl, load_workload


@hookimpl
def llmb_workloads() -> list[Workload]:
    # workload.yaml beside this module; __package__ is "llmb_plugin_toy".
    return [load_workload(__package__)]


@hookimpl
def llmb_model_flops(workload: Workload, arch: ModelArch, seq_len: int) -> ModelFlops:
    # Called only for the workload this plugin registered (toy). A real plugin
    # returns its recipe document's own formula; the toy uses the core's
    # dense-transformer formula, split into attention, mlp and embedding.
    return dense_transformer(arch, seq_len, formula="toy: llmb.recipes.flops.dense_transformer")
