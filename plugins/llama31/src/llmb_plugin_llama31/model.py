"""Llama 3.1 for the torch engine, composed from ``llmb.engines.torch.blocks``.

A dense decoder: every layer is RMSNorm -> grouped-query attention with RoPE
(base 500,000, all head dimensions) -> residual, RMSNorm -> SwiGLU MLP ->
residual; untied embedding and output layer. Llama 3.1's long-context RoPE
frequency rescaling (factor 8 beyond 8k tokens) is left out: it changes no
shape and no FLOP, and the benchmarks train at 8k.

Imports torch: import this module only inside ``llmb_build_model``.
"""

from __future__ import annotations

from llmb import (
    CausalLM,
    GroupedQueryAttention,
    LayerParts,
    ModelArch,
    RMSNorm,
    RotaryEmbedding,
    SwiGLU,
)

ROPE_BASE = 500_000.0


def build(arch: ModelArch) -> CausalLM:
    """The Llama 3.1 model of ``arch`` (layer kinds ``A`` only)."""
    if arch.norm != "rmsnorm" or arch.activation != "swiglu" or set(arch.layer_kinds()) != {"A"}:
        raise ValueError(
            f"llama31 {arch.size}: expected RMSNorm, SwiGLU and dense layers, got "
            f"{arch.norm}, {arch.activation}, {arch.layer_kinds()!r}"
        )
    rope = RotaryEmbedding(arch.head_dim, base=ROPE_BASE)
    return CausalLM(
        arch,
        LayerParts(
            norm=RMSNorm,
            attention=lambda: GroupedQueryAttention(
                arch.hidden, arch.heads, arch.query_groups, arch.head_dim, rope=rope
            ),
            mlp=lambda ffn: SwiGLU(arch.hidden, ffn),
        ),
    )
