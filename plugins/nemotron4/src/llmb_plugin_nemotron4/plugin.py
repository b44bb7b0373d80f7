"""Nemotron-4 for llmb: the recipe data, the seed's FLOPs formula and the
torch engine's model."""

from __future__ import annotations

from typing import Any

from llmb import ModelArch, ModelFlops, Workload, dense_transformer, hookimpl, load_workload


@hookimpl
def llmb_workloads() -> list[Workload]:
    return [load_workload(__package__)]


@hookimpl
def llmb_model_flops(workload: Workload, arch: ModelArch, seq_len: int) -> ModelFlops:
    # seeds/nemotron4-340b.md Notes: seq * (attention + mlp + embedding), with
    # mlp = 12 L h ffn (squared ReLU, two matrices): 8.62124e15 for 340b at 4096.
    return dense_transformer(arch, seq_len, formula=workload.cite("nemotron4-340b.md", "Notes"))


@hookimpl
def llmb_build_model(workload: Workload, arch: ModelArch) -> Any:
    # torch is imported here, never at module level: the CLI must not import it.
    from .model import build

    return build(arch)
