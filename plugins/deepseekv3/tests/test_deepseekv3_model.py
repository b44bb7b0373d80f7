"""The torch engine's DeepSeek-V3 / Kimi-K2 model against Hugging Face transformers' ``DeepseekV3ForCausalLM``:
the same weights give the same logits, loss and gradients; plus the full models' parameter counts (on
the meta device), DeepSeekMoE's routing and a few training steps."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
import transformers
from llmb import LatentAttention, RoutedMoE, load_workload
from llmb.engines.torch.blocks import count_parameters  # a test may use llmb's internals
from llmb.recipes.params import count_params, mtp_params
from llmb_plugin_deepseekv3.model import build

DEEPSEEK = load_workload("llmb_plugin_deepseekv3")
KIMI = load_workload("llmb_plugin_deepseekv3", "kimik2.yaml")

# A tiny DeepSeek-V3: one dense layer then two MoE layers of 8 experts in 4 groups (top-2 groups, top-2
# experts), MLA with both low-rank paths, YaRN over a 256-token original context stretched 4 times (its
# ramp then spans pairs 0..2 of the 4: every regime of it is used).
TINY = dict(
    vocab=96,
    hidden=64,
    ffn=96,
    layers=3,
    dense_layers=1,
    heads=4,
    query_groups=4,
    q_lora_rank=32,
    kv_lora_rank=16,
    rope_head_dim=8,
    head_dim=24,  # 16 non-rotary + 8 rotary
    v_head_dim=16,
    experts=8,
    topk=2,
    moe_ffn=32,
    shared_expert_ffn=32,
    expert_groups=4,
    topk_groups=2,
    routed_scaling=2.5,
    rope_base=10_000.0,
    rope_scaling_factor=4.0,
    rope_original_positions=256,
)


def tiny_arch(**changes):
    return replace(DEEPSEEK.architecture("671b"), mtp_layers=0, **{**TINY, **changes})


def hf_config(arch, interleave: bool) -> transformers.DeepseekV3Config:
    """transformers' DeepseekV3Config of ``arch`` (eager attention, YaRN with mscale 1.0 / 1.0)."""
    return transformers.DeepseekV3Config(
        vocab_size=arch.vocab,
        hidden_size=arch.hidden,
        intermediate_size=arch.ffn,
        moe_intermediate_size=arch.moe_ffn,
        num_hidden_layers=arch.layers,
        num_attention_heads=arch.heads,
        num_key_value_heads=arch.heads,
        n_shared_experts=arch.shared_expert_ffn // arch.moe_ffn,
        n_routed_experts=arch.experts,
        routed_scaling_factor=arch.routed_scaling,
        kv_lora_rank=arch.kv_lora_rank,
        q_lora_rank=arch.q_lora_rank,
        qk_rope_head_dim=arch.rope_head_dim,
        qk_nope_head_dim=arch.head_dim - arch.rope_head_dim,
        v_head_dim=arch.v_head_dim,
        n_group=max(arch.expert_groups, 1),
        topk_group=max(arch.topk_groups, 1),
        num_experts_per_tok=arch.topk,
        first_k_dense_replace=arch.dense_layers,
        norm_topk_prob=True,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        max_position_embeddings=int(arch.rope_original_positions * arch.rope_scaling_factor),
        rope_interleave=interleave,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": arch.rope_base,
            "factor": arch.rope_scaling_factor,
            "original_max_position_embeddings": arch.rope_original_positions,
            "beta_fast": arch.rope_beta_fast,
            "beta_slow": arch.rope_beta_slow,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        attn_implementation="eager",
    )


def hf_model(arch, interleave: bool):
    """transformers' DeepseekV3ForCausalLM of ``arch`` in float32, random weights, nonzero correction
    biases (so that choosing experts and weighting them differ)."""
    torch.manual_seed(0)
    model = transformers.DeepseekV3ForCausalLM(hf_config(arch, interleave)).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0.0, 0.5 if "layernorm" in name or name.endswith("norm.weight") else 0.1)
            if "layernorm" in name or name.endswith("norm.weight"):
                p.add_(1.0)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.rand_like(b) * 0.2)
    return model


