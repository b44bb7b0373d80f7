"""Model FLOPs formulas shared by several workloads.

``dense_transformer`` is the formula of the Llama 3.1 (NeMo 2) and
Nemotron-4 seeds' Notes sections, per sample of ``s`` tokens:

    s * ( 12 L h^2 (1 + g/a + s/h)        attention
        + 6 m L ffn h                    MLP, m = 3 weight matrices when gated
                                         (SwiGLU: the seed's 18), else 2 (12)
        + 6 V h )                        embedding / output layer

``megatron_bridge_step`` is the formula behind Megatron-Bridge's
``MODEL_TFLOP/s/GPU`` (field-facts §3), per step of ``B`` samples:

    B s ( 12 L h (ffn g f_dense + moe_ffn topk g f_moe + shared_ffn g f_moe)
        + 12 L h^2 (1 + q/a + s/(2h)) (kv_channels a / h)
        + 6 h V_padded )

with g = 3/2 for gated MLPs (1 otherwise), f_dense/f_moe the fractions of
dense and MoE layers, and V_padded the vocabulary rounded up to a multiple
of 128 * TP (Megatron's ``make_vocab_size_divisible_by``).
"""

from __future__ import annotations

import math

from llmb.recipes.records import ModelArch, ModelFlops


def dense_transformer(arch: ModelArch, seq_len: int, formula: str) -> ModelFlops:
    """The dense-transformer formula above, split into the seed's terms
    (each term is per sample, i.e. already multiplied by ``seq_len``)."""
    L, h, s = arch.layers, arch.hidden, seq_len
    mats = 3 if arch.gated else 2
    attention = 12 * L * h * h * (1 + arch.query_groups / arch.heads + s / h)
    mlp = 6 * mats * L * arch.ffn * h
    embedding = 6 * arch.vocab * h
    terms = {"attention": s * attention, "mlp": s * mlp, "embedding": s * embedding}
    return ModelFlops(per_sample=sum(terms.values()), terms=terms, formula=formula)


def padded_vocab(vocab: int, tp: int = 1, divisible_by: int = 128) -> int:
    multiple = divisible_by * tp
    return math.ceil(vocab / multiple) * multiple


def megatron_bridge_step(arch: ModelArch, seq_len: int, gbs: int, tp: int = 1) -> float | None:
    """FLOPs of one training step as Megatron-Bridge counts them, or None for
    architectures the formula does not describe (hybrid Mamba models)."""
    flops = megatron_bridge_sample(arch, seq_len, tp)
    return None if flops is None else gbs * flops.per_sample


def megatron_bridge_sample(arch: ModelArch, seq_len: int, tp: int = 1) -> ModelFlops | None:
    if arch.layer_pattern is not None:
        return None
    if arch.kv_lora_rank:
        # multi-latent attention and MTP (DeepSeek-V3, Kimi-K2): Megatron-Bridge counts them with terms of
        # their own, which the workload's plugin implements (llmb-plugin-deepseekv3's llmb_model_flops)
        return None
    L, h, s = arch.layers, arch.hidden, seq_len
    g = 1.5 if arch.gated else 1.0
    moe_frac = arch.moe_layers / L
    dense_frac = 1 - moe_frac
    mlp = (
        12
        * L
        * h
        * (
            arch.ffn * g * dense_frac
            + arch.moe_ffn * arch.topk * g * moe_frac
            + arch.shared_expert_ffn * g * moe_frac
        )
    )
    attention = (
        12
        * L
        * h
        * h
        * (1 + arch.query_groups / arch.heads + s / (2 * h))
        * (arch.head_dim * arch.heads / h)
    )
    window = arch.sliding_window
    if window and window < s:
        # Sliding-window layers (GPT-OSS): Megatron-Bridge counts their core attention over the mean
        # causal window context, W - W(W-1)/(2s) keys, not s/2; every full_attention_step-th layer
        # (1-based) attends to the whole sequence (flop_utils.transformer_flops, window_size and
        # window_attn_skip_freq)
        full = L // arch.full_attention_step if arch.full_attention_step else 0
        context = window - window * (window - 1) / (2 * s)
        attention -= 12 * (L - full) * arch.head_dim * arch.heads * (s / 2 - context)
    embedding = 6 * h * padded_vocab(arch.vocab, tp)
    terms = {"attention": s * attention, "mlp": s * mlp, "embedding": s * embedding}
    return ModelFlops(
        per_sample=sum(terms.values()),
        terms=terms,
        formula="Megatron-Bridge MODEL_TFLOP/s/GPU formula (field-facts §3)",
    )
