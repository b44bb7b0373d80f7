"""GPT-OSS (120B, and the MLPerf 20B) for llmb: the recipe data, the FLOPs count and the torch
engine's model.

Written against the public plugin API only (``from llmb import ...``, docs/plugin-api.md).
"""

from __future__ import annotations

from typing import Any

from llmb import (
    ModelArch,
    ModelFlops,
    Workload,
    hookimpl,
    load_workload,
    megatron_bridge_sample,
)

FORMULA = (
    "Megatron-Bridge's model FLOPs count, as its log's TFLOP/s/GPU, with its sliding-window "
    "attention term (the GPT-OSS recipes print no formula)"
)


def gptoss_flops(arch: ModelArch, seq_len: int, tp: int = 1) -> ModelFlops:
    """Model FLOPs per sample (one sequence of ``seq_len`` tokens, forward and backward), split into
    attention, MLP and embedding terms, as Megatron-Bridge counts them for GPT-OSS: llmb's
    ``megatron_bridge_sample``, which is exactly that count.

    Megatron-Bridge's ``num_floating_point_operations`` (src/megatron/bridge/training/utils/
    flop_utils.py, ``transformer_flops``, at b50da4c7404caa41793e74ac40d18798844c7b67, the commit
    the GPT-OSS recipe's metadata.yaml pins; the MLPerf recipe's fcbb6031103d0ca845c1a54d4fee55ecfcca17b6
    counts the same) counts, per token and per layer, 3 (forward and backward) x 2 (multiply-add) x:

    - attention projections: ``h (q + 2 kv) + q h``, with q = heads x head_dim (4096, wider than
      the hidden size 2880) and kv = query_groups x head_dim (512);
    - core attention: ``q s`` on a full-attention layer (causal: s/2 keys, for QK^T and for AV);
      on a sliding-window layer ``2 q c``, c the mean causal window context W - W(W-1)/(2s)
      (126.02 keys at W 128, s 4096). The GPT-OSS bridge sets window_size (sliding_window - 1, 0),
      a 128-token window, and window_attn_skip_freq 2: layers 1, 3, 5, ... (1-based) slide, layers
      2, 4, ... attend to the whole sequence, as the config's layer_types alternate;
    - the MoE: every layer (moe_layer_freq 1), ``topk`` (4) routed gated experts of ``moe_ffn``
      (three projections, ``3 h moe_ffn`` each: the bridge's gated_linear_unit), no shared expert;
    - the logit layer once: ``h V``, V the vocabulary padded to a multiple of 128 x TP (201088
      at TP 1, 201216 at TP 2; the hook counts TP 1).

    Not counted, as Megatron-Bridge does not count them: the biases of the attention, router and
    expert projections, the attention sinks (one learned logit per head in the softmax), the
    router, the clamp of the SwiGLU, the norms and the YaRN RoPE.
    """
    counted = megatron_bridge_sample(arch, seq_len, tp)
    return ModelFlops(per_sample=counted.per_sample, terms=counted.terms, formula=FORMULA)


@hookimpl
def llmb_workloads() -> list[Workload]:
    return [load_workload(__package__)]


@hookimpl
def llmb_model_flops(workload: Workload, arch: ModelArch, seq_len: int) -> ModelFlops:
    return gptoss_flops(arch, seq_len)


@hookimpl
def llmb_build_model(workload: Workload, arch: ModelArch) -> Any:
    # torch is imported here, never at module level: the CLI must not import it.
    from .model import build

    return build(arch)