def rope_order(rope_dim: int, interleave: bool) -> torch.Tensor:
    """Which of transformers' rotary channels each of llmb's is: DeepSeek's interleaved layout rotates
    neighbours (2i, 2i+1), llmb's (and transformers' plain layout) channels i and i + rope_dim/2."""
    if not interleave:
        return torch.arange(rope_dim)
    return torch.cat((torch.arange(0, rope_dim, 2), torch.arange(1, rope_dim, 2)))


def to_llmb(arch, hf: dict[str, torch.Tensor], interleave: bool) -> dict[str, torch.Tensor]:
    """transformers' tensors (parameters, or their gradients) under llmb's parameter names, laid out as
    llmb's model holds them."""
    nope, rope = arch.head_dim - arch.rope_head_dim, arch.rope_head_dim
    order = rope_order(rope, interleave)
    query_rows = torch.cat((torch.arange(nope), nope + order))
    query_rows = torch.cat([h * arch.head_dim + query_rows for h in range(arch.heads)])
    kv_a_rows = torch.cat((torch.arange(arch.kv_lora_rank), arch.kv_lora_rank + order))
    out = {
        "embedding.weight": hf["model.embed_tokens.weight"],
        "final_norm.weight": hf["model.norm.weight"],
        "output.weight": hf["lm_head.weight"],
    }
    for i in range(arch.layers):
        src, dst = f"model.layers.{i}.", f"layers.{i}."
        attn, mlp = dst + "0.mixer.", dst + "1.mixer."
        out[dst + "0.norm.weight"] = hf[src + "input_layernorm.weight"]
        out[dst + "1.norm.weight"] = hf[src + "post_attention_layernorm.weight"]
        out[attn + "q_a_proj.weight"] = hf[src + "self_attn.q_a_proj.weight"]
        out[attn + "q_a_norm.weight"] = hf[src + "self_attn.q_a_layernorm.weight"]
        out[attn + "q_b_proj.weight"] = hf[src + "self_attn.q_b_proj.weight"][query_rows]
        out[attn + "kv_a_proj.weight"] = hf[src + "self_attn.kv_a_proj_with_mqa.weight"][kv_a_rows]
        out[attn + "kv_a_norm.weight"] = hf[src + "self_attn.kv_a_layernorm.weight"]
        out[attn + "kv_b_proj.weight"] = hf[src + "self_attn.kv_b_proj.weight"]
        out[attn + "o_proj.weight"] = hf[src + "self_attn.o_proj.weight"]
        if i < arch.dense_layers:
            gate_up = torch.cat((hf[src + "mlp.gate_proj.weight"], hf[src + "mlp.up_proj.weight"]))
            out[mlp + "gate_up_proj.weight"] = gate_up
            out[mlp + "down_proj.weight"] = hf[src + "mlp.down_proj.weight"]
            continue
        out[mlp + "router.weight"] = hf[src + "mlp.gate.weight"]
        for e in range(arch.experts):  # transformers stacks the experts, gate rows before up rows
            out[mlp + f"experts.{e}.gate_up_proj.weight"] = hf[src + "mlp.experts.gate_up_proj"][e]
            out[mlp + f"experts.{e}.down_proj.weight"] = hf[src + "mlp.experts.down_proj"][e]
        shared = src + "mlp.shared_experts."
        gate_up = torch.cat((hf[shared + "gate_proj.weight"], hf[shared + "up_proj.weight"]))
        out[mlp + "shared_expert.gate_up_proj.weight"] = gate_up
        out[mlp + "shared_expert.down_proj.weight"] = hf[shared + "down_proj.weight"]
    return out


