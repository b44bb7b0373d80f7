"""The torch engine's Qwen3 MoE: QK-norm, top-8 of 128 routing, the full models' parameter counts, and
the FLOPs count. Builds models with torch (the full sizes on the meta device: no memory)."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from llmb import RMSNorm, RoutedMoE, load_workload  # noqa: E402
from llmb_plugin_qwen3.model import build  # noqa: E402
from llmb_plugin_qwen3.plugin import qwen3_flops  # noqa: E402

WORKLOAD = load_workload("llmb_plugin_qwen3")
# What llmb's parameter arithmetic (llmb.recipes.params) and the built model both give for the full
# architectures of Qwen's config.json; the model cards state 30.5B and 235B in total.
FULL_PARAMS = {"30b": 30_532_122_624, "235b": 235_093_634_560}


def small(size: str = "30b"):
    """The architecture of ``size`` at a CPU width, keeping its structure: 128 experts, top-8, QK-norm,
    grouped queries (8 query heads per KV head), head_dim apart from hidden/heads."""
    return replace(
        WORKLOAD.architecture(size),
        layers=2,
        hidden=64,
        heads=8,
        query_groups=1,
        head_dim=16,
        moe_ffn=16,
        ffn=32,
        vocab=128,
    )


# the 235B model's meta-device build takes half a minute: CI's, not the default of a plugin author's loop
@pytest.mark.parametrize("size", ["30b", pytest.param("235b", marks=pytest.mark.slow)])
def test_the_full_model_has_the_published_parameter_count(size):
    from llmb.engines.torch.blocks import count_parameters  # a test may use llmb's internals
    from llmb.recipes.params import count_params

    arch = WORKLOAD.architecture(size)
    with torch.device("meta"):
        model = build(arch)
    counted = count_parameters(model)
    assert counted == count_params(arch).total == FULL_PARAMS[size]
    published = arch.published_params
    assert abs(counted - published) / published < 0.002  # 30.5B and 235B, as the model cards round
    # no shared expert, untied output layer, every layer MoE with 128 SwiGLU experts
    assert model.output is not None
    assert all(layer.kind == "E" for layer in model.layers)
    moe = model.layers[0][1].mixer
    assert isinstance(moe, RoutedMoE) and len(moe.experts) == 128 and moe.topk == 8
    assert moe.shared_expert is None


def test_attention_normalises_queries_and_keys_per_head():
    arch = small()
    model = build(arch)
    attention = model.layers[0][0].mixer
    assert isinstance(attention.q_norm, RMSNorm) and isinstance(attention.k_norm, RMSNorm)
    assert attention.q_norm.weight.shape == attention.k_norm.weight.shape == (arch.head_dim,)
    assert attention.q_norm.eps == 1e-6
    x = torch.randn(2, 12, arch.hidden)
    before = attention(x)
    q_rows = arch.heads * arch.head_dim
    k_rows = arch.query_groups * arch.head_dim
    with torch.no_grad():  # scale every query and key: a per-head norm undoes it
        attention.qkv_proj.weight[: q_rows + k_rows] *= 7.0
    torch.testing.assert_close(attention(x), before, rtol=1e-4, atol=1e-5)
    with torch.no_grad():  # values are not normalised: scaling them scales the output
        attention.qkv_proj.weight[q_rows + k_rows :] *= 2.0
    torch.testing.assert_close(attention(x), 2 * before, rtol=1e-4, atol=1e-5)


def test_routing_is_a_softmax_over_128_renormalised_over_the_top_8():
    torch.manual_seed(0)
    moe = build(small()).layers[0][1].mixer
    tokens = torch.randn(32, 64)
    weights, ids = moe.route(tokens)
    assert weights.shape == ids.shape == (32, 8)
    assert all(len(set(row.tolist())) == 8 for row in ids)
    probs = torch.softmax(moe.router(tokens).float(), dim=-1)  # Qwen3: softmax over all 128 experts
    top, expected_ids = probs.topk(8, dim=-1)
    assert torch.equal(ids, expected_ids)
    torch.testing.assert_close(weights, top / top.sum(-1, keepdim=True))  # norm_topk_prob


def test_the_small_model_trains_a_step():
    torch.manual_seed(0)
    model = build(small("235b"))
    ids = torch.randint(0, 128, (2, 16))
    loss = model(ids, ids.roll(-1, dims=1))
    loss.backward()
    assert torch.isfinite(loss)
    assert model.layers[0][0].mixer.q_norm.weight.grad is not None


def test_flops_are_megatron_bridges_count_for_qwen3():
    arch, s = WORKLOAD.architecture("30b"), 4096
    flops = qwen3_flops(arch, s)
    L, h, a, g, d = 48, 2048, 32, 4, 128
    attention = s * 12 * L * h * h * (1 + g / a + s / (2 * h)) * (a * d / h)
    mlp = s * 12 * L * h * (768 * 8 * 1.5)  # 8 routed experts a token, no shared expert
    embedding = s * 6 * h * 151936  # 151936 is already a multiple of 128
    assert flops.terms["attention"] == pytest.approx(attention)
    assert flops.terms["mlp"] == pytest.approx(mlp)
    assert flops.terms["embedding"] == pytest.approx(embedding)
    assert flops.per_sample == pytest.approx(attention + mlp + embedding)
    assert flops.per_sample == pytest.approx(9.4234e13, rel=1e-4)


def test_the_flops_count_reproduces_the_published_tflops():
    """Megatron-Bridge's performance summary prints tokens/s and model TFLOP/s per GPU for four of the
    recipe's configurations; the plugin's FLOPs per token turns the one into the other (within 1%)."""
    from importlib.resources import files

    import yaml

    summary = yaml.safe_load(
        files("llmb_plugin_qwen3").joinpath("performance_summary.yaml").read_text()
    )
    checked = 0
    for table in summary["tables"]:
        per_token = qwen3_flops(WORKLOAD.architecture(table["size"]), 4096).per_sample / 4096
        for row in table["rows"]:
            cells = dict(zip(table["columns"], row, strict=True))
            tflops = cells["Tokens / sec / GPU"] * per_token / 1e12
            assert tflops == pytest.approx(cells["Model TFLOP / sec / GPU"], rel=0.01), row
            checked += 1
    assert checked == 4
    referenced = {(r.size, r.gpu, r.dtype, r.gpus) for r in WORKLOAD.summary}
    assert referenced == {
        ("30b", "gb300", "fp8", 8),
        ("30b", "gb200", "fp8", 8),
        ("235b", "gb300", "fp8", 256),
        ("235b", "gb200", "fp8", 256),
    }


def test_tensor_parallelism_refuses_the_qk_norm_it_cannot_split_yet():
    from llmb import UsageError
    from llmb.engines.torch.parallel.tensor_parallel import check_tensor_parallel  # internal

    model = build(small())
    check_tensor_parallel(model, 1)
    with pytest.raises(UsageError, match="QK-norm"):
        check_tensor_parallel(model, 2)
