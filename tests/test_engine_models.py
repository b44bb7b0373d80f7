"""The torch engine's models: real torch on CPU, no mocks.

Full-size models are built on the meta device through the plugin host and
counted against ``llmb.recipes.params`` and the published figures; the tiny proxies
run forward and backward; the blocks are checked against references written
here from the math (causality, the chunked Mamba2 scan against a step-by-step
recurrence, GQA against explicitly repeated KV heads, MoE routing, RoPE,
LayerNorm1p).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from llmb.engines.torch import blocks
from llmb.plugins.host import PluginHost
from llmb.recipes.params import count_params
from llmb.recipes.proxies import shrink

WORKLOADS = ("llama31", "llama4", "nemotron4", "nemotronh")


def _sizes() -> list[tuple[str, str]]:
    host = PluginHost()
    return [(name, size) for name in WORKLOADS for size in host.workload(name).architectures]


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


# --------------------------------------------------------------------------
# Whole models


@pytest.mark.parametrize(("name", "size"), _sizes())
def test_full_size_parameter_count(host, name, size):
    workload = host.workload(name)
    arch = workload.architecture(size)
    with torch.device("meta"):
        model = host.build_model(workload, arch)
    assert all(p.is_meta for p in model.parameters())
    counted = blocks.count_parameters(model)
    assert counted == count_params(arch).total, (name, size)
    if name == "llama31" and size == "8b":
        assert counted == 8_030_261_248
    # as tests/test_params.py::test_counts_match_published_figures
    if arch.published_params is not None:
        published = arch.published_params
        digits = len(f"{published:.0f}".rstrip("0"))
        half_unit = 0.5 * 10 ** (len(f"{published:.0f}") - digits)
        assert abs(counted - published) <= max(0.005 * published, half_unit), (
            name,
            size,
            counted,
            published,
        )


def test_layer_parameters_match_params_by_kind(host):
    """Layer by layer, not only in total: each kind's module has params.py's count."""
    for name in WORKLOADS:
        workload = host.workload(name)
        for arch in workload.architectures.values():
            small = arch.with_layers(min(arch.layers, 8))
            with torch.device("meta"):
                model = host.build_model(workload, small)
            expected = count_params(small)
            assert [layer.kind for layer in model.layers] == list(small.layer_kinds())
            assert [blocks.count_parameters(layer) for layer in model.layers] == [
                l.total for l in expected.layers
            ]
            assert blocks.count_parameters(model.embedding) == expected.embedding
            assert blocks.count_parameters(model.final_norm) == expected.final_norm


@pytest.mark.parametrize("name", WORKLOADS)
def test_tiny_proxy_runs_forward_and_backward(host, name):
    workload = host.workload(name)
    arch = shrink(workload.architecture(workload.sizes()[0]), "tiny")
    model = host.build_model(workload, arch)
    assert blocks.count_parameters(model) == count_params(arch).total
    tokens = torch.randint(0, arch.vocab, (2, 128))

    # Behaviour only: how fast it runs is benchmarks/engine_throughput.py's business, never a test's.
    logits = model(tokens)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, arch.vocab), tokens[:, 1:].reshape(-1))
    loss.backward()
    assert logits.shape == (2, 128, arch.vocab)
    assert logits.dtype == torch.get_default_dtype()
    assert torch.isfinite(logits).all()
    assert math.isfinite(loss.item())
    # routed experts included, even one that received no token
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname


@pytest.mark.parametrize("name", WORKLOADS)
def test_tiny_proxy_is_causal(host, name):
    """Changing a later token changes no earlier logit (attention, Mamba2, MoE alike)."""
    workload = host.workload(name)
    arch = shrink(workload.architecture(workload.sizes()[0]), "tiny")
    model = host.build_model(workload, arch).eval()
    tokens = torch.randint(0, arch.vocab, (1, 80))
    changed = tokens.clone()
    changed[0, 50:] = (changed[0, 50:] + 1) % arch.vocab
    with torch.no_grad():
        before, after = model(tokens), model(changed)
    torch.testing.assert_close(after[:, :50], before[:, :50], rtol=0, atol=1e-5)
    assert not torch.allclose(after[:, 50:], before[:, 50:])


def test_meta_model_materialises_and_initialises(host):
    """The engine's path: build on meta, ``to_empty`` on a device, ``initialize``."""
    workload = host.workload("nemotronh")
    arch = shrink(workload.architecture("56b"), "tiny")
    with torch.device("meta"):
        model = host.build_model(workload, arch)
    model = blocks.initialize(model.to_empty(device="cpu"))
    mixer = next(m for m in model.modules() if isinstance(m, blocks.Mamba2Mixer))
    assert torch.all(mixer.D == 1) and torch.all(-torch.exp(mixer.A_log) <= -1)
    assert torch.all(model.final_norm.weight == 1)
    logits = model(torch.randint(0, arch.vocab, (2, 64)))
    assert torch.isfinite(logits).all()


