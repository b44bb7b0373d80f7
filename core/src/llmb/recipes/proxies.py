"""Proxies: smaller models that keep a family's structure.

Two kinds, both labelled as proxies wherever a run is reported and never
compared with the published figures:

* ``--layers N``: the seeds' own proxy (Llama 3.1's 405b-Proxy rows): the
  full width with fewer layers (a hybrid pattern is cut to its first N).
* ``--proxy tiny``: a CPU-sized shrink that keeps what makes each family
  itself: the ratio of query heads to KV groups, the FFN-to-hidden ratios,
  gating, norms, the MoE routing (top-k, shared expert, which layers are
  MoE) and the hybrid Mamba/attention/MLP pattern.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llmb.errors import UsageError
from llmb.recipes.records import ModelArch


@dataclass(frozen=True)
class ProxyShape:
    name: str
    description: str
    head_dim: int  # the least; doubled until every projection's width is a multiple of ALIGNMENT
    query_groups: int
    vocab: int
    seq_len: int
    layers: int  # the minimum; hybrid and MoE models take what their structure needs
    experts: int
    mamba_head_dim: int
    mamba_state: int
    mamba_chunk: int


# Every linear layer of a proxy (but the output layer and the router) has both dimensions a multiple
# of 16, as float8 matrix products need (llmb.engines.torch.parallel.float8): an fp8 recipe's proxy
# computes all of them in float8 where the GPU has it, as the full model does.
ALIGNMENT = 16

# tiny: sized so that every workload's default 50 steps (its recipe's GA micro-batches each) take well
# under a minute with 2 ranks on 2 CPU cores (benchmarks/proxy_wall_time.py). At this size a micro-batch
# costs per-operation overhead more than arithmetic: heads of 8 channels (16 where the GQA ratio is odd,
# to keep the widths multiples of 16), so widths of 32-128; Mamba2 heads of 8 channels, its scan in one
# chunk (the scan's result does not depend on its chunking; more chunks only add the operations that
# carry the state across them). The sequence, 64, is no shorter because the synthetic tokens are uniform
# noise: all a proxy can learn in 50 steps is to flatten its initial logits, and that signal against the
# gradient's noise grows as sqrt(tokens per step / width). Halving the width and the sequence together
# (from 16-channel heads and 128 tokens) keeps the loss falling as reliably as before, which
# ``llmb certify``'s loss gate checks; a 32-token sequence did not.
PROXIES = {
    "tiny": ProxyShape(
        name="tiny", description="a few layers, width 32-128, sequence 64: a fraction of a second per step on a 2-core CPU",
        head_dim=8, query_groups=1, vocab=512, seq_len=64, layers=4, experts=8,
        mamba_head_dim=8, mamba_state=16, mamba_chunk=64,
    ),
}


def _multiple(value: float, of: int = ALIGNMENT) -> int:
    return max(of, int(round(value / of)) * of)


def _hybrid_layers(pattern: str, minimum: int) -> int:
    """The shortest prefix of ``pattern`` that has every layer kind in it."""
    kinds = set(pattern)
    for end in range(1, len(pattern) + 1):
        if set(pattern[:end]) == kinds:
            return max(end, min(minimum, len(pattern)))
    return len(pattern)


def shrink(arch: ModelArch, proxy: str) -> ModelArch:
    """``arch`` shrunk to the named proxy shape."""
    if proxy not in PROXIES:
        raise UsageError(f"unknown --proxy {proxy!r}; valid: {', '.join(PROXIES)}.")
    shape = PROXIES[proxy]
    ratio = max(1, arch.heads // max(arch.query_groups, 1))  # query heads per KV group
    heads = ratio * shape.query_groups
    head_dim = shape.head_dim
    while (heads * head_dim) % ALIGNMENT or (2 * shape.query_groups * head_dim) % ALIGNMENT:  # q, and k|v
        head_dim *= 2
    hidden = heads * head_dim
    scale = hidden / arch.hidden
    layers = min(arch.layers, shape.layers)
    if arch.moe_layer_step:
        layers = max(layers, 2 * arch.moe_layer_step)  # dense and MoE layers both present
    pattern = None
    if arch.layer_pattern:
        layers = _hybrid_layers(arch.layer_pattern, shape.layers)
        pattern = arch.layer_pattern[:layers]
    mamba = {}
    if arch.mamba_heads:
        d_inner = arch.mamba_expand * hidden
        mamba_head_dim = shape.mamba_head_dim
        while (d_inner // mamba_head_dim) % ALIGNMENT and mamba_head_dim > 1:  # in_proj's width: 2 d_inner + B, C + heads
            mamba_head_dim //= 2
        mamba_heads = max(1, d_inner // mamba_head_dim)
        groups = max(1, mamba_heads * arch.mamba_groups // arch.mamba_heads)
        while mamba_heads % groups:
            groups -= 1
        mamba = dict(mamba_heads=mamba_heads, mamba_head_dim=mamba_head_dim, mamba_state=shape.mamba_state,
                     mamba_groups=groups, mamba_chunk=shape.mamba_chunk)
    return replace(
        arch,
        size=f"{arch.size}-{proxy}",
        layers=layers,
        layer_pattern=pattern,
        hidden=hidden,
        heads=heads,
        query_groups=shape.query_groups,
        head_dim=head_dim,
        ffn=_multiple(arch.ffn * scale),
        moe_ffn=_multiple(arch.moe_ffn * scale) if arch.moe_ffn else 0,
        shared_expert_ffn=_multiple(arch.shared_expert_ffn * scale) if arch.shared_expert_ffn else 0,
        experts=min(arch.experts, shape.experts) if arch.experts else 0,
        vocab=shape.vocab,
        published_params=None,
        source=f"{proxy} proxy of {arch.size} ({arch.source})",
        **mamba,
    )