def correction_biases(arch, hf_model) -> dict[str, torch.Tensor]:
    return {
        f"layers.{i}.1.mixer.router.score_correction_bias": hf_model.get_buffer(
            f"model.layers.{i}.mlp.gate.e_score_correction_bias"
        )
        for i in range(arch.dense_layers, arch.layers)
    }


def loaded_pair(interleave: bool):
    arch = tiny_arch()
    hf = hf_model(arch, interleave)
    ours = build(arch)
    weights = to_llmb(arch, dict(hf.named_parameters()), interleave)
    state = {**weights, **correction_biases(arch, hf)}
    assert set(state) == set(ours.state_dict()), "every llmb tensor is mapped, and only those"
    ours.load_state_dict({k: v.detach().clone() for k, v in state.items()})
    return arch, hf, ours


@pytest.mark.parametrize("interleave", [True, False], ids=["interleaved-rope", "half-split-rope"])
def test_logits_loss_and_gradients_equal_transformers(interleave):
    arch, hf, ours = loaded_pair(interleave)
    torch.manual_seed(1)
    ids = torch.randint(0, arch.vocab, (2, 21))
    inputs, targets = ids[:, :-1], ids[:, 1:]

    hf_logits = hf(input_ids=inputs).logits
    torch.testing.assert_close(ours(inputs), hf_logits, rtol=1e-4, atol=1e-5)

    hf_loss = F.cross_entropy(hf_logits.reshape(-1, arch.vocab), targets.reshape(-1))
    our_loss = ours(inputs, targets)
    torch.testing.assert_close(our_loss, hf_loss, rtol=1e-5, atol=1e-6)

    hf_loss.backward()
    our_loss.backward()
    hf_grads = {
        n: p.grad if p.grad is not None else torch.zeros_like(p) for n, p in hf.named_parameters()
    }
    expected = to_llmb(arch, hf_grads, interleave)
    got = dict(ours.named_parameters())
    assert set(expected) == set(got)
    for name, grad in expected.items():
        torch.testing.assert_close(got[name].grad, grad, rtol=1e-4, atol=1e-6, msg=name)


def test_the_softmax_and_rope_follow_yarn_as_deepseek_configures_it():
    yarn_mscale = LatentAttention.yarn_mscale
    arch = tiny_arch()
    attention = build(arch).layers[0][0].mixer
    assert isinstance(attention, LatentAttention)
    # DeepSeek's correction: (0.1 ln(factor) + 1)^2 on 1/sqrt(head_dim); cos/sin unscaled (mscale 1/1)
    assert attention.scale == pytest.approx(
        (0.1 * torch.log(torch.tensor(4.0)).item() + 1) ** 2 / 24**0.5
    )
    assert yarn_mscale(40.0) == pytest.approx(1.368888, rel=1e-6)
    assert attention.rope.yarn.attention_factor == 1.0
    full = DEEPSEEK.architecture("671b")
    with torch.device("meta"):
        big = build(replace(full, layers=1, dense_layers=1)).layers[0][0].mixer
    assert big.scale == pytest.approx(yarn_mscale(40.0) ** 2 / 192**0.5)