def test_tied_embeddings_share_the_matrix(host):
    from dataclasses import replace

    workload = host.workload("llama31")
    arch = replace(shrink(workload.architecture("8b"), "tiny"), tied_embeddings=True)
    model = host.build_model(workload, arch)
    assert model.output is None
    assert blocks.count_parameters(model) == count_params(arch).total
    x = torch.randint(0, arch.vocab, (1, 8))
    hidden = model.embedding(x)
    for layer in model.layers:
        hidden = layer(hidden)
    hidden = model.final_norm(hidden)
    torch.testing.assert_close(model(x), hidden @ model.embedding.weight.T)


# --------------------------------------------------------------------------
# Attention and RoPE


def _reference_gqa(attn: blocks.GroupedQueryAttention, x: torch.Tensor) -> torch.Tensor:
    """Attention with the KV heads explicitly repeated and the softmax written out."""
    b, s, _ = x.shape
    h, g, d = attn.heads, attn.query_groups, attn.head_dim
    # the fused projection: q, k, v end to end
    wq, wk, wv = attn.qkv_proj.weight.split([h * d, g * d, g * d])
    q = (x @ wq.T).view(b, s, h, d).transpose(1, 2)
    k = (x @ wk.T).view(b, s, g, d).transpose(1, 2)
    v = (x @ wv.T).view(b, s, g, d).transpose(1, 2)
    if attn.rope is not None:
        q, k = attn.rope(q, k)
    k = k.repeat_interleave(h // g, dim=1)  # query head i reads KV head i // (h/g)
    v = v.repeat_interleave(h // g, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    out = scores.softmax(dim=-1) @ v
    return out.transpose(1, 2).reshape(b, s, h * d) @ attn.o_proj.weight.T


@pytest.mark.parametrize(("heads", "groups", "rope"), [(8, 2, True), (6, 1, False), (4, 4, True)])
def test_gqa_equals_repeated_kv_reference(heads, groups, rope):
    head_dim = 8
    attn = blocks.GroupedQueryAttention(
        32,
        heads,
        groups,
        head_dim,
        rope=blocks.RotaryEmbedding(head_dim, base=10_000.0) if rope else None,
    )
    x = torch.randn(2, 12, 32)
    torch.testing.assert_close(attn(x), _reference_gqa(attn, x), rtol=1e-4, atol=1e-5)


def test_attention_is_causal():
    attn = blocks.GroupedQueryAttention(32, 4, 2, 8, rope=blocks.RotaryEmbedding(8, base=500_000.0))
    x = torch.randn(1, 20, 32)
    changed = x.clone()
    changed[:, 12:] = torch.randn(1, 8, 32)
    torch.testing.assert_close(attn(changed)[:, :12], attn(x)[:, :12], rtol=0, atol=1e-6)
    assert not torch.allclose(attn(changed)[:, 12:], attn(x)[:, 12:])


def test_rope_rotates_only_the_requested_fraction():
    rope = blocks.RotaryEmbedding(16, base=10_000.0, fraction=0.5)
    assert rope.rotary_dim == 8
    q, k = torch.randn(1, 2, 10, 16), torch.randn(1, 2, 10, 16)
    rq, rk = rope(q, k)
    # the second half passes through
    torch.testing.assert_close(rq[..., 8:], q[..., 8:], rtol=0, atol=0)
    torch.testing.assert_close(rk[..., 8:], k[..., 8:], rtol=0, atol=0)
    torch.testing.assert_close(rq[..., 0, :], q[..., 0, :])  # position 0: angle 0
    assert not torch.allclose(rq[..., 1:, :8], q[..., 1:, :8])
    # a rotation: each pair (i, i + 4) of the rotated part keeps its length
    pairs = lambda t: t[..., :4].square() + t[..., 4:8].square()  # noqa: E731
    torch.testing.assert_close(pairs(rq), pairs(q))


def test_rope_scores_depend_only_on_relative_position():
    rope = blocks.RotaryEmbedding(16, base=10_000.0, fraction=0.5)
    q = torch.randn(16).expand(1, 1, 12, 16)  # the same query and key at every position
    k = torch.randn(16).expand(1, 1, 12, 16)
    rq, rk = rope(q, k)
    scores = (rq @ rk.transpose(-1, -2))[0, 0]
    for offset in range(-3, 4):
        diagonal = scores.diagonal(offset)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal), rtol=1e-4, atol=1e-4)
    full = blocks.RotaryEmbedding(16, base=10_000.0)
    assert full.rotary_dim == 16


