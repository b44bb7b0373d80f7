"""Nemotron-4 for the torch engine, composed from ``llmb.engines.torch.blocks``.

A dense decoder: every layer is LayerNorm1p -> grouped-query attention with
RoPE on half of each head's dimensions (base 10,000) -> residual,
LayerNorm1p -> squared-ReLU MLP (no gating) -> residual; no biases, untied
embedding and output layer (Nemotron-4 340B Technical Report).

Imports torch: import this module only inside ``llmb_build_model``.
"""

from __future__ import annotations

from llmb import (
    CausalLM,
    GroupedQueryAttention,
    LayerNorm1p,
    LayerParts,
    ModelArch,
    RotaryEmbedding,
    SquaredReLUMLP,
)

ROPE_BASE = 10_000.0
ROTARY_FRACTION = 0.5


def build(arch: ModelArch) -> CausalLM:
    """The Nemotron-4 model of ``arch`` (layer kinds ``A`` only)."""
    if (
        arch.norm != "layernorm1p"
        or arch.activation != "squared_relu"
        or set(arch.layer_kinds()) != {"A"}
    ):
        raise ValueError(
            f"nemotron4 {arch.size}: expected LayerNorm1p, squared ReLU and dense layers, got "
            f"{arch.norm}, {arch.activation}, {arch.layer_kinds()!r}"
        )
    rope = RotaryEmbedding(arch.head_dim, base=ROPE_BASE, fraction=ROTARY_FRACTION)
    return CausalLM(
        arch,
        LayerParts(
            norm=LayerNorm1p,
            attention=lambda: GroupedQueryAttention(
                arch.hidden, arch.heads, arch.query_groups, arch.head_dim, rope=rope
            ),
            mlp=lambda ffn: SquaredReLUMLP(arch.hidden, ffn),
        ),
    )
