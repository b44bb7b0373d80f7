"""The torch engine's fused and device-aware blocks against their plain forms, on CPU, real torch.

Each fused module is compared with the unfused computation on the same
weights, forward and gradients: the q|k|v projection with three separate
ones, the gate|up projection with two, the chunked cross-entropy with
``F.cross_entropy`` over the full logits, the routed MoE with a per-expert
reference (and its grouped-product path with its per-expert loop). The RoPE
tables are built once. A real two-rank DDP run (gloo) trains a Llama 4 proxy
whose routers send every token to one expert. The GPU-only kernels (Mamba2's
``mamba_ssm`` / ``causal_conv1d``) cannot run here: the CPU path is checked
to be the plain one, and the GPU branch is fed stand-ins that compute what
those kernels document, so its argument plumbing is tested, as is how the
Triton scan is found (a normal import; a mamba-ssm whose ``__init__`` needs
the CUDA extension it was built without; none).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from llmb.engines.torch import blocks, kernels, loss
from llmb.plugins.host import PluginHost
from llmb.recipes.proxies import shrink

HANG_GUARD = 600  # seconds for the two-rank DDP run: a guard against a hang, never a speed limit


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


def _backward(
    out: torch.Tensor, upstream: torch.Tensor, *leaves: torch.Tensor
) -> list[torch.Tensor]:
    """The gradients of ``leaves`` for ``out`` given ``upstream``; the leaves' ``.grad`` left cleared."""
    out.backward(upstream)
    grads = [leaf.grad.clone() for leaf in leaves]
    for leaf in leaves:
        leaf.grad = None
    return grads


# --------------------------------------------------------------------------
# Attention: fused q|k|v, RoPE tables


