"""Qwen3 MoE for the torch engine, composed from llmb's public building blocks.

Every layer: RMSNorm pre-norm -> grouped-query attention (``heads`` query heads of ``head_dim``
sharing ``query_groups`` key/value heads) whose queries and keys are each normalised per head by an
RMSNorm over ``head_dim`` (QK-norm) before RoPE (base 1,000,000) -> residual; RMSNorm pre-norm ->
a mixture of ``experts`` (128) SwiGLU experts of ``moe_ffn`` -> residual. No shared expert, no
dense layer (``decoder_sparse_step`` 1, no ``mlp_only_layers``), untied embedding and output layer,
no biases, RMSNorm epsilon 1e-6.

Routing as Qwen3 does it (``norm_topk_prob`` true): a softmax of the router's logits over all
experts, the top ``topk`` (8) kept and renormalised to sum to 1, each weight scaling its expert's
output. That equals a softmax over the ``topk`` chosen logits alone, which is what ``RoutedMoE``
with ``score="softmax"`` computes. The auxiliary load-balancing loss is left out (it changes no
FLOPs and no parameter count; the benchmark's mock data trains nothing worth balancing).

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
)

ROPE_BASE = 1_000_000.0  # config.json rope_theta
NORM_EPS = 1e-6  # config.json rms_norm_eps


def norm(dim: int) -> RMSNorm:
    return RMSNorm(dim, eps=NORM_EPS)


def build(arch: ModelArch) -> CausalLM:
    """The Qwen3 MoE model of ``arch``: every layer attention with QK-norm plus routed experts."""
    if (
        arch.norm != "rmsnorm"
        or arch.activation != "swiglu"
        or not arch.qk_norm
        or set(arch.layer_kinds()) != {"E"}
        or arch.shared_expert_ffn
    ):
        raise ValueError(
            f"qwen3 {arch.size}: expected RMSNorm, SwiGLU experts, QK-norm, every layer MoE and no "
            f"shared expert; got {arch.norm}, {arch.activation}, qk_norm {arch.qk_norm}, layers "
            f"{''.join(sorted(set(arch.layer_kinds())))!r}, shared expert {arch.shared_expert_ffn}"
        )
    rope = RotaryEmbedding(arch.head_dim, base=ROPE_BASE)
    return CausalLM(
        arch,
        LayerParts(
            norm=norm,
            attention=lambda: GroupedQueryAttention(
                arch.hidden, arch.heads, arch.query_groups, arch.head_dim, rope=rope, qk_norm=norm
            ),
            moe=lambda: RoutedMoE(
                arch.hidden, arch.experts, arch.moe_ffn, arch.topk, score="softmax"
            ),
        ),
    )
