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
    head_dim: int
    query_groups: int
    vocab: int
    seq_len: int
    layers: int  # the minimum; hybrid and MoE models take what their structure needs
    experts: int
    mamba_head_dim: int
    mamba_state: int
    mamba_chunk: int


PROXIES = {
    "tiny": ProxyShape(
        name="tiny", description="a few layers, width 64-192, sequence 128: seconds per step on a laptop CPU",
        head_dim=16, query_groups=1, vocab=512, seq_len=128, layers=4, experts=8,
        mamba_head_dim=16, mamba_state=16, mamba_chunk=32,
    ),
}


def _multiple(value: float, of: int = 8) -> int:
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
    hidden = heads * shape.head_dim
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
        mamba_heads = max(1, d_inner // shape.mamba_head_dim)
        groups = max(1, mamba_heads * arch.mamba_groups // arch.mamba_heads)
        while mamba_heads % groups:
            groups -= 1
        mamba = dict(mamba_heads=mamba_heads, mamba_head_dim=shape.mamba_head_dim, mamba_state=shape.mamba_state,
                     mamba_groups=groups, mamba_chunk=shape.mamba_chunk)
    return replace(
        arch,
        size=f"{arch.size}-{proxy}",
        layers=layers,
        layer_pattern=pattern,
        hidden=hidden,
        heads=heads,
        query_groups=shape.query_groups,
        head_dim=shape.head_dim,
        ffn=_multiple(arch.ffn * scale),
        moe_ffn=_multiple(arch.moe_ffn * scale) if arch.moe_ffn else 0,
        shared_expert_ffn=_multiple(arch.shared_expert_ffn * scale) if arch.shared_expert_ffn else 0,
        experts=min(arch.experts, shape.experts) if arch.experts else 0,
        vocab=shape.vocab,
        published_params=None,
        source=f"{proxy} proxy of {arch.size} ({arch.source})",
        **mamba,
    )
