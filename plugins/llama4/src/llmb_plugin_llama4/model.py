"""Llama 4 Maverick for the torch engine, composed from ``llmb.engines.torch.blocks``.

Llama-style layers (RMSNorm pre-norms, grouped-query attention with RoPE base
500,000, residuals) whose MLP alternates: every ``moe_layer_step``-th layer
(1-based, ``ModelArch.layer_kinds``' ``E``) has a routed mixture of SwiGLU
experts of ``moe_ffn`` with top-``topk`` (1) routing through a sigmoid of the
router logit, which scales the token entering its expert, plus an always-on
shared SwiGLU expert of ``shared_expert_ffn``; the other layers (``A``) have
a dense SwiGLU MLP of ``ffn``. Untied embedding and output layer.

Left out, as they change no parameter count: Llama 4's attention without
RoPE on every fourth layer, its chunked local attention and its
temperature-tuned queries.

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
    RoutedMoE,
    SwiGLU,
)

ROPE_BASE = 500_000.0


def build(arch: ModelArch) -> CausalLM:
    """The Llama 4 model of ``arch`` (layer kinds ``A`` and ``E``)."""
    if (
        arch.norm != "rmsnorm"
        or arch.activation != "swiglu"
        or not set(arch.layer_kinds()) <= {"A", "E"}
    ):
        raise ValueError(
            f"llama4 {arch.size}: expected RMSNorm, SwiGLU and dense/MoE layers, got "
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
            moe=lambda: RoutedMoE(
                arch.hidden,
                arch.experts,
                arch.moe_ffn,
                arch.topk,
                shared_ffn=arch.shared_expert_ffn,
                score="sigmoid",
                weight_inputs=True,
            ),
        ),
    )
