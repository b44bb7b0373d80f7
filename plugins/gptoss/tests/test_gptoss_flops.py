"""GPT-OSS's model FLOPs as Megatron-Bridge counts them (its flop_utils.transformer_flops at
b50da4c7404caa41793e74ac40d18798844c7b67, the commit the GPT-OSS recipe pins), against a hand
computation of one published row of each variant."""

from __future__ import annotations

from dataclasses import replace

import pytest


@pytest.fixture(scope="module")
def host():
    from llmb.plugins.host import PluginHost

    return PluginHost()


def test_120b_at_4096_tokens_by_hand(host):
    # 120b, sequence 4096, TP 1 (every row of the GPT-OSS pre-training recipe). Per token, x 6
    # (3 for forward and backward, 2 for multiply-add):
    #   attention projections 2880*(4096 + 2*512) + 4096*2880 = 26,542,080 per layer;
    #   18 full-attention layers (2, 4, ..., 36): core 4096*4096 = 16,777,216;
    #   18 sliding layers (1, 3, ..., 35), window 128: mean context 128 - 128*127/(2*4096)
    #     = 126.015625, core 2*4096*126.015625 = 1,032,320;
    #   attention 6*18*(26,542,080 + 16,777,216 + 26,542,080 + 1,032,320) = 7,656,519,168
    #   MoE: 36 layers x 4 experts x 3 projections of 2880x2880: 6*2880*(3*2880*4*36) = 21,499,084,800
    #   logits: 6*2880*201,088 (201,088 = 128*1571, already a multiple of 128) = 3,474,800,640
    workload = host.workload("gptoss")
    flops = host.model_flops(workload, workload.architecture("120b"), 4096)
    assert flops.terms["attention"] == pytest.approx(4096 * 7_656_519_168, rel=1e-12)
    assert flops.terms["mlp"] == pytest.approx(4096 * 21_499_084_800, rel=1e-12)
    assert flops.terms["embedding"] == pytest.approx(4096 * 3_474_800_640, rel=1e-12)
    assert flops.per_sample == pytest.approx(133_654_137_274_368, rel=1e-12)
    # per GPU per step of the GB200 64-GPU row (GBS 1280): 2.673 PFLOP, i.e. 2,673 TFLOP/GPU/step
    assert 1280 * flops.per_sample / 64 == pytest.approx(2.67308e15, rel=1e-5)


def test_20b_at_8192_tokens_by_hand(host):
    # 20b, sequence 8192 (the MLPerf rows): 12 full and 12 sliding layers; mean window context
    # 128 - 128*127/(2*8192) = 127.0078125
    #   attention 6*12*((26,542,080 + 4096*8192) + (26,542,080 + 2*4096*127.0078125)) = 6,312,890,880
    #   MoE 6*2880*(3*2880*4*24) = 14,332,723,200; logits 3,474,800,640 (TP 1)
    workload = host.workload("gptoss")
    flops = host.model_flops(workload, workload.architecture("20b"), 8192)
    assert flops.terms["attention"] == pytest.approx(8192 * 6_312_890_880, rel=1e-12)
    assert flops.terms["mlp"] == pytest.approx(8192 * 14_332_723_200, rel=1e-12)
    assert flops.per_sample == pytest.approx(197_594_437_386_240, rel=1e-12)


def test_the_window_is_what_megatron_bridge_counts():
    from llmb import ModelArch
    from llmb_plugin_gptoss.plugin import gptoss_flops

    arch = ModelArch(
        size="t",
        family="gpt_oss",
        layers=4,
        hidden=64,
        ffn=64,
        heads=4,
        query_groups=2,
        vocab=256,
        head_dim=16,
        activation="swiglu_clamped",
        norm="rmsnorm",
        experts=4,
        topk=2,
        moe_ffn=64,
        moe_layer_step=1,
        sliding_window=8,
        full_attention_step=2,
    )
    no_window = gptoss_flops(replace(arch, sliding_window=0, full_attention_step=0), 64)
    windowed = gptoss_flops(arch, 64)
    # 2 of the 4 layers slide: each counts 12 q (s/2 - c) fewer per token, q = 64, c = 8 - 8*7/128
    saved = 64 * 2 * 12 * 64 * (32 - (8 - 56 / 128))
    assert no_window.terms["attention"] - windowed.terms["attention"] == pytest.approx(saved)
    assert windowed.terms["mlp"] == no_window.terms["mlp"]
    # a sequence no longer than the window: every layer attends causally to the whole sequence
    assert (
        gptoss_flops(arch, 8).per_sample
        == gptoss_flops(replace(arch, sliding_window=0), 8).per_sample
    )
    # the logit layer pads the vocabulary to a multiple of 128 * TP (201088 stays at TP 1, 201216 at TP 2)
    assert gptoss_flops(arch, 64, tp=2).terms["embedding"] == 64 * 6 * 64 * 256
