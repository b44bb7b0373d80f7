"""DeepSeek-V3 671B and Kimi-K2 1T for llmb: the recipe data, the FLOPs count and the torch engine's
model.

Two workloads, one plugin: ``deepseekv3`` (workload.yaml, the DeepSeek-V3 pre-training recipe) and
``kimik2`` (kimik2.yaml, the Kimi-K2 pre-training recipe). Two recipe documents, two models with their
own names, containers and published figures, one architecture family (multi-head latent attention
and DeepSeekMoE), one FLOPs count and one torch model.

Written against the public plugin API only (``from llmb import ...``, docs/plugin-api.md).
"""

from __future__ import annotations

from typing import Any

from llmb import ModelArch, ModelFlops, Workload, hookimpl, load_workload

WORKLOAD_FILES = ("workload.yaml", "kimik2.yaml")
FORMULA = (
    "Megatron-Bridge's model FLOPs count for multi-latent attention, MoE and MTP, as its log's "
    "TFLOP/s/GPU (megatron/bridge/training/utils/flop_utils.py num_floating_point_operations)"
)
# Megatron-Bridge's DeepSeek-V3 and Kimi-K2 bridges pad the vocabulary to a multiple of 1280 x TP
# (make_vocab_size_divisible_by = 1280 in models/deepseek/deepseek_v3_bridge.py and
# models/kimi/kimi_bridge.py); both vocabularies are multiples of 1280 already.
VOCAB_MULTIPLE = 1280


def padded_vocab(vocab: int, tp: int = 1) -> int:
    multiple = VOCAB_MULTIPLE * tp
    return -(-vocab // multiple) * multiple


def mla_moe_flops(arch: ModelArch, seq_len: int, tp: int = 1) -> ModelFlops:
    """Model FLOPs per sample (one ``seq_len`` sequence, forward and backward), as Megatron-Bridge
    counts them for the TFLOP/s/GPU its log prints: ``num_floating_point_operations`` in
    megatron/bridge/training/utils/flop_utils.py (its ``transformer_flops``, multi-latent-attention
    branch; the same terms in Megatron-Bridge 0.4.2 and 0.6.2, and in Megatron-LM's
    megatron/training/training.py). Written from its terms, not copied:

    - every term is 3 (forward + 2 backward) x 2 (multiply-add) x the sequence's tokens;
    - the MTP modules count as layers: ``L + mtp`` attention blocks, and each MTP module's MLP is
      an MoE one where the last layer is MoE (it is, for both models);
    - attention per layer: the query's down projection and up projection (``q_lora_rank x (hidden +
      heads x 192 + 1)``, the +1 the low-rank norm), the keys' and values' (``kv_lora_rank x (hidden +
      heads x (128 + v_head_dim) + 1)``), the decoupled RoPE key (``hidden x 64``), the output
      projection (``heads x v_head_dim x hidden``) and the causal core attention, half of
      ``seq x heads x (192 + v_head_dim)``;
    - MLP per layer: 3 projections (SwiGLU) of ``ffn`` in the dense layers, of ``topk x moe_ffn``
      routed plus ``shared_expert_ffn`` in the MoE layers; the router is not counted;
    - per MTP module its two norms and its ``2 hidden x hidden`` projection;
    - the logits once per output head (the model's and each MTP module's) over the vocabulary padded
      to 1280 x TP.
    """
    h, s = arch.hidden, seq_len
    mtp = arch.mtp_layers
    kinds = arch.layer_kinds()
    last_is_moe = int(kinds[-1] == "E")
    moe_layers = kinds.count("E") + last_is_moe * mtp
    dense_layers = len(kinds) - kinds.count("E") + (1 - last_is_moe) * mtp
    blocks = arch.layers + mtp
    qk_nope = arch.head_dim - arch.rope_head_dim
    qk = qk_nope + arch.rope_head_dim
    if arch.q_lora_rank:
        q_proj = arch.q_lora_rank * (h + arch.heads * qk + 1)
    else:
        q_proj = h * arch.heads * qk
    kv_proj = arch.kv_lora_rank * (h + arch.heads * (qk_nope + arch.v_head_dim) + 1)
    rope_key = h * arch.rope_head_dim
    out_proj = arch.heads * arch.v_head_dim * h
    core = s * arch.heads * qk / 2 + s * arch.heads * arch.v_head_dim / 2
    attention = 6 * blocks * (q_proj + kv_proj + rope_key + out_proj + core)
    glu = 3 if arch.gated else 2
    mlp = (
        6
        * h
        * (
            arch.ffn * glu * dense_layers
            + arch.moe_ffn * arch.topk * glu * moe_layers
            + arch.shared_expert_ffn * glu * moe_layers
        )
    )
    mtp_proj = 6 * mtp * (3 * h + 2 * h * h)
    logits = 6 * h * padded_vocab(arch.vocab, tp) * (mtp + 1)
    terms = {
        "attention": s * attention,
        "mlp": s * mlp,
        "mtp": s * mtp_proj,
        "embedding": s * logits,
    }
    return ModelFlops(per_sample=sum(terms.values()), terms=terms, formula=FORMULA)


@hookimpl
def llmb_workloads() -> list[Workload]:
    return [load_workload(__package__, name) for name in WORKLOAD_FILES]


@hookimpl
def llmb_model_flops(workload: Workload, arch: ModelArch, seq_len: int) -> ModelFlops | None:
    if workload.name not in ("deepseekv3", "kimik2"):
        return None
    # the hook is given no TP: the vocabulary padded at TP 1 (129280 and 163840 are multiples of
    # 1280; at TP 2, DeepSeek-V3's H100 and 128-GB200 rows, Megatron pads 129280 to 130560, 0.02% of
    # the count)
    return mla_moe_flops(arch, seq_len)


@hookimpl
def llmb_build_model(workload: Workload, arch: ModelArch) -> Any:
    if workload.name not in ("deepseekv3", "kimik2"):
        return None
    # torch is imported here, never at module level: the CLI must not import it.
    from .model import build

    return build(arch)
