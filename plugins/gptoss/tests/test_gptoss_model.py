"""The torch engine's GPT-OSS against Hugging Face transformers' ``GptOssForCausalLM``: the same weights
give the same logits, loss and gradients; YaRN's frequencies, the clamped SwiGLU and the sliding
window as transformers computes them; the full models' parameter counts (on the meta device: no
memory) against the model card's; a small model trains."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from llmb import GroupedQueryAttention, RotaryEmbedding, RoutedMoE, load_workload
from llmb_plugin_gptoss.model import build
from transformers import GptOssConfig, GptOssForCausalLM
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

WORKLOAD = load_workload("llmb_plugin_gptoss")
# What llmb's parameter arithmetic (llmb.recipes.params) and the built model both give for the full
# architectures of OpenAI's config.json; the model card (arXiv:2508.10925, Table 1) prints 116.83B
# and 20.91B.
FULL_PARAMS = {"120b": 116_829_156_672, "20b": 20_914_757_184}

# The tiny model both implementations are built at: 4 layers (sliding, full, sliding, full), a
# window of 4 tokens in sequences of 12, 8 query heads of 16 in 2 KV groups, 8 experts of 32, top-2.
TINY = dict(layers=4, hidden=64, heads=8, query_groups=2, head_dim=16, experts=8, topk=2)
TINY_FFN, TINY_VOCAB, TINY_WINDOW, SEQ = 32, 128, 4, 12
# YaRN at the tiny size: base and original context chosen so that the ramp between extrapolated and
# interpolated pairs falls inside the 8 pairs (0.21 .. 3.22), at non-integer ends (truncate matters).
TINY_ROPE = dict(base=10_000.0, factor=4.0, original=256)


def tiny_arch():
    """The 120B's architecture at the tiny size (its structure: biases, sinks, YaRN, alternation)."""
    return replace(
        WORKLOAD.architecture("120b"),
        **TINY,
        ffn=TINY_FFN,
        moe_ffn=TINY_FFN,
        vocab=TINY_VOCAB,
        sliding_window=TINY_WINDOW,
        rope_base=TINY_ROPE["base"],
        rope_scaling_factor=TINY_ROPE["factor"],
        rope_original_positions=TINY_ROPE["original"],
    )


def hf_config(**overrides) -> GptOssConfig:
    """transformers' config of the tiny model, eager attention and eager experts (the reference loops)."""
    settings = dict(
        num_hidden_layers=TINY["layers"],
        hidden_size=TINY["hidden"],
        intermediate_size=TINY_FFN,
        num_attention_heads=TINY["heads"],
        num_key_value_heads=TINY["query_groups"],
        head_dim=TINY["head_dim"],
        num_local_experts=TINY["experts"],
        num_experts_per_tok=TINY["topk"],
        vocab_size=TINY_VOCAB,
        sliding_window=TINY_WINDOW,
        max_position_embeddings=int(TINY_ROPE["factor"] * TINY_ROPE["original"]),
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": TINY_ROPE["base"],
            "factor": TINY_ROPE["factor"],
            "original_max_position_embeddings": TINY_ROPE["original"],
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
        },
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        attention_bias=True,
        attn_implementation="eager",
        experts_implementation="eager",
    )
    return GptOssConfig(**{**settings, **overrides})