def _separate_attention(
    fused: blocks.GroupedQueryAttention, wq, wk, wv, wo, x: torch.Tensor
) -> torch.Tensor:
    """The unfused attention: three projections, KV heads repeated by hand, the softmax written out."""
    b, s, _ = x.shape
    h, g, d = fused.heads, fused.query_groups, fused.head_dim
    q = (x @ wq.T).view(b, s, h, d).transpose(1, 2)
    k = (x @ wk.T).view(b, s, g, d).transpose(1, 2)
    v = (x @ wv.T).view(b, s, g, d).transpose(1, 2)
    if fused.rope is not None:
        q, k = fused.rope(q, k)
    k, v = k.repeat_interleave(h // g, dim=1), v.repeat_interleave(h // g, dim=1)
    scores = (q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(
        torch.ones(s, s, dtype=torch.bool).triu(1), -math.inf
    )
    return (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, h * d) @ wo.T


@pytest.mark.parametrize(("heads", "groups", "fraction"), [(8, 2, 1.0), (6, 1, None), (4, 4, 0.5)])
def test_fused_qkv_attention_equals_separate_projections(heads, groups, fraction):
    d = 8
    rope = blocks.RotaryEmbedding(d, base=10_000.0, fraction=fraction) if fraction else None
    fused = blocks.GroupedQueryAttention(32, heads, groups, d, rope=rope)
    wq, wk, wv = (
        w.detach().clone().requires_grad_()
        for w in fused.qkv_proj.weight.split([heads * d, groups * d, groups * d])
    )
    wo = fused.o_proj.weight.detach().clone().requires_grad_()
    # the same parameters
    assert blocks.count_parameters(fused) == sum(w.numel() for w in (wq, wk, wv, wo))
    x = torch.randn(2, 11, 32, requires_grad=True)
    out, expected = fused(x), _separate_attention(fused, wq, wk, wv, wo, x)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    upstream = torch.randn_like(out)
    grad_x, grad_qkv, grad_o = _backward(
        out, upstream, x, fused.qkv_proj.weight, fused.o_proj.weight
    )
    ref_x, ref_q, ref_k, ref_v, ref_o = _backward(expected, upstream, x, wq, wk, wv, wo)
    torch.testing.assert_close(grad_x, ref_x, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grad_qkv, torch.cat((ref_q, ref_k, ref_v)), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grad_o, ref_o, rtol=1e-4, atol=1e-5)


def test_rope_tables_are_built_once_per_length_device_and_dtype():
    rope = blocks.RotaryEmbedding(8, base=500_000.0)
    # one rope, three layers
    attention = [blocks.GroupedQueryAttention(32, 4, 2, 8, rope=rope) for _ in range(3)]
    x = torch.randn(2, 10, 32)
    for layer in attention:
        layer(x)
    # built once for all layers
    assert list(rope._tables) == [(10, torch.device("cpu"), torch.float32)]
    cos, sin = rope.angles(10, torch.device("cpu"))
    for layer in attention:
        layer(torch.randn(1, 10, 32))
    again = rope.angles(10, torch.device("cpu"))
    assert again[0] is cos and again[1] is sin  # reused, not rebuilt
    # the tables are the angles p * base^(-2i/d) of the pairs (i, i + d/2)
    theta = torch.arange(10.0)[:, None] * 500_000.0 ** (-torch.arange(0, 8, 2) / 8)
    torch.testing.assert_close(cos, torch.cat((theta, theta), -1).cos())
    torch.testing.assert_close(sin, torch.cat((theta, theta), -1).sin())
    attention[0](torch.randn(1, 6, 32))  # another length, another dtype: tables of their own
    attention[0].double()(torch.randn(1, 6, 32, dtype=torch.float64))
    assert set(rope._tables) == {
        (10, torch.device("cpu"), torch.float32),
        (6, torch.device("cpu"), torch.float32),
        (6, torch.device("cpu"), torch.float64),
    }


def test_rope_tables_first_built_in_inference_mode_serve_training():
    rope = blocks.RotaryEmbedding(8)
    attention = blocks.GroupedQueryAttention(32, 4, 2, 8, rope=rope)
    with torch.inference_mode():
        attention(torch.randn(1, 5, 32))
    x = torch.randn(1, 5, 32, requires_grad=True)
    attention(x).sum().backward()  # an inference tensor saved for backward would raise here
    assert x.grad is not None and len(rope._tables) == 1


def test_attention_on_cpu_is_sdpa_default_and_the_math_fallback_is_said_once():
    q, k, v = torch.randn(2, 4, 9, 16), torch.randn(2, 2, 9, 16), torch.randn(2, 2, 9, 16)
    torch.testing.assert_close(
        kernels.attention(q, k, v),
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
    )
    # the GPU planner, asked about tensors no fused kernel accepts (CPU ones): the math kernel, said once
    kernels._SAID.discard("attention-math:torch.float32:16")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        first = kernels._plan_attention(("test", 1), q, k, v)
        second = kernels._plan_attention(("test", 2), q, k, v)
    from torch.nn.attention import SDPBackend

    assert first.backends == second.backends == (SDPBackend.MATH,)
    lines = printed.getvalue().splitlines()
    assert len(lines) == 1 and "math kernel" in lines[0] and "9x9 score matrix" in lines[0], lines


# --------------------------------------------------------------------------
# MLP: fused gate|up


def test_fused_gate_up_equals_separate_projections():
    mlp = blocks.SwiGLU(16, 40)
    assert blocks.count_parameters(mlp) == 3 * 16 * 40
    gate, up = (w.detach().clone().requires_grad_() for w in mlp.gate_up_proj.weight.chunk(2))
    down = mlp.down_proj.weight.detach().clone().requires_grad_()
    x = torch.randn(3, 7, 16, requires_grad=True)
    out, expected = mlp(x), (F.silu(x @ gate.T) * (x @ up.T)) @ down.T
    torch.testing.assert_close(out, expected)
    upstream = torch.randn_like(out)
    grad_x, grad_gate_up, grad_down = _backward(
        out, upstream, x, mlp.gate_up_proj.weight, mlp.down_proj.weight
    )
    ref_x, ref_gate, ref_up, ref_down = _backward(expected, upstream, x, gate, up, down)
    torch.testing.assert_close(grad_x, ref_x)
    torch.testing.assert_close(grad_gate_up, torch.cat((ref_gate, ref_up)))
    torch.testing.assert_close(grad_down, ref_down)


# --------------------------------------------------------------------------
# Chunked cross-entropy


@pytest.mark.parametrize("chunk", [1, 7, 40, 1000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_chunked_cross_entropy_equals_full_logits(chunk, dtype):
    hidden = torch.randn(40, 24, dtype=dtype, requires_grad=True)
    weight = (torch.randn(96, 24, dtype=dtype) / 5).requires_grad_()
    labels = torch.randint(0, 96, (40,))
    value = loss.chunked_cross_entropy(hidden, weight, labels, chunk_tokens=chunk)
    expected = F.cross_entropy((hidden @ weight.T).float(), labels)
    assert value.dtype == torch.float32
    torch.testing.assert_close(value, expected, rtol=1e-6, atol=1e-6)
    upstream = torch.tensor(0.37)  # the engine divides by GA: a scale the gradients must follow
    grad_h, grad_w = _backward(value, upstream, hidden, weight)
    ref_h, ref_w = _backward(expected, upstream, hidden, weight)
    assert grad_h.dtype == grad_w.dtype == dtype
    torch.testing.assert_close(grad_h, ref_h, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(grad_w, ref_w, rtol=1e-5, atol=1e-7)


def test_chunked_cross_entropy_never_keeps_the_full_logits():
    """What autograd saves for backward: the plain loss keeps [tokens, vocab] logits, the chunked one none."""
    hidden = torch.randn(64, 8, requires_grad=True)
    weight = torch.randn(256, 8, requires_grad=True)
    labels = torch.randint(0, 256, (64,))

    def saved_shapes(compute) -> list[tuple[int, ...]]:
        shapes = []

        def pack(t):
            shapes.append(tuple(t.shape))
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            compute().backward()
        return shapes

    plain = saved_shapes(lambda: F.cross_entropy((hidden @ weight.T).float(), labels))
    chunked = saved_shapes(
        lambda: loss.chunked_cross_entropy(hidden, weight, labels, chunk_tokens=16)
    )
    assert (64, 256) in plain
    assert all(shape[-1:] != (256,) for shape in chunked), chunked


def test_chunked_cross_entropy_without_grad_and_bad_shapes():
    hidden, weight, labels = torch.randn(10, 4), torch.randn(12, 4), torch.randint(0, 12, (10,))
    with torch.no_grad():
        value = loss.chunked_cross_entropy(hidden.requires_grad_(), weight, labels, chunk_tokens=3)
    assert value.grad_fn is None
    torch.testing.assert_close(value, F.cross_entropy(hidden @ weight.T, labels))
    with pytest.raises(ValueError, match="do not fit"):
        loss.chunked_cross_entropy(hidden.view(2, 5, 4), weight, labels)


@pytest.mark.parametrize("tied", [False, True])
def test_causal_lm_loss_equals_cross_entropy_of_its_logits(host, tied):
    workload = host.workload("llama31")
    arch = replace(shrink(workload.architecture("8b"), "tiny"), tied_embeddings=tied)
    model = host.build_model(workload, arch)
    tokens = torch.randint(0, arch.vocab, (2, 33))
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    value = model(inputs, labels=labels)
    grads = torch.autograd.grad(value, list(model.parameters()))
    logits = model(inputs)
    expected = F.cross_entropy(logits.float().reshape(-1, arch.vocab), labels.reshape(-1))
    torch.testing.assert_close(value, expected, rtol=1e-6, atol=1e-6)
    for (name, _), got, want in zip(
        model.named_parameters(),
        grads,
        torch.autograd.grad(expected, list(model.parameters())),
        strict=True,
    ):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7, msg=name)


def test_causal_lm_loss_with_a_vocabulary_split_takes_the_logits_path(host, tmp_path):
    """An output layer split over the vocabulary (tensor parallel's loss parallel) is a DTensor: the
    model computes the loss from its sharded logits instead of chunking (one rank, gloo)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, loss_parallel, parallelize_module

    workload = host.workload("llama31")
    arch = shrink(workload.architecture("8b"), "tiny")
    model = host.build_model(workload, arch)
    tokens = torch.randint(0, arch.vocab, (2, 17))
    expected = model(tokens[:, :-1], labels=tokens[:, 1:])
    (expected_grad,) = torch.autograd.grad(expected, [model.output.weight])
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        parallelize_module(
            model,
            init_device_mesh("cpu", (1,)),
            {"output": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)},
        )
        assert not loss.chunkable(model.output.weight)
        with loss_parallel():
            value = model(tokens[:, :-1], labels=tokens[:, 1:])
            value.backward()
        assert isinstance(value, DTensor)
        torch.testing.assert_close(value.full_tensor(), expected.detach())
        torch.testing.assert_close(model.output.weight.grad.full_tensor(), expected_grad)
    finally:
        dist.destroy_process_group()


# --------------------------------------------------------------------------
# Routed MoE


def _per_expert_reference(moe: blocks.RoutedMoE, x: torch.Tensor) -> torch.Tensor:
    """Expert by expert: each takes the tokens routed to it, written from the math, no sorting."""
    tokens = x.reshape(-1, moe.hidden)
    top, ids = (tokens @ moe.router.weight.T).topk(moe.topk, dim=-1)
    weights = torch.sigmoid(top) if moe.score == "sigmoid" else top.softmax(-1)
    out = torch.zeros_like(tokens)
    for e, expert in enumerate(moe.experts):
        gate, up = expert.gate_up_proj.weight.chunk(2)
        token, slot = (ids == e).nonzero(as_tuple=True)
        w = weights[token, slot].unsqueeze(-1)
        inp = tokens[token] * w if moe.weight_inputs else tokens[token]
        y = (F.silu(inp @ gate.T) * (inp @ up.T)) @ expert.down_proj.weight.T
        out = out.index_add(0, token, y if moe.weight_inputs else y * w)
    if moe.shared_expert is not None:
        out = out + moe.shared_expert(tokens)
    return out.view_as(x)


MOES = {  # Llama 4's routing (top-1, sigmoid, weight before the expert, a shared expert) and Mixtral-style top-2
    "llama4": dict(
        hidden=16, experts=6, moe_ffn=24, topk=1, shared_ffn=20, score="sigmoid", weight_inputs=True
    ),
    "top2": dict(hidden=16, experts=5, moe_ffn=24, topk=2, score="softmax", weight_inputs=False),
}


@pytest.mark.parametrize("grouped", [False, True])
@pytest.mark.parametrize("config", list(MOES))
def test_moe_equals_per_expert_reference(config, grouped, monkeypatch):
    """Forward and gradients. ``grouped``: the GPU path (two grouped products over the stacked expert
    weights) forced on, torch's own grouped product computing it on CPU."""
    if grouped:
        monkeypatch.setattr(kernels, "grouped_mm_usable", lambda *args: True)
    moe = blocks.RoutedMoE(**MOES[config])
    with torch.no_grad():  # one expert gets no token: its parameters still take part
        moe.router.weight[0] = -10 * moe.router.weight[1:].abs().sum(0)
    x = torch.randn(3, 10, 16).abs().requires_grad_()
    _, ids = moe.route(x.detach().reshape(-1, 16))
    assert 0 not in ids
    out, expected = moe(x), _per_expert_reference(moe, x)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    params = list(moe.parameters())
    got = torch.autograd.grad(out, [x, *params], torch.ones_like(out))
    want = torch.autograd.grad(expected, [x, *params], torch.ones_like(out), allow_unused=True)
    for (name, _), g, w in zip([("x", x), *moe.named_parameters()], got, want, strict=True):
        torch.testing.assert_close(
            g, torch.zeros_like(g) if w is None else w, rtol=1e-5, atol=1e-6, msg=name
        )
    assert (
        torch.count_nonzero(
            got[1 + [n for n, _ in moe.named_parameters()].index("experts.0.down_proj.weight")]
        )
        == 0
    )


def test_moe_routing_needs_no_host_read(monkeypatch):
    """On the grouped path nothing in the MoE reads a device value back to the host (no ``.tolist()``/``.item()``)."""
    monkeypatch.setattr(kernels, "grouped_mm_usable", lambda *args: True)
    moe = blocks.RoutedMoE(**MOES["top2"])
    reads = []

    def recording(method):
        original = getattr(torch.Tensor, method)

        def read(self, *args, **kwargs):
            reads.append(method)
            return original(self, *args, **kwargs)

        return read

    for method in ("tolist", "item", "cpu"):
        monkeypatch.setattr(torch.Tensor, method, recording(method))
    moe(torch.randn(2, 8, 16)).sum().backward()
    assert reads == []
    # the per-expert loop (CPU's path) does read the counts: the recorder sees it
    monkeypatch.undo()
    monkeypatch.setattr(torch.Tensor, "tolist", recording("tolist"))
    moe(torch.randn(2, 8, 16))
    assert reads == ["tolist"]


def _count_rows(received: dict, key: str):
    def hook(module, args, out):
        received[key] = received.get(key, 0) + args[0].shape[0]

    return hook


def _ddp_moe_rank(rank: int, world: int, store: str, out_dir: str) -> None:
    """One rank: a Llama 4 tiny proxy under DDP, every router forced to send all tokens to one expert."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        host = PluginHost()
        workload = host.workload("llama4")
        arch = shrink(workload.architecture(workload.sizes()[0]), "tiny")
        torch.manual_seed(0)
        model = host.build_model(workload, arch)
        received: dict[str, int] = {}
        for name, module in model.named_modules():
            if isinstance(module, blocks.RoutedMoE):
                # equal scores: every token goes to the same expert
                module.router.weight.detach().zero_()
                module.router.weight.requires_grad_(False)
                for e, expert in enumerate(module.experts):
                    expert.register_forward_hook(_count_rows(received, f"{name}.{e}"))
        ddp = DistributedDataParallel(model)
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
        generator = torch.Generator().manual_seed(100 + rank)
        losses, missing = [], set()
        for _ in range(3):
            for micro in range(2):  # gradient accumulation: no reduction on the first micro-batch
                tokens = torch.randint(0, arch.vocab, (2, 33), generator=generator)
                with ddp.no_sync() if micro == 0 else contextlib.nullcontext():
                    value = ddp(tokens[:, :-1], labels=tokens[:, 1:]) / 2
                    value.backward()
            missing |= {
                n for n, p in model.named_parameters() if p.requires_grad and p.grad is None
            }
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(value))
        digest = float(sum(p.detach().double().sum() for p in model.parameters()))
        Path(out_dir, f"rank{rank}.json").write_text(
            json.dumps(
                {
                    "losses": losses,
                    "received": received,
                    "missing": sorted(missing),
                    "digest": digest,
                }
            )
        )
    finally:
        dist.destroy_process_group()


def test_ddp_trains_when_experts_receive_no_tokens(tmp_path):
    """The crash this replaces: "Expected to have finished reduction in the prior iteration" on the
    step after a micro-batch in which a routed expert received no token."""
    import torch.multiprocessing as mp

    context = mp.start_processes(
        _ddp_moe_rank,
        args=(2, str(tmp_path / "store"), str(tmp_path)),
        nprocs=2,
        join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + HANG_GUARD
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail("the two-rank DDP run hung")
    results = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    for result in results:
        idle = [key for key, count in result["received"].items() if count == 0]
        assert idle and len(idle) < len(result["received"]), result["received"]  # the case at hand
        assert result["missing"] == []  # every trainable parameter had a gradient to reduce
        assert all(math.isfinite(v) for v in result["losses"])
    # the reduced gradients kept the ranks identical
    assert results[0]["digest"] == results[1]["digest"]


# --------------------------------------------------------------------------
# Mamba2: the plain scan on CPU, the kernels' plumbing on GPU


def _mixer() -> blocks.Mamba2Mixer:
    return blocks.Mamba2Mixer(
        hidden=24, heads=4, head_dim=8, state=6, groups=2, conv_kernel=4, chunk=8
    )


# Stand-ins for the two kernel packages, computing what their documentation says
# (mamba_ssm: mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D, z, dt_bias, ..., dt_softplus)
# -> y [b, s, h, p] with the skip D*x, dt taken as softplus(dt + dt_bias) when dt_softplus;
# causal_conv1d: causal_conv1d_fn(x [b, dim, s], weight [dim, width], bias, activation) -> [b, dim, s]),
# each recording its calls in the module's CALLS list.
_SCAN_STAND_IN = """
CALLS = []
TRACED = []  # calls made while Dynamo traced it into a graph

def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, initial_states=None,
                              seq_idx=None, cu_seqlens=None, dt_softplus=False, dt_limit=(0.0, float("inf")),
                              return_final_states=False, return_varlen_states=False):
    import torch
    import torch.nn.functional as F
    from llmb.engines.torch.blocks import ssd_scan
    if torch.compiler.is_compiling():
        TRACED.append(1)
    CALLS.append(dict(x=x.shape, dt=dt.shape, A=A.shape, B=B.shape, C=C.shape, chunk=chunk_size, D=D.shape,
                      dt_bias=dt_bias.shape, dt_softplus=dt_softplus))
    dt = dt.to(torch.promote_types(dt.dtype, torch.float32)) + dt_bias  # in float32 at least
    y, _ = ssd_scan(x, F.softplus(dt) if dt_softplus else dt, A, B, C, chunk_size)
    return y + x * D.view(-1, 1).to(x.dtype)
"""
_STAND_INS = {
    "mamba_ssm/__init__.py": "",
    "mamba_ssm/ops/__init__.py": "",
    "mamba_ssm/ops/triton/__init__.py": "",
    "mamba_ssm/ops/triton/ssd_combined.py": _SCAN_STAND_IN,
    "causal_conv1d/__init__.py": """
import torch.nn.functional as F
CALLS = []

def causal_conv1d_fn(x, weight, bias=None, activation=None):
    CALLS.append(dict(x=x.shape, weight=weight.shape, bias=bias.shape, activation=activation))
    width = weight.shape[1]
    out = F.conv1d(F.pad(x, (width - 1, 0)), weight.unsqueeze(1), bias, groups=x.shape[1])
    return F.silu(out) if activation in ("silu", "swish") else out
""",
}


@pytest.fixture
def stand_in_kernels(tmp_path, monkeypatch):
    """The stand-in packages importable (and gone again afterwards)."""
    for relative, text in _STAND_INS.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(kernels, "_MAMBA", {})
    monkeypatch.setattr(kernels, "_SAID", set())
    _forget_kernel_modules()
    yield
    _forget_kernel_modules()


def _forget_kernel_modules() -> None:
    for name in [m for m in sys.modules if m.split(".")[0] in ("mamba_ssm", "causal_conv1d")]:
        del sys.modules[name]


def test_mamba2_on_cpu_takes_the_plain_scan_and_imports_no_kernel(stand_in_kernels, monkeypatch):
    calls = []
    plain = blocks.ssd_scan
    monkeypatch.setattr(
        blocks, "ssd_scan", lambda *args, **kwargs: calls.append(1) or plain(*args, **kwargs)
    )
    out = _mixer()(torch.randn(2, 13, 24))
    assert calls == [1] and out.shape == (2, 13, 24)
    assert kernels.mamba_kernels(torch.device("cpu")) is None
    # installed, yet not imported
    assert "mamba_ssm" not in sys.modules and "causal_conv1d" not in sys.modules


def test_mamba2_cpu_convolution_is_the_conv1d_modules():
    """The CPU's shifted products (``causal_depthwise_conv``) and the ``nn.Conv1d`` path a GPU without
    causal_conv1d takes: the same values and gradients."""
    conv = _mixer().double().conv1d
    x = torch.randn(2, 13, conv.in_channels, dtype=torch.float64, requires_grad=True)
    shifted = blocks.causal_depthwise_conv(x, conv.weight, conv.bias)
    module = conv(x.transpose(1, 2))[..., :13].transpose(1, 2)
    torch.testing.assert_close(shifted, module, rtol=1e-12, atol=1e-12)
    upstream = torch.randn_like(module)
    got = torch.autograd.grad(shifted, [x, conv.weight, conv.bias], upstream)
    want = torch.autograd.grad(module, [x, conv.weight, conv.bias], upstream)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_mamba2_gpu_branch_feeds_the_kernels_their_documented_arguments(
    stand_in_kernels, monkeypatch
):
    mixer = _mixer().double()
    x = torch.randn(2, 13, 24, dtype=torch.float64, requires_grad=True)
    plain = mixer(x)
    grads = torch.autograd.grad(plain.sum(), [x, *mixer.parameters()])
    loaded = kernels._load_mamba_kernels("cuda")  # what a GPU would find installed
    assert loaded is not None and loaded.scan is not None and loaded.conv is not None
    # this CPU takes the GPU branch
    monkeypatch.setattr(kernels, "mamba_kernels", lambda device: loaded)
    fused = mixer(x)
    torch.testing.assert_close(fused, plain, rtol=1e-10, atol=1e-12)
    for got, want in zip(
        torch.autograd.grad(fused.sum(), [x, *mixer.parameters()]), grads, strict=True
    ):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    scan_calls = sys.modules["mamba_ssm.ops.triton.ssd_combined"].CALLS
    conv_calls = sys.modules["causal_conv1d"].CALLS
    assert scan_calls[-1] == dict(
        x=(2, 13, 4, 8),
        dt=(2, 13, 4),
        A=(4,),
        B=(2, 13, 2, 6),
        C=(2, 13, 2, 6),
        chunk=8,
        D=(4,),
        dt_bias=(4,),
        dt_softplus=True,
    )
    conv_dim = mixer.conv_dim
    assert conv_calls[-1] == dict(
        x=(2, conv_dim, 13), weight=(conv_dim, 4), bias=(conv_dim,), activation="silu"
    )


def test_mamba2_compiled_layer_runs_the_triton_scan_eagerly_between_its_graphs(
    stand_in_kernels, monkeypatch
):
    """The kernel is an autograd Function launching Triton kernels, kept out of Dynamo's graph on
    purpose: in a compiled mixer it runs as itself on every call, never traced (its stand-in records
    both), and the mixer's values and gradients are the plain ones."""
    mixer = _mixer().double()
    x = torch.randn(2, 13, 24, dtype=torch.float64)
    plain = mixer(x)
    grads = torch.autograd.grad(plain.square().sum(), list(mixer.parameters()))
    loaded = kernels._load_mamba_kernels("cuda")
    monkeypatch.setattr(kernels, "mamba_kernels", lambda device: loaded)
    torch._dynamo.reset()
    compiled = torch.compile(mixer, backend="aot_eager")
    for _ in range(2):
        out = compiled(x)
        got = torch.autograd.grad(out.square().sum(), list(mixer.parameters()))
    torch._dynamo.reset()
    stand_in = sys.modules["mamba_ssm.ops.triton.ssd_combined"]
    assert len(stand_in.CALLS) == 2 and stand_in.TRACED == []
    torch.testing.assert_close(out, plain, rtol=1e-10, atol=1e-12)
    for g, w in zip(got, grads, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


def test_mamba2_gpu_kernels_missing_are_said_once(monkeypatch):
    monkeypatch.setattr(kernels, "_MAMBA", {})
    monkeypatch.setattr(kernels, "_SAID", set())
    for name in ("mamba_ssm", "mamba_ssm.ops.triton.ssd_combined", "causal_conv1d"):
        # not installed: importing it raises ImportError
        monkeypatch.setitem(sys.modules, name, None)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert kernels.mamba_kernels(torch.device("cuda")) is None
        assert kernels.mamba_kernels(torch.device("cuda")) is None
    said = printed.getvalue()
    assert said.count("Mamba2 scan: the plain-PyTorch chunked scan") == 1, said
    assert "mamba_ssm did not import (ModuleNotFoundError" in said
    assert said.count("Mamba2 convolution: the plain-PyTorch one") == 1, said


# --------------------------------------------------------------------------
# Loading mamba_ssm's Triton scan: a normal import, or (a mamba-ssm built without its CUDA extension,
# whose own __init__ cannot import) the Triton subpackage without that __init__


def _install(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


_TRITON_ONLY = {  # the Triton subpackage of a mamba-ssm wheel
    "mamba_ssm/ops/__init__.py": "",
    "mamba_ssm/ops/triton/__init__.py": "",
    "mamba_ssm/ops/triton/ssd_combined.py": "from mamba_ssm.utils.torch import TORCH_HELPER\n"
    + _SCAN_STAND_IN,
    "mamba_ssm/utils/__init__.py": "",
    "mamba_ssm/utils/torch.py": "TORCH_HELPER = 1\n",
}

# The top-level __init__ of such a build: as mamba-ssm's, it imports more of the package first, then
# the CUDA extension, which is not there
_FAILING_INITS = {
    "raises": '__version__ = "2.3.2.post1"\nimport mamba_ssm.utils.torch\n'
    'raise ImportError("selective_scan_cuda")\n',
    "imports the extension": '__version__ = "2.3.2.post1"\n'
    "from mamba_ssm.ops.selective_scan_interface import selective_scan_fn\n",
}
_SELECTIVE_SCAN_INTERFACE = "import mamba_ssm.ops.triton.ssd_combined\nimport selective_scan_cuda\nselective_scan_fn = None\n"


@pytest.fixture
def package_root(tmp_path, monkeypatch):
    """An empty import root for a fake mamba_ssm, first on sys.path; the loader's caches and any
    mamba_ssm module cleared before and after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(kernels, "_MAMBA", {})
    monkeypatch.setattr(kernels, "_SAID", set())
    monkeypatch.setitem(
        sys.modules, "causal_conv1d", None
    )  # not installed: only the scan is at stake
    _forget_kernel_modules()
    yield tmp_path
    _forget_kernel_modules()


def _load_on_gpu() -> tuple[kernels.MambaKernels | None, str]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        loaded = kernels.mamba_kernels(torch.device("cuda"))
        assert kernels.mamba_kernels(torch.device("cuda")) is loaded  # decided once
    return loaded, printed.getvalue()


@pytest.mark.parametrize("init", sorted(_FAILING_INITS))
def test_triton_scan_loads_without_the_package_init_that_needs_the_cuda_extension(
    package_root, init
):
    _install(
        package_root,
        {
            **_TRITON_ONLY,
            "mamba_ssm/__init__.py": _FAILING_INITS[init],
            "mamba_ssm/ops/selective_scan_interface.py": _SELECTIVE_SCAN_INTERFACE,
        },
    )
    with pytest.raises(ImportError):  # as installed, the package does not import
        __import__("mamba_ssm.ops.triton.ssd_combined")
    _forget_kernel_modules()
    loaded, said = _load_on_gpu()
    assert loaded is not None and loaded.conv is None
    module = sys.modules["mamba_ssm.ops.triton.ssd_combined"]
    assert loaded.scan is module.mamba_chunk_scan_combined
    assert module.__file__ == str(package_root / "mamba_ssm/ops/triton/ssd_combined.py")
    bare = sys.modules["mamba_ssm"]  # the installed directory, its __init__ never run
    assert list(bare.__path__) == [str(package_root / "mamba_ssm")]
    assert not hasattr(bare, "__version__")
    assert "mamba_ssm.ops.selective_scan_interface" not in sys.modules
    assert said.count("Mamba2 scan:") == 1, said
    assert (
        "Triton kernel (mamba_chunk_scan_combined), loaded without the package's __init__" in said
    )
    assert "selective_scan_cuda" in said


def test_triton_scan_from_a_package_that_imports_normally(package_root, monkeypatch):
    _install(package_root, {**_TRITON_ONLY, "mamba_ssm/__init__.py": "WHOLE = True\n"})

    def never(spec):
        raise AssertionError("the normal import worked: no bare package")

    monkeypatch.setattr(kernels, "_scan_without_package_init", never)
    loaded, said = _load_on_gpu()
    assert loaded is not None
    assert loaded.scan is sys.modules["mamba_ssm.ops.triton.ssd_combined"].mamba_chunk_scan_combined
    assert sys.modules["mamba_ssm"].WHOLE  # its own __init__ ran
    assert "Triton kernel (mamba_chunk_scan_combined)\n" in said


def test_no_triton_scan_without_mamba_ssm(package_root):
    loaded, said = _load_on_gpu()  # nothing installed under the root, nor in this environment
    assert loaded is None
    assert "mamba_ssm" not in sys.modules
    assert "Mamba2 scan: the plain-PyTorch chunked scan" in said
    assert "mamba_ssm did not import (ModuleNotFoundError: No module named 'mamba_ssm')" in said


def test_no_bare_package_when_the_triton_module_itself_fails(package_root):
    """A whole mamba_ssm whose Triton module fails (say, triton missing): the normal import's error
    stands, and no bare package is tried, since the __init__ was not what failed."""
    files = {**_TRITON_ONLY, "mamba_ssm/__init__.py": ""}
    files["mamba_ssm/ops/triton/ssd_combined.py"] = "import triton_that_is_not_installed\n"
    _install(package_root, files)
    loaded, said = _load_on_gpu()
    assert loaded is None
    assert "mamba_ssm did not import (ModuleNotFoundError" in said
    assert "triton_that_is_not_installed" in said and "without the package's __init__" not in said
    assert "did not load without it" not in said


def test_a_bare_package_that_fails_too_leaves_nothing_behind(package_root):
    files = {**_TRITON_ONLY, "mamba_ssm/__init__.py": _FAILING_INITS["raises"]}
    files["mamba_ssm/ops/triton/ssd_combined.py"] = "import triton_that_is_not_installed\n"
    _install(package_root, files)
    loaded, said = _load_on_gpu()
    assert loaded is None
    assert not [name for name in sys.modules if name.split(".")[0] == "mamba_ssm"]
    assert "its Triton scan did not load without it either" in said
    assert "triton_that_is_not_installed" in said


def test_mamba2_mixer_runs_the_scan_loaded_without_the_package_init(package_root, monkeypatch):
    """The mixer's GPU branch with the scan that the bare package gave: the plain path's values."""
    _install(
        package_root,
        {**_TRITON_ONLY, "mamba_ssm/__init__.py": _FAILING_INITS["raises"]},
    )
    loaded, _ = _load_on_gpu()
    mixer = _mixer().double()
    x = torch.randn(2, 13, 24, dtype=torch.float64)
    plain = mixer(x)
    monkeypatch.setattr(kernels, "mamba_kernels", lambda device: loaded)
    torch.testing.assert_close(mixer(x), plain, rtol=1e-10, atol=1e-12)
    assert len(sys.modules["mamba_ssm.ops.triton.ssd_combined"].CALLS) == 1
