"""Parameter counts from a ``ModelArch``, per layer, by layer kind.

Layer kinds (``ModelArch.layer_kinds``): ``A`` attention + dense MLP,
``E`` attention + MoE, and Nemotron-H's ``M`` (Mamba2), ``*`` (attention)
and ``-`` (MLP), each with its own pre-norm. Biases are absent except Mamba's conv1d and
where the architecture has them (GPT-OSS: ``attention_bias``, ``expert_bias``).
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


def latent_attention_params(arch: ModelArch) -> int:
    """Multi-head latent attention (DeepSeek-V3, Kimi-K2; ``kv_lora_rank`` > 0), without its pre-norm:
    the query bottleneck (``q_a_proj``, its RMSNorm, ``q_b_proj``; one ``q_proj`` when ``q_lora_rank``
    is 0), ``kv_a_proj`` to the latent and the shared rotary key, the latent's RMSNorm, ``kv_b_proj``
    to every head's non-rotary key and value, and the output projection."""
    h, heads, d, rank = arch.hidden, arch.heads, arch.head_dim, arch.q_lora_rank
    q = h * rank + rank + rank * heads * d if rank else h * heads * d
    kv_a = h * (arch.kv_lora_rank + arch.rope_head_dim) + arch.kv_lora_rank
    kv_b = arch.kv_lora_rank * heads * (d - arch.rope_head_dim + arch.v_head_dim)
    return q + kv_a + kv_b + heads * arch.v_head_dim * h


def attention_params(arch: ModelArch) -> int:
    if arch.kv_lora_rank:
        return latent_attention_params(arch) + _norm(arch)
    h, d = arch.hidden, arch.head_dim
    q = h * arch.heads * d
    kv = 2 * h * arch.query_groups * d
    out = arch.heads * d * h
    qk_norm = 2 * d if arch.qk_norm else 0  # one RMSNorm weight of head_dim for q, one for k
    # GPT-OSS: a bias on each of q, k, v and the output; one sink logit per query head
    bias = (arch.heads + 2 * arch.query_groups) * d + h if arch.attention_bias else 0
    sinks = arch.heads if arch.attention_sinks else 0
    return q + kv + out + qk_norm + bias + sinks + _norm(arch)


def mlp_params(arch: ModelArch, ffn: int, bias: bool = False) -> int:
    """One MLP of ``ffn``; with ``bias`` (GPT-OSS's experts) a bias on each projection's outputs."""
    mats = 3 if arch.gated else 2
    biases = (mats - 1) * ffn + arch.hidden if bias else 0
    return mats * arch.hidden * ffn + biases


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
        router = (arch.hidden + (1 if arch.expert_bias else 0)) * arch.experts  # with its bias
        experts = arch.experts * mlp_params(arch, arch.moe_ffn, arch.expert_bias)
        return LayerParams(kind, attention_params(arch) + shared + router + _norm(arch), experts)
    if kind == "M":
        return LayerParams(kind, mamba_params(arch))
    if kind == "*":
        return LayerParams(kind, attention_params(arch))
    if kind == "-":
        return LayerParams(kind, mlp_params(arch, arch.ffn) + _norm(arch))
    raise ValueError(f"unknown layer kind {kind!r}")


def mtp_params(arch: ModelArch) -> int:
    """The parameters of the ``mtp_layers`` multi-token prediction modules a production model adds
    (DeepSeek-V3 technical report, section 2.2; Megatron's ``MultiTokenPredictionLayer``), which
    ``count_params`` leaves out: the torch engine does not build them. Each: RMSNorms of the
    embedding and of the hidden state, the ``2 hidden -> hidden`` projection of the two joined, one
    MoE layer (DeepSeek-V3's is, as its last layer) and the module's final RMSNorm; the embedding
    and the output layer are the main model's, shared."""
    if not arch.mtp_layers:
        return 0
    kind = "E" if arch.moe_layers else "A"
    per_module = 3 * _norm(arch) + 2 * arch.hidden * arch.hidden + layer_params(arch, kind).total
    return arch.mtp_layers * per_module


def count_params(arch: ModelArch) -> ParamCount:
    """The main model's parameters, as the torch engine builds it: ``mtp_params`` is apart."""
    embedding = arch.vocab * arch.hidden
    return ParamCount(
        embedding=embedding,
        output=0 if arch.tied_embeddings else embedding,
        final_norm=_norm(arch),
        layers=tuple(layer_params(arch, kind) for kind in arch.layer_kinds()),
    )
