"""Llama 3.1 for llmb: the recipe data, the seed's FLOPs formula and the
torch engine's model."""

from __future__ import annotations

from typing import Any

from llmb import ModelArch, ModelFlops, Workload, dense_transformer, hookimpl, load_workload


@hookimpl
def llmb_workloads() -> list[Workload]:
    return [load_workload(__package__)]


@hookimpl
def llmb_model_flops(workload: Workload, arch: ModelArch, seq_len: int) -> ModelFlops:
    # seeds/llama31-nemo2.md Notes: seq * (attention + mlp + embedding), with
    # mlp = 18 L ffn h (SwiGLU's three matrices): 4.74e14 for 8b at 8192.
    return dense_transformer(arch, seq_len, formula=workload.cite("llama31-nemo2.md", "Notes"))


@hookimpl
def llmb_build_model(workload: Workload, arch: ModelArch) -> Any:
    # torch is imported here, never at module level: the CLI must not import it.
    from .model import build

    return build(arch)