# --------------------------------------------------------------------------
# Norms and MLPs


def test_layernorm1p_at_zero_weight_is_plain_layernorm():
    norm = blocks.LayerNorm1p(24)
    x = torch.randn(3, 5, 24) * 3 + 1
    torch.testing.assert_close(norm(x), F.layer_norm(x, (24,), eps=1e-5))
    torch.testing.assert_close(norm(x), torch.nn.LayerNorm(24)(x))
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    torch.testing.assert_close(
        norm(x), F.layer_norm(x, (24,), 1 + norm.weight, norm.bias, eps=1e-5)
    )
    assert blocks.count_parameters(norm) == 48


def test_rmsnorm_normalises_by_the_root_mean_square():
    norm = blocks.RMSNorm(16)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 2.0)
    x = torch.randn(4, 16)
    expected = x / x.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt() * norm.weight
    torch.testing.assert_close(norm(x), expected)


def test_mlps():
    swiglu, relu2 = blocks.SwiGLU(8, 20), blocks.SquaredReLUMLP(8, 20)
    assert (
        blocks.count_parameters(swiglu) == 3 * 8 * 20
        and blocks.count_parameters(relu2) == 2 * 8 * 20
    )
    x = torch.randn(5, 8)
    gate, up = swiglu.gate_up_proj.weight.chunk(2)  # the fused projection: gate rows, then up rows
    a = x @ gate.T
    torch.testing.assert_close(
        swiglu(x), (a * torch.sigmoid(a) * (x @ up.T)) @ swiglu.down_proj.weight.T
    )
    torch.testing.assert_close(
        relu2(x), (x @ relu2.up_proj.weight.T).clamp(min=0) ** 2 @ relu2.down_proj.weight.T
    )


# --------------------------------------------------------------------------
# Mixture of experts


def _dense_moe_reference(moe: blocks.RoutedMoE, x: torch.Tensor) -> torch.Tensor:
    """Every expert on every token, then keep each token's top-k by hand."""
    tokens = x.reshape(-1, moe.hidden)
    logits = tokens @ moe.router.weight.T
    top, ids = logits.topk(moe.topk, dim=-1)
    weights = torch.sigmoid(top) if moe.score == "sigmoid" else top.softmax(-1)
    out = torch.zeros_like(tokens)
    for t in range(tokens.shape[0]):
        for j in range(moe.topk):
            expert = moe.experts[int(ids[t, j])]
            if moe.weight_inputs:
                out[t] += expert(tokens[t] * weights[t, j])
            else:
                out[t] += weights[t, j] * expert(tokens[t])
    if moe.shared_expert is not None:
        out += moe.shared_expert(tokens)
    return out.view_as(x)


def test_moe_top1_sends_each_token_to_exactly_one_routed_expert():
    moe = blocks.RoutedMoE(
        16, experts=6, moe_ffn=24, topk=1, shared_ffn=20, score="sigmoid", weight_inputs=True
    )
    x = torch.randn(3, 10, 16)
    received = []
    for expert in moe.experts:
        expert.register_forward_hook(lambda module, args, out: received.append(args[0].shape[0]))
    out = moe(x)
    assert len(received) == 6  # every expert runs, on an empty batch when it received no token
    assert sum(received) == 30  # every token once, to one routed expert
    assert sum(n > 0 for n in received) >= 2  # and the tokens really are spread over experts
    torch.testing.assert_close(out, _dense_moe_reference(moe, x), rtol=1e-4, atol=1e-5)

    # zero all routed experts but one: only the tokens routed to it change from the shared expert's output
    _, ids = moe.route(x.reshape(-1, 16))
    chosen = int(ids[0, 0])
    with torch.no_grad():
        for i, expert in enumerate(moe.experts):
            if i != chosen:
                expert.down_proj.weight.zero_()
        shared_only = moe.shared_expert(x).reshape(-1, 16)
        differs = (moe(x).reshape(-1, 16) - shared_only).abs().amax(-1) > 0
    assert torch.equal(differs, ids[:, 0] == chosen)


