"""Nemotron-H for llmb: the recipe data, the seed's FLOPs formula and the
torch engine's model."""

from __future__ import annotations

from typing import Any

from llmb import ModelArch, ModelFlops, Workload, hookimpl, load_workload, mamba_d_inner


@hookimpl
def llmb_workloads() -> list[Workload]:
    return [load_workload(__package__)]


def nemotronh_flops(arch: ModelArch, seq_len: int, formula: str = "") -> ModelFlops:
    """seeds/nemotronh-56b.md Notes, per sample: 6 * (mlp + attention + mamba + lm_head),
    counting each block type over the layers of that type in the hybrid pattern."""
    s, h = seq_len, arch.hidden
    kinds = arch.layer_kinds()
    n_mlp, n_attn, n_mamba = kinds.count("-"), kinds.count("*"), kinds.count("M")
    d = arch.head_dim
    mlp = 2 * s * h * arch.ffn * n_mlp
    attention = (
        2 * s * h * arch.heads * d + 2 * s * h * arch.query_groups * d + 2 * s * s * h
    ) * n_attn
    mamba = (
        s
        * h
        * (mamba_d_inner(arch) * 3 + arch.mamba_groups * arch.mamba_state * 2 + arch.mamba_heads)
        + s * h * arch.mamba_expand * arch.mamba_chunk
        + 2 * s * h * arch.mamba_expand * arch.mamba_state
        + s * arch.mamba_chunk * arch.mamba_state * arch.mamba_groups
    ) * n_mamba
    lm_head = s * h * arch.vocab
    terms = {"mlp": 6 * mlp, "attention": 6 * attention, "mamba": 6 * mamba, "lm_head": 6 * lm_head}
    return ModelFlops(per_sample=sum(terms.values()), terms=terms, formula=formula)


@hookimpl
def llmb_model_flops(workload: Workload, arch: ModelArch, seq_len: int) -> ModelFlops:
    return nemotronh_flops(arch, seq_len, formula=workload.cite("nemotronh-56b.md", "Notes"))


@hookimpl
def llmb_build_model(workload: Workload, arch: ModelArch) -> Any:
    # torch is imported here, never at module level: the CLI must not import it.
    from .model import build

    return build(arch)
