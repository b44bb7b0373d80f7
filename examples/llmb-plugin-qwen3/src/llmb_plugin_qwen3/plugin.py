"""Qwen3 MoE (30B-A3B, 235B-A22B) for llmb: the recipe data, the FLOPs count and the torch engine's model.

Written against the public plugin API only (``from llmb import ...``, docs/plugin-api.md).
"""

from __future__ import annotations

from typing import Any

from llmb import (
    ModelArch,
    ModelFlops,
    Workload,
    hookimpl,
    load_workload,
    megatron_bridge_sample,
)

FORMULA = "Megatron-Bridge's model FLOPs count, as its log's TFLOP/s/GPU (the Qwen3 recipe prints no formula)"


def qwen3_flops(arch: ModelArch, seq_len: int) -> ModelFlops:
    """Model FLOPs per sample (one sequence, forward and backward), split into attention, MLP and
    embedding terms.

    The Qwen3 recipe prints no formula of its own: its TFLOPS/GPU is the figure Megatron-Bridge logs,
    so this is Megatron-Bridge's count. Every layer is MoE; a token passes through its ``topk`` (8)
    routed SwiGLU experts of ``moe_ffn`` and no shared expert. Attention uses the heads' own width
    (``heads * head_dim``, 4096 for 30B where the hidden size is 2048). The per-head QK-norm and the
    router are not counted, as Megatron-Bridge does not count them. The vocabulary is padded to a
    multiple of 128 (tensor parallel size 1), as Megatron pads it.
    """
    counted = megatron_bridge_sample(arch, seq_len)
    return ModelFlops(per_sample=counted.per_sample, terms=counted.terms, formula=FORMULA)


@hookimpl
def llmb_workloads() -> list[Workload]:
    return [load_workload(__package__)]


@hookimpl
def llmb_model_flops(workload: Workload, arch: ModelArch, seq_len: int) -> ModelFlops:
    return qwen3_flops(arch, seq_len)


@hookimpl
def llmb_build_model(workload: Workload, arch: ModelArch) -> Any:
    # torch is imported here, never at module level: the CLI must not import it.
    from .model import build

    return build(arch)