def randomize(model: torch.nn.Module, seed: int = 0) -> None:
    """Every parameter drawn afresh, large enough that the experts' clamp at +-7 bites, the sinks
    matter and every bias is nonzero; norms' scales near one."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if "norm" in name:
                p.copy_(1 + 0.1 * noise)
            elif name.endswith("experts.gate_up_proj"):
                p.copy_(1.5 * noise)  # RMS-normed inputs of 64 channels: pre-activations of ~12
            elif name.endswith("experts.down_proj"):
                p.copy_(0.02 * noise)
            elif name.endswith("sinks"):
                p.copy_(noise)
            else:
                p.copy_(0.1 * noise)


def weight_map(hf: GptOssForCausalLM, ours) -> list[tuple[torch.nn.Parameter, object]]:
    """``(our parameter, f)`` for every parameter of our model, ``f(get)`` making its value from
    transformers' tensors (``get(name)`` gives the parameter's data or its gradient).

    transformers keeps q, k and v apart (llmb fuses them, in that order), and each layer's experts
    stacked, ``gate_up_proj [E, hidden, 2 ffn]`` multiplying from the right with the gate's and the
    up's columns interleaved (gate 0, up 0, gate 1, ...), ``down_proj [E, ffn, hidden]``; llmb's
    ``nn.Linear``s hold ``[out, in]`` with the gate's rows first, then the up's.
    """
    pairs = [
        (ours.embedding.weight, lambda get: get("model.embed_tokens.weight")),
        (ours.final_norm.weight, lambda get: get("model.norm.weight")),
        (ours.output.weight, lambda get: get("lm_head.weight")),
    ]
    for i, layer in enumerate(ours.layers):
        attention, moe = layer[0].mixer, layer[1].mixer
        p = f"model.layers.{i}."
        qkv = [f"{p}self_attn.{x}_proj" for x in "qkv"]
        pairs += [
            (layer[0].norm.weight, lambda get, p=p: get(p + "input_layernorm.weight")),
            (layer[1].norm.weight, lambda get, p=p: get(p + "post_attention_layernorm.weight")),
            (
                attention.qkv_proj.weight,
                lambda get, n=qkv: torch.cat([get(x + ".weight") for x in n]),
            ),
            (attention.qkv_proj.bias, lambda get, n=qkv: torch.cat([get(x + ".bias") for x in n])),
            (attention.o_proj.weight, lambda get, p=p: get(p + "self_attn.o_proj.weight")),
            (attention.o_proj.bias, lambda get, p=p: get(p + "self_attn.o_proj.bias")),
            (attention.sinks, lambda get, p=p: get(p + "self_attn.sinks")),
            (moe.router.weight, lambda get, p=p: get(p + "mlp.router.weight")),
            (moe.router.bias, lambda get, p=p: get(p + "mlp.router.bias")),
        ]
        experts = p + "mlp.experts."
        for e, expert in enumerate(moe.experts):
            pairs += [
                (
                    expert.gate_up_proj.weight,
                    lambda get, x=experts, e=e: deinterleave(get(x + "gate_up_proj")[e], -1).T,
                ),
                (
                    expert.gate_up_proj.bias,
                    lambda get, x=experts, e=e: deinterleave(get(x + "gate_up_proj_bias")[e], -1),
                ),
                (expert.down_proj.weight, lambda get, x=experts, e=e: get(x + "down_proj")[e].T),
                (expert.down_proj.bias, lambda get, x=experts, e=e: get(x + "down_proj_bias")[e]),
            ]
    return pairs


def deinterleave(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Alternating gate, up, gate, up ... along ``dim`` -> all the gate's, then all the up's."""
    gate = t.index_select(dim, torch.arange(0, t.shape[dim], 2))
    up = t.index_select(dim, torch.arange(1, t.shape[dim], 2))
    return torch.cat((gate, up), dim=dim)


def twins(seed: int = 0):
    """transformers' tiny GPT-OSS with random weights, and llmb's with the same weights."""
    torch.manual_seed(seed)
    hf = GptOssForCausalLM(hf_config())
    randomize(hf, seed)
    ours = build(tiny_arch())
    mapping = weight_map(hf, ours)
    assert {id(p) for p, _ in mapping} == {id(p) for p in ours.parameters()}  # each mapped once
    assert len(mapping) == len(list(ours.parameters()))
    hf_params = dict(hf.named_parameters())
    with torch.no_grad():
        for param, value in mapping:
            param.copy_(value(lambda name: hf_params[name].data))
    return hf, ours, mapping


def test_logits_loss_and_gradients_match_transformers():
    hf, ours, mapping = twins()
    assert [layer[0].mixer.sliding_window for layer in ours.layers] == [TINY_WINDOW, 0] * 2
    assert hf.config.layer_types == ["sliding_attention", "full_attention"] * 2
    ids = torch.randint(0, TINY_VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))

    torch.testing.assert_close(ours(ids), hf(ids).logits, rtol=1e-5, atol=1e-5)

    # transformers' loss predicts token t + 1 from the tokens up to t over the first SEQ - 1 positions;
    # llmb's takes the targets as given: the same loss from the first SEQ - 1 tokens (a causal model).
    hf_loss = hf(ids, labels=ids).loss
    loss = ours(ids[:, :-1], ids[:, 1:])
    torch.testing.assert_close(loss, hf_loss, rtol=1e-5, atol=1e-6)
    hf_loss.backward()
    loss.backward()
    hf_params = dict(hf.named_parameters())
    for param, value in mapping:
        expected = value(lambda name: hf_params[name].grad)
        # float32 sums in another order (fused q|k|v, tokens grouped by expert): a few parts in a
        # million of each tensor's largest gradient (7e-6 at most here)
        scale = expected.abs().max().item()
        torch.testing.assert_close(param.grad, expected, rtol=1e-4, atol=2e-5 * scale)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p, _ in mapping[:3])
    assert ours.layers[0][0].mixer.sinks.grad.abs().sum() > 0