def test_moe_topk_softmax_matches_dense_reference():
    moe = blocks.RoutedMoE(12, experts=5, moe_ffn=16, topk=2)
    x = torch.randn(2, 7, 12)
    torch.testing.assert_close(moe(x), _dense_moe_reference(moe, x), rtol=1e-4, atol=1e-5)
    expected = 12 * 5 + 5 * 3 * 12 * 16
    assert blocks.count_parameters(moe) == expected


# --------------------------------------------------------------------------
# Mamba2


def _naive_ssd(x, dt, A, B, C, state=None):
    """The recurrence, one step at a time: H = exp(dt A) H + dt x B^T, y = H C."""
    b, s, h, p = x.shape
    g, n = B.shape[-2:]
    head_group = torch.arange(h) // (h // g)
    H = torch.zeros(b, h, p, n, dtype=x.dtype) if state is None else state.clone()
    ys = []
    for t in range(s):
        Bt, Ct = B[:, t, head_group], C[:, t, head_group]  # [b, h, n]
        decay = torch.exp(dt[:, t] * A)  # [b, h]
        H = (
            decay[..., None, None] * H
            + (dt[:, t, :, None] * x[:, t])[..., None] * Bt[:, :, None, :]
        )
        ys.append(torch.einsum("bhpn,bhn->bhp", H, Ct))
    return torch.stack(ys, dim=1), H


def _ssd_inputs(b=2, s=40, h=4, p=3, g=2, n=5, dtype=torch.float64):
    x = torch.randn(b, s, h, p, dtype=dtype)
    dt = F.softplus(torch.randn(b, s, h, dtype=dtype) - 1)
    A = -torch.rand(h, dtype=dtype).mul(4).add(0.5)
    B = torch.randn(b, s, g, n, dtype=dtype)
    C = torch.randn(b, s, g, n, dtype=dtype)
    return x, dt, A, B, C


