"""GPT-OSS (120B, 20B) for the torch engine, composed from llmb's public building blocks.

What OpenAI's model card (arXiv:2508.10925, "gpt-oss-120b & gpt-oss-20b Model Card") and the
models' config.json describe, as transformers' ``modeling_gpt_oss.py`` and OpenAI's reference
(openai/gpt-oss, ``gpt_oss/torch/model.py``) implement it. Every layer: RMSNorm pre-norm ->
grouped-query attention (64 query heads of 64 sharing 8 key/value heads) with biases on its q, k, v
and output projections, YaRN RoPE and one learned sink logit per head in the softmax -> residual;
RMSNorm pre-norm -> a mixture of experts -> residual. RMSNorm epsilon 1e-5, untied embedding and
output layer, no shared expert, every layer MoE.

Attention alternates, starting with the first layer: a sliding window of ``sliding_window`` (128)
tokens, the token itself included (``full_attention_step`` 2: every second layer, 1-based, attends
to the whole sequence; config.json's ``layer_types``). RoPE: base ``rope_base`` (150,000), YaRN of
``rope_scaling_factor`` 32 over ``rope_original_positions`` 4,096 with beta_fast 32, beta_slow 1,
``truncate`` false and the default attention factor 0.1 ln(32) + 1 (an architecture without YaRN,
``rope_scaling_factor`` 1, gets plain RoPE of the same base).

The MoE: a router with a bias; each token's top ``topk`` (4) logits, a softmax over those four only
(the reference's ``MLPBlock``: a softmax of the chosen logits); each chosen expert is GPT-OSS's clamped SwiGLU
(``ClampedSwiGLU`` through ``RoutedMoE(activation="swiglu_clamped")``: alpha 1.702, limit 7.0, biases
on both projections), its output scaled by its weight. The auxiliary load-balancing loss is left out
(it changes no FLOPs and no parameter count).

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

NORM_EPS = 1e-5  # config.json rms_norm_eps
ROPE_TRUNCATE = False  # config.json rope_scaling.truncate
ROPE_BETA_FAST, ROPE_BETA_SLOW = 32.0, 1.0  # config.json rope_scaling.beta_fast / beta_slow
ACTIVATION = "swiglu_clamped"


def norm(dim: int) -> RMSNorm:
    return RMSNorm(dim, eps=NORM_EPS)


def check(arch: ModelArch) -> None:
    """ValueError unless ``arch`` is GPT-OSS's shape: what ``build`` composes."""
    expected = {
        "norm": (arch.norm, "rmsnorm"),
        "activation": (arch.activation, ACTIVATION),
        "layer kinds": ("".join(sorted(set(arch.layer_kinds()))), "E"),
        "shared expert": (arch.shared_expert_ffn, 0),
        "attention sinks": (arch.attention_sinks, True),
        "attention bias": (arch.attention_bias, True),
        "expert bias": (arch.expert_bias, True),
    }
    wrong = [
        f"{name} {got!r} (expected {want!r})"
        for name, (got, want) in expected.items()
        if got != want
    ]
    if arch.rope_base <= 0:
        wrong.append(f"rope_base {arch.rope_base} (expected GPT-OSS's 150000)")
    if arch.rope_scaling_factor > 1 and arch.rope_original_positions <= 0:
        wrong.append(f"YaRN's factor {arch.rope_scaling_factor} without its original context")
    if wrong:
        raise ValueError(f"gptoss {arch.size} is not GPT-OSS's shape: {'; '.join(wrong)}")


def sliding(arch: ModelArch, index: int) -> bool:
    """Whether layer ``index`` (0-based) attends through the sliding window: all but every
    ``full_attention_step``-th layer, 1-based."""
    step = arch.full_attention_step
    return bool(arch.sliding_window) and not (step and (index + 1) % step == 0)


def build(arch: ModelArch) -> CausalLM:
    """The GPT-OSS model of ``arch``: alternating sliding/full attention with sinks, routed experts."""
    check(arch)
    rope = RotaryEmbedding(
        arch.head_dim,
        base=arch.rope_base,
        scaling_factor=arch.rope_scaling_factor,
        original_positions=arch.rope_original_positions,
        beta_fast=ROPE_BETA_FAST,
        beta_slow=ROPE_BETA_SLOW,
        truncate=ROPE_TRUNCATE,
    )
    model = CausalLM(
        arch,
        LayerParts(
            norm=norm,
            attention=lambda: GroupedQueryAttention(
                arch.hidden,
                arch.heads,
                arch.query_groups,
                arch.head_dim,
                rope=rope,
                bias=True,
                sinks=True,
            ),
            moe=lambda: RoutedMoE(
                arch.hidden,
                arch.experts,
                arch.moe_ffn,
                arch.topk,
                score="softmax",
                bias=True,
                activation=ACTIVATION,
            ),
        ),
    )
    # the window is a layer's, not a part's: set on each layer's attention (sub-layer 0), no weights
    for index, layer in enumerate(model.layers):
        layer[0].mixer.sliding_window = arch.sliding_window if sliding(arch, index) else 0
    return model
