"""Llama 4 Maverick for llmb: the recipe data, the seed's FLOPs formula and the
torch engine's model."""

from __future__ import annotations

from typing import Any

from llmb import ModelArch, ModelFlops, Workload, hookimpl, load_workload


@hookimpl
def llmb_workloads() -> list[Workload]:
    return [load_workload(__package__)]


def maverick_flops(arch: ModelArch, seq_len: int, formula: str = "") -> ModelFlops:
    """seeds/llama4-maverick.md Notes, per sample (GBS = 1):

        12 s L h^2 ( (1 + g/a + 0.5 s/h) + (ffn/h) 1.5 topk + V / (2 L h) )

    The MLP term counts every layer at ``ffn`` (16384): a MoE layer's token
    sees the shared expert plus its top-1 routed expert, 8192 + 8192.
    """
    L, h, s = arch.layers, arch.hidden, seq_len
    base = 12 * s * L * h * h
    terms = {
        "attention": base * (1 + arch.query_groups / arch.heads + 0.5 * s / h),
        "mlp": base * (arch.ffn / h * 1.5 * arch.topk),
        "embedding": base * (arch.vocab / (2 * L * h)),
    }
    return ModelFlops(per_sample=sum(terms.values()), terms=terms, formula=formula)


@hookimpl
def llmb_model_flops(workload: Workload, arch: ModelArch, seq_len: int) -> ModelFlops:
    return maverick_flops(arch, seq_len, formula=workload.cite("llama4-maverick.md", "Notes"))


@hookimpl
def llmb_build_model(workload: Workload, arch: ModelArch) -> Any:
    # torch is imported here, never at module level: the CLI must not import it.
    from .model import build

    return build(arch)
