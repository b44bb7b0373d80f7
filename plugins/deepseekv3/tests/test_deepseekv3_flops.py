"""The plugin's FLOPs count against a hand computation: Megatron-Bridge's num_floating_point_operations
(megatron/bridge/training/utils/flop_utils.py, multi-latent attention, MoE and MTP terms) worked out by
hand for DeepSeek-V3 671B and Kimi-K2 1T at sequence 4096, one sample, TP 1."""

from __future__ import annotations

import pytest


def _arch(name):
    from llmb.plugins.host import PluginHost

    host = PluginHost()
    workload = host.workload(name)
    return host, workload, workload.architecture({"deepseekv3": "671b", "kimik2": "1t"}[name])


def test_deepseekv3_by_hand():
    # per token, each term x 6 (forward + 2 backward, x 2 for a multiply-add)
    # attention, 61 layers + 1 MTP module = 62 blocks:
    q = 1536 * (7168 + 128 * (128 + 64) + 1)  # 48,760,320
    kv = 512 * (7168 + 128 * (128 + 128) + 1)  # 20,447,744
    rope_key = 7168 * 64  # 458,752
    out = 128 * 128 * 7168  # 117,440,512
    core = 4096 * 128 * 192 / 2 + 4096 * 128 * 128 / 2  # 83,886,080
    assert q + kv + rope_key + out + core == 270_993_408
    attention = 6 * 62 * 270_993_408
    # MLP: 3 dense layers of 18432; 58 MoE layers + the MTP module's: 8 x 2048 routed + 2048 shared; SwiGLU 3
    mlp = 6 * 7168 * (3 * 18432 * 3 + 59 * (8 * 2048 + 2048) * 3)
    mtp = 6 * (3 * 7168 + 2 * 7168 * 7168)
    logits = 6 * 7168 * 129280 * 2  # the model's head and the MTP module's
    per_token = attention + mlp + mtp + logits
    # 100.81 + 147.45 + 0.62 + 11.12 GFLOP a token: 260.0 GFLOP, 1.0649e15 a 4096-token sample
    assert (attention, mlp, mtp, logits) == (
        100_809_547_776,
        147_446_562_816,
        616_691_712,
        11_120_148_480,
    )
    assert per_token == 259_992_950_784
    host, workload, arch = _arch("deepseekv3")
    flops = host.model_flops(workload, arch, 4096)
    assert flops.per_sample == pytest.approx(4096 * per_token, rel=1e-12)
    assert flops.terms["attention"] == pytest.approx(4096 * attention, rel=1e-12)
    assert flops.terms["mlp"] == pytest.approx(4096 * mlp, rel=1e-12)
    assert flops.terms["mtp"] == pytest.approx(4096 * mtp, rel=1e-12)
    assert flops.terms["embedding"] == pytest.approx(4096 * logits, rel=1e-12)
    assert "flop_utils" in flops.formula


def test_kimik2_by_hand():
    q = 1536 * (7168 + 64 * 192 + 1)
    kv = 512 * (7168 + 64 * 256 + 1)
    core = 4096 * 64 * 192 / 2 + 4096 * 64 * 128 / 2
    attention = 6 * 61 * (q + kv + 7168 * 64 + 64 * 128 * 7168 + core)  # no MTP
    mlp = 6 * 7168 * (1 * 18432 * 3 + 60 * (8 * 2048 + 2048) * 3)
    logits = 6 * 7168 * 163840
    host, workload, arch = _arch("kimik2")
    flops = host.model_flops(workload, arch, 4096)
    assert flops.per_sample == pytest.approx(4096 * (attention + mlp + logits), rel=1e-12)
    assert flops.terms["mtp"] == 0


def test_a_proxy_counts_its_own_layers():
    host, workload, arch = _arch("deepseekv3")
    full = host.model_flops(workload, arch, 4096).per_sample
    proxy = host.model_flops(workload, arch.with_layers(15), 4096).per_sample
    assert 0 < proxy < full / 3