def test_yarn_frequencies_are_transformers_at_gpt_oss_settings():
    """OpenAI's config: rope_theta 150000, YaRN factor 32 over 4096 positions, beta_fast 32, beta_slow
    1, truncate false; transformers' attention factor 0.1 ln(32) + 1 scales cos and sin."""
    config = GptOssConfig()  # transformers' defaults are openai/gpt-oss-120b's config
    assert config.rope_parameters["truncate"] is False
    expected, attention_factor = ROPE_INIT_FUNCTIONS["yarn"](config, torch.device("cpu"))
    rope = RotaryEmbedding(
        64, base=150_000.0, scaling_factor=32.0, original_positions=4096, truncate=False
    )
    got = rope.inverse_frequencies(torch.device("cpu"), torch.float32)
    torch.testing.assert_close(got, expected)
    assert rope.yarn.attention_factor == pytest.approx(attention_factor)
    cos, sin = rope.angles(5000, torch.device("cpu"))
    angles = 4999 * expected
    torch.testing.assert_close(cos[-1, :32], attention_factor * angles.cos(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(sin[-1, 32:], attention_factor * angles.sin(), rtol=1e-4, atol=1e-4)
    # Hugging Face's default truncates the ramp's ends to whole pairs: other frequencies
    truncated = RotaryEmbedding(64, base=150_000.0, scaling_factor=32.0, original_positions=4096)
    assert not torch.allclose(
        truncated.inverse_frequencies(torch.device("cpu"), torch.float32), got
    )


def test_the_experts_clamped_swiglu_is_transformers():
    experts = GptOssExperts(hf_config())
    gate_up = 6 * torch.randn(16, 2 * TINY_FFN)  # well past the limit 7 on both sides
    assert (gate_up.abs() > 7).any()
    expert = RoutedMoE(64, 2, TINY_FFN, 1, bias=True, activation="swiglu_clamped").experts[0]
    assert (expert.alpha, expert.limit) == (1.702, 7.0)
    torch.testing.assert_close(
        expert.activate(deinterleave(gate_up, -1)), experts._apply_gate(gate_up)
    )


def test_routing_is_a_softmax_over_the_top_4_logits_with_the_router_bias():
    torch.manual_seed(0)
    moe = build(tiny_arch()).layers[0][1].mixer
    moe.topk = 4
    with torch.no_grad():
        moe.router.bias.normal_()
    tokens = torch.randn(32, 64)
    weights, ids = moe.route(tokens)
    logits = tokens @ moe.router.weight.T + moe.router.bias
    top, expected_ids = logits.topk(4, dim=-1)
    assert torch.equal(ids, expected_ids)
    torch.testing.assert_close(weights, torch.softmax(top, dim=-1))


def test_the_grouped_experts_path_is_the_per_expert_path(monkeypatch):
    """The GPU's path (two grouped products over the stacked experts, each expert's biases added to
    its own rows, the clamped activation between) gives the per-expert path's outputs and gradients;
    torch's grouped product computes it here on the CPU."""
    from llmb.engines.torch import kernels  # a test may use llmb's internals

    torch.manual_seed(0)
    moe = build(tiny_arch()).layers[0][1].mixer
    with torch.no_grad():
        for expert in moe.experts:
            expert.gate_up_proj.weight.mul_(40)  # pre-activations past the clamp at +-7
            expert.gate_up_proj.bias.normal_()
            expert.down_proj.bias.normal_()
    x = torch.randn(2, SEQ, 64)

    def run(grouped: bool):
        monkeypatch.setattr(kernels, "grouped_mm_usable", lambda *args: grouped)
        moe.zero_grad()
        out = moe(x)
        out.square().sum().backward()
        return out.detach(), {n: p.grad.clone() for n, p in moe.named_parameters()}

    (per_expert, per_expert_grads), (grouped, grouped_grads) = run(False), run(True)
    torch.testing.assert_close(grouped, per_expert, rtol=1e-5, atol=1e-5)
    for name, grad in per_expert_grads.items():
        scale = grad.abs().max().item()
        torch.testing.assert_close(
            grouped_grads[name], grad, rtol=1e-4, atol=1e-5 * scale, msg=name
        )
    assert per_expert_grads["experts.0.down_proj.bias"].abs().sum() > 0


def test_the_sliding_window_masks_what_lies_before_it():
    """A sliding layer's token t reads tokens t - 3 .. t (a window of 4, itself included): a change to
    token 0 changes outputs 0 .. 3 only; the full layer after it sees the change everywhere."""
    torch.manual_seed(0)
    model = build(tiny_arch())
    sliding, full = model.layers[0][0].mixer, model.layers[1][0].mixer
    assert (sliding.sliding_window, full.sliding_window) == (TINY_WINDOW, 0)
    x = torch.randn(1, SEQ, 64)
    changed = x.clone()
    changed[:, 0] += 1.0
    with torch.no_grad():
        moved = (sliding(changed) - sliding(x)).abs().amax(dim=-1)[0]
        assert (moved[:TINY_WINDOW] > 1e-4).all()
        assert torch.equal(moved[TINY_WINDOW:], torch.zeros(SEQ - TINY_WINDOW))
        assert ((full(changed) - full(x)).abs().amax(dim=-1)[0] > 1e-4).all()


def test_sinks_at_minus_infinity_are_plain_windowed_attention():
    """The explicit path with sinks, its sink logits pushed to -1e9, equals SDPA's windowed path."""
    torch.manual_seed(0)
    args = (64, 8, 2, 16)
    with_sinks = GroupedQueryAttention(*args, bias=True, sliding_window=5, sinks=True)
    plain = GroupedQueryAttention(*args, bias=True, sliding_window=5)
    plain.load_state_dict({k: v for k, v in with_sinks.state_dict().items() if k != "sinks"})
    x = torch.randn(2, SEQ, 64)
    with torch.no_grad():
        with_sinks.sinks.fill_(-1e9)
        torch.testing.assert_close(with_sinks(x), plain(x), rtol=1e-5, atol=1e-6)
        with_sinks.sinks.fill_(2.0)  # a strong sink takes weight from every token: smaller outputs
        assert not torch.allclose(with_sinks(x), plain(x))


# the 120B model's meta-device build takes several seconds: CI's, not the default of a plugin
# author's loop
@pytest.mark.parametrize("size", [pytest.param("120b", marks=pytest.mark.slow), "20b"])
def test_the_full_model_has_the_published_parameter_count(size):
    from llmb.engines.torch.blocks import count_parameters  # a test may use llmb's internals
    from llmb.recipes.params import count_params

    arch = WORKLOAD.architecture(size)
    with torch.device("meta"):
        model = build(arch)
    counted = count_parameters(model)
    assert counted == count_params(arch).total == FULL_PARAMS[size]
    assert abs(counted - arch.published_params) / arch.published_params < 0.001
    assert model.output is not None and all(layer.kind == "E" for layer in model.layers)
    windows = [layer[0].mixer.sliding_window for layer in model.layers]
    assert windows == [128, 0] * (arch.layers // 2)
    moe = model.layers[0][1].mixer
    assert len(moe.experts) == {"120b": 128, "20b": 32}[size] and moe.topk == 4
    assert moe.shared_expert is None and moe.router.bias is not None


def test_the_small_model_trains():
    torch.manual_seed(0)
    model = build(tiny_arch())
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    ids = torch.randint(0, TINY_VOCAB, (4, 16))
    losses = []
    for _ in range(8):
        optimizer.zero_grad()
        loss = model(ids, ids.roll(-1, dims=1))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0] - 0.5, losses
    assert F.cross_entropy(model(ids).flatten(0, 1), ids.roll(-1, 1).flatten()) < losses[0]


def test_tensor_parallelism_refuses_the_sinks_and_biases_it_cannot_split_yet():
    from llmb import UsageError
    from llmb.engines.torch.parallel.tensor_parallel import check_tensor_parallel  # internal

    model = build(tiny_arch())
    check_tensor_parallel(model, 1)
    with pytest.raises(UsageError, match="sinks"):
        check_tensor_parallel(model, 2)


def test_build_refuses_an_architecture_that_is_not_gpt_oss():
    with pytest.raises(ValueError, match="activation 'swiglu'"):
        build(replace(tiny_arch(), activation="swiglu"))  # plain SwiGLU experts: not GPT-OSS's
    with pytest.raises(ValueError, match="attention sinks"):
        build(replace(tiny_arch(), attention_sinks=False))
