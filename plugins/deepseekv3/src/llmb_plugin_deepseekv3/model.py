"""DeepSeek-V3 (671B) and Kimi-K2 (1T) for the torch engine, composed from llmb's public building blocks.

Both are DeepSeek-V3's architecture (DeepSeek-V3 technical report, arXiv:2412.19437; the models'
Hugging Face config.json, deepseek-ai/DeepSeek-V3 and moonshotai/Kimi-K2-Instruct, whose
``architectures`` is ``DeepseekV3ForCausalLM``), at other widths:

* every layer: RMSNorm pre-norm -> multi-head latent attention (``LatentAttention``: queries through
  a ``q_lora_rank`` bottleneck, keys and values from a ``kv_lora_rank`` latent, ``rope_head_dim`` of
  each head's ``head_dim`` query and key channels rotated, the rotary key shared by all heads, values
  ``v_head_dim`` wide) -> residual; RMSNorm pre-norm -> MLP -> residual;
* the first ``dense_layers`` layers' MLP is a dense SwiGLU of ``ffn`` (``first_k_dense_replace``),
  every later one DeepSeekMoE: ``experts`` SwiGLU experts of ``moe_ffn`` and one shared expert of
  ``shared_expert_ffn``, routed by sigmoid scores, a score-correction bias used only for choosing
  (``noaux_tc``), group-limited top-k (the best ``topk_groups`` of ``expert_groups`` groups;
  Kimi-K2's ``n_group`` 1 is no grouping), the chosen weights renormalised (``norm_topk_prob``) and
  scaled by ``routed_scaling``;
* RoPE with YaRN scaling (``rope_scaling_factor`` over ``rope_original_positions``, ``beta_fast``
  and ``beta_slow`` as the config says), ``mscale`` = ``mscale_all_dim`` = 1.0: cos and sin are not
  scaled, the softmax of every layer is ``LatentAttention.yarn_mscale(factor, 1.0) ** 2 / sqrt(head_dim)``;
* untied embedding and output layer, no biases, RMSNorm epsilon 1e-6 everywhere.

What is not modelled, and why:

* Multi-token prediction. Megatron-Bridge's DeepSeek-V3 pre-training recipe, which the benchmark's
  recipes start from, sets ``mtp_num_layers = 1`` (``mtp_loss_scaling_factor = 0.1``); Kimi-K2 has
  none (``num_nextn_predict_layers`` 0). The torch engine's model is the main model only: its
  parameters are ``llmb.recipes.params.count_params`` (DeepSeek-V3: 671B, the report's figure), and
  the MTP module the production run adds is counted apart by ``mtp_params`` (about 11.7B more: the
  checkpoint's 685B also holds a second copy of the embedding and output layer). A step of the proxy
  therefore does less than the production step by that module's work (one more MoE layer's
  forward and backward and one more output-layer loss: about 1/60 of the layers).
* The bias updates of auxiliary-loss-free balancing (Megatron-Bridge's
  ``moe_router_bias_update_rate``) and the sequence-wise auxiliary loss: the correction bias stays
  at zero, which changes no FLOPs and no parameter count.
* DeepSeek's interleaved RoPE channel order (``rope_interleave``): a fixed permutation of the
  rotary weight rows, the same function (the tests map transformers' weights accordingly).

Imports torch: import this module only inside ``llmb_build_model``.
"""

from __future__ import annotations

from llmb import (
    CausalLM,
    LatentAttention,
    LayerParts,
    ModelArch,
    RMSNorm,
    RotaryEmbedding,
    RoutedMoE,
    SwiGLU,
)

NORM_EPS = 1e-6  # config.json rms_norm_eps (and the latent norms' own default in DeepSeek's code)
MSCALE = 1.0  # config.json rope_scaling.mscale (DeepSeek-V3 and Kimi-K2 alike)
MSCALE_ALL_DIM = 1.0  # config.json rope_scaling.mscale_all_dim (DeepSeek-V3 and Kimi-K2 alike)


def norm(dim: int) -> RMSNorm:
    return RMSNorm(dim, eps=NORM_EPS)


def check(arch: ModelArch) -> None:
    """ValueError unless ``arch`` is DeepSeek-V3's architecture: MLA, SwiGLU, RMSNorm, dense layers
    first and then DeepSeekMoE layers with a shared expert and sigmoid routing."""
    kinds = arch.layer_kinds()
    dense = min(arch.dense_layers, arch.layers)
    problems = [
        what
        for what, wrong in (
            (f"norm {arch.norm} (rmsnorm)", arch.norm != "rmsnorm"),
            (f"activation {arch.activation} (swiglu)", arch.activation != "swiglu"),
            ("no latent attention (kv_lora_rank 0)", not arch.kv_lora_rank),
            (f"router score {arch.router_score} (sigmoid)", arch.router_score != "sigmoid"),
            ("no shared expert", not arch.shared_expert_ffn),
            (
                f"layers {kinds!r} (dense first, then MoE)",
                kinds != "A" * dense + "E" * (arch.layers - dense),
            ),
            ("tied embeddings", arch.tied_embeddings),
        )
        if wrong
    ]
    if problems:
        raise ValueError(
            f"deepseekv3 {arch.size}: not DeepSeek-V3's architecture: {'; '.join(problems)}"
        )


def rotary(arch: ModelArch) -> RotaryEmbedding:
    """RoPE over the ``rope_head_dim`` channels, YaRN-scaled as the config says; cos and sin scaled by
    ``yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)`` (1 here)."""
    factor, mscale = arch.rope_scaling_factor, LatentAttention.yarn_mscale
    return RotaryEmbedding(
        arch.rope_head_dim,
        base=arch.rope_base or 10_000.0,
        scaling_factor=factor,
        original_positions=arch.rope_original_positions,
        beta_fast=arch.rope_beta_fast,
        beta_slow=arch.rope_beta_slow,
        attention_factor=mscale(factor, MSCALE) / mscale(factor, MSCALE_ALL_DIM),
    )


def build(arch: ModelArch) -> CausalLM:
    """The DeepSeek-V3-architecture model of ``arch`` (DeepSeek-V3 or Kimi-K2), without MTP modules."""
    check(arch)
    rope = rotary(arch)
    return CausalLM(
        arch,
        LayerParts(
            norm=norm,
            attention=lambda: LatentAttention(
                arch.hidden,
                arch.heads,
                arch.head_dim,
                arch.rope_head_dim,
                arch.v_head_dim,
                arch.kv_lora_rank,
                rope,
                q_lora_rank=arch.q_lora_rank,
                norm=norm,
                mscale_all_dim=MSCALE_ALL_DIM,
            ),
            mlp=lambda ffn: SwiGLU(arch.hidden, ffn),
            moe=lambda: RoutedMoE(
                arch.hidden,
                arch.experts,
                arch.moe_ffn,
                arch.topk,
                shared_ffn=arch.shared_expert_ffn,
                score="sigmoid",
                score_correction=True,
                expert_groups=arch.expert_groups,
                topk_groups=arch.topk_groups,
                normalize=True,
                scaling=arch.routed_scaling,
            ),
        ),
    )