@pytest.mark.parametrize(("seq", "chunk"), [(40, 8), (37, 8), (5, 8), (33, 16), (24, 1)])
def test_chunked_scan_equals_step_by_step_recurrence(seq, chunk):
    x, dt, A, B, C = _ssd_inputs(s=seq)
    y, final = blocks.ssd_scan(x, dt, A, B, C, chunk)
    y_ref, final_ref = _naive_ssd(x, dt, A, B, C)
    assert y.shape == x.shape
    torch.testing.assert_close(y, y_ref, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(final, final_ref, rtol=1e-9, atol=1e-9)


def test_chunked_scan_continues_from_an_initial_state():
    x, dt, A, B, C = _ssd_inputs(s=30)
    full, _ = blocks.ssd_scan(x, dt, A, B, C, 8)
    first, state = blocks.ssd_scan(x[:, :13], dt[:, :13], A, B[:, :13], C[:, :13], 8)
    second, _ = blocks.ssd_scan(
        x[:, 13:], dt[:, 13:], A, B[:, 13:], C[:, 13:], 8, initial_state=state
    )
    torch.testing.assert_close(torch.cat((first, second), dim=1), full, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("length", [1, 2, 3, 7, 8, 37, 256])
def test_shifted_prefix_sum_is_the_cumulative_sum(length):
    values = torch.randn(3, 2, length, dtype=torch.float64)
    shifted = blocks._shifted_prefix_sum(values)
    torch.testing.assert_close(shifted, values.cumsum(-1), rtol=1e-12, atol=1e-12)
    wide = torch.randn(4, length) * 3  # float32: the same sums up to float rounding
    torch.testing.assert_close(
        blocks._shifted_prefix_sum(wide), wide.cumsum(-1), rtol=1e-5, atol=1e-5
    )


def _cumsum_scan(monkeypatch) -> None:
    """ssd_scan with torch.cumsum compiled too (as it was written before the shifted additions)."""
    monkeypatch.setattr(blocks, "_prefix_sum", lambda values: values.cumsum(dim=-1))


def test_scan_in_float32_with_shifted_additions_equals_its_cumsum_formulation(monkeypatch):
    x, dt, A, B, C = _ssd_inputs(s=70, dtype=torch.float32)
    y_cumsum, final_cumsum = blocks.ssd_scan(x, dt, A, B, C, 32)  # eager: torch.cumsum
    monkeypatch.setattr(
        blocks, "_prefix_sum", blocks._shifted_prefix_sum
    )  # what compiled code runs
    y, final = blocks.ssd_scan(x, dt, A, B, C, 32)
    torch.testing.assert_close(y, y_cumsum, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(final, final_cumsum, rtol=1e-5, atol=1e-5)


_CUMULATIVE_OPS = ("cumsum", "cumprod", "logcumsumexp", "cummax", "cummin", "scan")


def _scan_graph_ops(inputs: tuple, chunk: int) -> dict[str, set[str]]:
    """The operators of the forward and backward graphs that torch.compile hands its compiler for
    ``ssd_scan`` (captured by a backend that keeps AOTAutograd's graphs and runs them as they are)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = {}

    def keep(kind):
        def compiler(graph, example_inputs):
            graphs[kind] = graph
            return make_boxed_func(graph.forward)

        return compiler

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward"))
    scan = torch.compile(lambda *a: blocks.ssd_scan(*a, chunk), backend=backend, fullgraph=True)
    y, final = scan(*inputs)
    (y.sum() + final.sum()).backward()
    torch._dynamo.reset()
    return {
        kind: {str(node.target) for node in graph.graph.nodes if node.op == "call_function"}
        for kind, graph in graphs.items()
    }


def _scan_leaves(b, s, h, p, g, n, device="cpu"):
    return tuple(
        t.requires_grad_()
        for t in (
            torch.randn(b, s, h, p, device=device),
            F.softplus(torch.randn(b, s, h, device=device) - 1),
            -torch.rand(h, device=device).add(0.5),
            torch.randn(b, s, g, n, device=device),
            torch.randn(b, s, g, n, device=device),
        )
    )


def test_compiled_scan_graphs_hold_no_cumulative_sum(monkeypatch):
    """Inductor's GPU lowering of a cumsum over the chunk's steps (its split scan) failed to generate
    code at Nemotron-H 56B's shapes on torch 2.11, so a compiled Mamba2 layer could not run: the graphs
    torch.compile builds of the scan, forward and backward, hold no cumulative operator at all. At
    Nemotron-H 56B's layout (256 heads of 64, 8 groups of state 256, chunk 256, 8192 steps: 32 chunks),
    traced on the meta device; and the check does find the cumsum of the old formulation. (Run
    eagerly, the scan does use torch.cumsum, the faster there.)"""
    nemotronh_56b = _scan_leaves(1, 8192, 256, 64, 8, 256, device="meta")
    for kind, ops in _scan_graph_ops(nemotronh_56b, 256).items():
        assert not [op for op in ops if any(c in op for c in _CUMULATIVE_OPS)], (kind, sorted(ops))
    _cumsum_scan(monkeypatch)
    old = _scan_graph_ops(_scan_leaves(1, 12, 4, 3, 2, 5), 4)
    assert {kind for kind, ops in old.items() if "aten.cumsum.default" in ops} == {
        "forward",
        "backward",
    }


def test_scan_compiled_by_inductor_matches_eager():
    """torch.compile's default compiler (Inductor, here for the CPU) runs the scan (with its shifted
    additions), forward and backward, with the eager scan's values (torch.cumsum); the sequence is not
    a multiple of the chunk."""
    torch._dynamo.reset()
    inputs = _scan_leaves(2, 11, 4, 3, 2, 5)
    compiled = torch.compile(lambda *a: blocks.ssd_scan(*a, 4), fullgraph=True)
    y, final = compiled(*inputs)
    got = torch.autograd.grad(y.square().sum() + final.sum(), inputs)
    y_eager, final_eager = blocks.ssd_scan(*inputs, 4)
    want = torch.autograd.grad(y_eager.square().sum() + final_eager.sum(), inputs)
    torch._dynamo.reset()
    torch.testing.assert_close(y, y_eager, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(final, final_eager, rtol=1e-5, atol=1e-5)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


def _mixer() -> blocks.Mamba2Mixer:
    return blocks.Mamba2Mixer(
        hidden=24, heads=4, head_dim=8, state=6, groups=2, conv_kernel=4, chunk=8
    )


def test_mamba2_mixer_parameters_match_params(host):
    from dataclasses import replace

    from llmb.recipes.params import mamba_params

    mixer = _mixer()
    arch = replace(
        shrink(host.workload("nemotronh").architecture("56b"), "tiny"),
        hidden=24,
        mamba_heads=4,
        mamba_head_dim=8,
        mamba_state=6,
        mamba_groups=2,
        mamba_conv_kernel=4,
    )
    assert blocks.count_parameters(mixer) + 24 == mamba_params(arch)  # + the layer's RMSNorm


def test_mamba2_mixer_is_causal_and_chunk_size_free():
    mixer = _mixer().double()
    x = torch.randn(2, 29, 24, dtype=torch.float64)  # not a multiple of the chunk
    out = mixer(x)
    changed = x.clone()
    changed[:, 17:] = torch.randn(2, 12, 24, dtype=torch.float64)
    after = mixer(changed)
    torch.testing.assert_close(after[:, :17], out[:, :17], rtol=0, atol=1e-12)
    assert not torch.allclose(after[:, 17:], out[:, 17:])
    for chunk in (1, 5, 64):  # the chunking is an implementation detail
        mixer.chunk = chunk
        torch.testing.assert_close(mixer(x), out, rtol=1e-9, atol=1e-9)


def test_mamba2_mixer_against_a_step_by_step_reference():
    """The whole mixer, with the scan replaced by the naive recurrence."""
    m = _mixer().double()
    x = torch.randn(1, 19, 24, dtype=torch.float64)
    b, s, _ = x.shape
    d_inner, gn = m.d_inner, m.groups * m.state
    zxbcdt = x @ m.in_proj.weight.T
    z, xbc, dt = (
        zxbcdt[..., :d_inner],
        zxbcdt[..., d_inner : 2 * d_inner + 2 * gn],
        zxbcdt[..., -m.heads :],
    )
    # depthwise causal convolution by hand: out[t] = bias + sum_k w[k] * in[t - (K-1) + k]
    K = m.conv1d.kernel_size[0]
    padded = F.pad(xbc, (0, 0, K - 1, 0))
    conv = m.conv1d.bias + sum(padded[:, k : k + s] * m.conv1d.weight[:, 0, k] for k in range(K))
    xbc = F.silu(conv)
    xs = xbc[..., :d_inner].view(b, s, m.heads, m.head_dim)
    B = xbc[..., d_inner : d_inner + gn].view(b, s, m.groups, m.state)
    C = xbc[..., d_inner + gn :].view(b, s, m.groups, m.state)
    y, _ = _naive_ssd(xs, F.softplus(dt + m.dt_bias), -torch.exp(m.A_log), B, C)
    y = (y + xs * m.D[:, None]).reshape(b, s, d_inner) * F.silu(z)
    groups = y.view(b, s, m.groups, -1)
    y = (groups / groups.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt()).reshape(
        b, s, d_inner
    ) * m.norm.weight
    torch.testing.assert_close(m(x), y @ m.out_proj.weight.T, rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------
# The benchmark's reference Llama (benchmarks/engine_throughput.py)


def test_benchmark_reference_llama_matches_the_engine_model(host):
    """The throughput benchmark compares the engine with a minimal Llama written there: the comparison
    is fair only with the same parameter count (hence FLOPs) at the tiny and the 8B-width shapes, and
    the reference must be a causal language model too."""
    from dataclasses import replace

    from engine_throughput import WIDE_VOCAB, Reference

    workload = host.workload("llama31")
    wide = replace(workload.architecture("8b").with_layers(1), vocab=WIDE_VOCAB)
    for arch in (shrink(workload.architecture("8b"), "tiny"), wide):
        with torch.device("meta"):
            engine_model, reference = host.build_model(workload, arch), Reference(arch)
        assert (
            blocks.count_parameters(reference)
            == blocks.count_parameters(engine_model)
            == count_params(arch).total
        )
    arch = shrink(workload.architecture("8b"), "tiny")
    reference = Reference(arch).eval()
    tokens = torch.randint(0, arch.vocab, (1, 40))
    changed = tokens.clone()
    changed[0, 25:] = (changed[0, 25:] + 1) % arch.vocab
    with torch.no_grad():
        before, after = reference(tokens), reference(changed)
    assert before.shape == (1, 40, arch.vocab)
    torch.testing.assert_close(after[:, :25], before[:, :25], rtol=0, atol=1e-5)
    assert not torch.allclose(after[:, 25:], before[:, 25:])
