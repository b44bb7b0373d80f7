"""Model FLOPs per sample reproduce the seeds' Notes, term by term."""

from __future__ import annotations

import pytest
from llmb.recipes.flops import megatron_bridge_step, padded_vocab
from printed import agrees


def flops(host, workload, size, seq_len=None):
    w = host.workload(workload)
    arch = w.architecture(size)
    seq = seq_len or w.default_variant.series[0].seq_len
    return host.model_flops(w, arch, seq)


def test_llama31_8b(host):
    f = flops(host, "llama31", "8b")
    # seeds/llama31-nemo2.md Notes print per-token terms, then * 8192.
    assert f.terms["attention"] / 8192 == 20_937_965_568
    assert f.terms["mlp"] / 8192 == 33_822_867_456
    assert f.terms["embedding"] / 8192 == 3_152_019_456
    assert agrees(f.per_sample, "4.74E+14")


@pytest.mark.parametrize(("size", "per_sample"), [("70b", 3.943914e15), ("405b", 2.150748e16)])
def test_llama31_70b_and_405b_use_the_same_formula(host, size, per_sample):
    f = flops(host, "llama31", size)
    arch = host.workload("llama31").architecture(size)
    L, h, ffn, V, s = arch.layers, arch.hidden, arch.ffn, arch.vocab, 8192
    by_hand = s * (12 * L * h**2 * (1 + 8 / arch.heads + s / h) + 18 * L * ffn * h + 6 * V * h)
    assert f.per_sample == pytest.approx(by_hand, rel=1e-15)
    assert f.per_sample == pytest.approx(per_sample, rel=1e-6)


def test_llama4_maverick(host):
    f = flops(host, "llama4", "400b")
    assert agrees(f.per_sample, "8.92e14")
    # The seed's attention and MLP terms carry float error in the 10th digit.
    assert f.terms["attention"] == pytest.approx(247_390_116_864_000, rel=1e-8)
    assert f.terms["mlp"] == pytest.approx(593_736_279_244_800, rel=1e-8)
    # Its embedding term is off its own formula (erratum llama4-flops-terms):
    assert f.terms["embedding"] == 6 * 8192 * 5120 * 202048 == 50_847_044_075_520
    assert "llama4-flops-terms" in {n.id for n in host.workload("llama4").notes}


def test_nemotron4_340b(host):
    f = flops(host, "nemotron4", "340b")
    assert f.terms["attention"] / 4096 == pytest.approx(510_966_890_496, rel=1e-15)
    assert f.terms["mlp"] / 4096 == 1_565_515_579_392
    assert f.terms["embedding"] / 4096 == 28_311_552_000
    assert agrees(f.per_sample, "8.62124e15")


def test_nemotronh_56b(host):
    f = flops(host, "nemotronh", "56b")
    # The Notes print each block's FLOPs before the final * 6.
    assert f.terms["mlp"] / 6 == 237_494_511_599_616
    assert f.terms["attention"] / 6 == 23_364_622_090_240
    assert f.terms["mamba"] / 6 == 199_690_209_460_224
    assert f.terms["lm_head"] / 6 == 8_796_093_022_208
    assert agrees(f.per_sample, "2.816e15")


def test_proxy_layers_scale_the_flops(host):
    w = host.workload("llama31")
    full = host.model_flops(w, w.architecture("405b"), 8192)
    proxy = host.model_flops(w, w.architecture("405b-proxy").with_layers(8), 8192)
    assert proxy.terms["embedding"] == full.terms["embedding"]
    assert proxy.terms["mlp"] == pytest.approx(full.terms["mlp"] * 8 / 126)


def test_megatron_bridge_formula_llama3_8b(host):
    arch = host.workload("llama31").architecture("8b")
    step = megatron_bridge_step(arch, 8192, 128)
    assert agrees(step, "5.397e16")  # field-facts §3


def test_megatron_bridge_formula_pads_the_vocabulary():
    assert padded_vocab(128256, tp=1) == 128256
    assert padded_vocab(128256, tp=8) == 129024
    assert padded_vocab(202048, tp=1) == 202112


def test_megatron_bridge_formula_has_no_answer_for_hybrid_models(host):
    arch = host.workload("nemotronh").architecture("56b")
    assert megatron_bridge_step(arch, 8192, 768) is None


def test_core_fallback_counts_a_plugin_without_its_own_formula(host):
    from llmb.recipes import defaults as builtin

    arch = host.workload("llama31").architecture("8b")
    fallback = builtin.llmb_model_flops(workload=None, arch=arch, seq_len=8192)
    assert agrees(fallback.per_sample * 128, "5.397e16")
