"""Parameter counts from a ``ModelArch``, per layer, by layer kind.

Layer kinds (``ModelArch.layer_kinds``): ``A`` attention + dense MLP,
``E`` attention + MoE, and Nemotron-H's ``M`` (Mamba2), ``*`` (attention)
and ``-`` (MLP), each with its own pre-norm. Biases are absent, as in every
model here; Mamba's conv1d has one.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmb.recipes.records import ModelArch


@dataclass(frozen=True)
class LayerParams:
    """One layer's parameters: ``dense`` are split by TP, ``expert`` by EP·ETP."""

    kind: str
    dense: int
    expert: int = 0

    @property
    def total(self) -> int:
        return self.dense + self.expert


@dataclass(frozen=True)
class ParamCount:
    embedding: int
    output: int  # 0 when tied to the embedding
    final_norm: int
    layers: tuple[LayerParams, ...]

    @property
    def total(self) -> int:
        return self.embedding + self.output + self.final_norm + sum(l.total for l in self.layers)

    @property
    def expert(self) -> int:
        return sum(l.expert for l in self.layers)


def _norm(arch: ModelArch) -> int:
    return 2 * arch.hidden if arch.norm == "layernorm1p" else arch.hidden


def attention_params(arch: ModelArch) -> int:
    h, d = arch.hidden, arch.head_dim
    q = h * arch.heads * d
    kv = 2 * h * arch.query_groups * d
    out = arch.heads * d * h
    qk_norm = 2 * d if arch.qk_norm else 0  # one RMSNorm weight of head_dim for q, one for k
    return q + kv + out + qk_norm + _norm(arch)


def mlp_params(arch: ModelArch, ffn: int) -> int:
    mats = 3 if arch.gated else 2
    return mats * arch.hidden * ffn


def mamba_d_inner(arch: ModelArch) -> int:
    return arch.mamba_heads * arch.mamba_head_dim


def mamba_params(arch: ModelArch) -> int:
    h, d_in = arch.hidden, mamba_d_inner(arch)
    groups_state = 2 * arch.mamba_groups * arch.mamba_state
    in_proj = h * (2 * d_in + groups_state + arch.mamba_heads)
    conv = (d_in + groups_state) * (arch.mamba_conv_kernel + 1)  # weight + bias
    per_head = 3 * arch.mamba_heads  # dt_bias, A_log, D
    gated_norm = d_in
    out_proj = d_in * h
    return in_proj + conv + per_head + gated_norm + out_proj + _norm(arch)


def layer_params(arch: ModelArch, kind: str) -> LayerParams:
    if kind == "A":
        return LayerParams(kind, attention_params(arch) + mlp_params(arch, arch.ffn) + _norm(arch))
    if kind == "E":
        shared = mlp_params(arch, arch.shared_expert_ffn) if arch.shared_expert_ffn else 0
        router = arch.hidden * arch.experts
        experts = arch.experts * mlp_params(arch, arch.moe_ffn)
        return LayerParams(kind, attention_params(arch) + shared + router + _norm(arch), experts)
    if kind == "M":
        return LayerParams(kind, mamba_params(arch))
    if kind == "*":
        return LayerParams(kind, attention_params(arch))
    if kind == "-":
        return LayerParams(kind, mlp_params(arch, arch.ffn) + _norm(arch))
    raise ValueError(f"unknown layer kind {kind!r}")


def count_params(arch: ModelArch) -> ParamCount:
    embedding = arch.vocab * arch.hidden
    return ParamCount(
        embedding=embedding,
        output=0 if arch.tied_embeddings else embedding,
        final_norm=_norm(arch),
        layers=tuple(layer_params(arch, kind) for kind in arch.layer_kinds()),
    )