def test_routing_is_sigmoid_grouped_corrected_renormalised_and_scaled():
    torch.manual_seed(0)
    moe = RoutedMoE(
        16, 8, 8, 2, shared_ffn=8, score="sigmoid", score_correction=True, expert_groups=4,
        topk_groups=2, normalize=True, scaling=2.5,
    )  # fmt: skip
    tokens = torch.randn(64, 16)
    bias = moe.router.score_correction_bias
    assert bias.dtype == torch.float32 and not bias.requires_grad and torch.all(bias == 0)
    assert "router.score_correction_bias" in dict(moe.named_buffers())
    weights, ids = moe.route(tokens)
    scores = torch.sigmoid(moe.router(tokens))
    # the weights are the chosen scores, summing to the scaling factor
    torch.testing.assert_close(weights.sum(-1), torch.full((64,), 2.5))
    torch.testing.assert_close(
        weights / 2.5, scores.gather(-1, ids) / scores.gather(-1, ids).sum(-1, keepdim=True)
    )
    # each token's experts lie in its two best groups, a group scored by its two best experts (all of them, here)
    group_scores = scores.view(64, 4, 2).sum(-1)
    best = group_scores.topk(2, dim=-1).indices
    assert torch.all((ids // 2).unsqueeze(-1).eq(best.unsqueeze(1)).any(-1))
    # a large correction bias on expert 5 makes every token choose it, without changing its weight
    with torch.no_grad():
        bias[5] = 10.0
    weights, ids = moe.route(tokens)
    assert torch.all((ids == 5).any(-1))
    chosen = scores.gather(-1, ids)
    torch.testing.assert_close(weights, 2.5 * chosen / chosen.sum(-1, keepdim=True))


def test_plain_routing_is_unchanged_by_the_new_options():
    """Qwen3's and Llama 4's routing (no DeepSeekMoE option) keep the top-k of the logits."""
    torch.manual_seed(0)
    moe = RoutedMoE(16, 8, 8, 2, score="sigmoid")
    assert not moe.scores_all and type(moe.router) is torch.nn.Linear
    tokens = torch.randn(32, 16)
    weights, ids = moe.route(tokens)
    top, top_ids = moe.router(tokens).topk(2, dim=-1)
    assert torch.equal(ids, top_ids)
    torch.testing.assert_close(weights, torch.sigmoid(top))


@pytest.mark.parametrize(
    "workload, size, params, mtp",
    [
        # 671,026,404,352: the technical report's 671B main model; MTP adds 11.6B (685B on the model
        # card also counts the MTP module's own copy of the embedding and output layer)
        (DEEPSEEK, "671b", 671_026_404_352, 11_610_067_968),
        (KIMI, "1t", 1_026_408_209_408, 0),
    ],
    ids=["deepseek-v3", "kimi-k2"],
)
def test_the_full_model_has_the_published_parameter_count(workload, size, params, mtp):
    arch = workload.architecture(size)
    with torch.device("meta"):
        model = build(arch)
    assert count_parameters(model) == count_params(arch).total == params
    assert mtp_params(arch) == mtp
    with torch.device(
        "meta"
    ):  # transformers' model of the same config (its MTP layer is not built)
        reference = transformers.DeepseekV3ForCausalLM(hf_config(arch, interleave=True))
    assert sum(p.numel() for p in reference.parameters()) == params
    assert abs(params - arch.published_params) / arch.published_params < 0.03  # 671B, "1T"
    assert [layer.kind for layer in model.layers] == ["A"] * arch.dense_layers + ["E"] * (
        arch.layers - arch.dense_layers
    )
    moe = model.layers[-1][1].mixer
    assert len(moe.experts) == arch.experts and moe.topk == 8 and moe.shared_expert is not None
    assert moe.scaling == arch.routed_scaling and moe.normalize


def test_kimi_k2_is_not_grouped_and_uses_its_rope():
    arch = replace(KIMI.architecture("1t"), layers=2)
    with torch.device("meta"):
        model = build(arch)
    moe, attention = model.layers[1][1].mixer, model.layers[0][0].mixer
    assert moe.expert_groups in (0, 1) and moe.scaling == pytest.approx(2.827)
    yarn = attention.rope.yarn  # config.json rope_scaling: factor 32, beta_fast 1, beta_slow 1
    assert attention.rope.base == 50_000 and yarn.factor == 32
    assert (yarn.beta_fast, yarn.beta_slow, yarn.original_positions) == (1.0, 1.0, 4096)
    assert attention.heads == 64


def test_a_small_model_trains():
    torch.manual_seed(0)
    arch = tiny_arch()
    model = build(arch)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    ids = torch.randint(0, arch.vocab, (4, 33))
    losses = []
    for _ in range(8):
        optimizer.zero_grad()
        loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0] - 0.5, losses
    assert torch.all(
        model.layers[1][1].mixer.router.score_correction_bias == 0
    )  # no gradient moves it
