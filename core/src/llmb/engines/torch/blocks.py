"""Reusable PyTorch building blocks of the benchmark model families.

Every block is written from the math it computes and creates its parameters
in the default dtype on the default device (the engine builds under
``torch.device("meta")`` to count parameters without memory, and applies
autocast on GPU). No block has a bias except the ones the models have: the
Mamba2 depthwise convolution and LayerNorm1p, and those that GPT-OSS's options
add (attention and expert biases). The parameter shapes reproduce
``llmb.recipes.params`` exactly, layer kind by layer kind:

* ``A``: pre-norm -> attention -> residual, pre-norm -> dense MLP -> residual
* ``E``: pre-norm -> attention -> residual, pre-norm -> routed MoE -> residual
* ``M``: pre-norm -> Mamba2 mixer -> residual
* ``*``: pre-norm -> attention -> residual
* ``-``: pre-norm -> dense MLP -> residual

After materialising a meta-built model (``model.to_empty(device=...)``), call
``initialize(model)`` to give every parameter its initial value again.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from llmb.engines.torch import kernels, loss
from llmb.recipes.records import ModelArch

__all__ = [
    "CausalLM",
    "ClampedSwiGLU",
    "DecoderLayer",
    "GatedRMSNorm",
    "GroupedQueryAttention",
    "LayerNorm1p",
    "LayerParts",
    "Mamba2Mixer",
    "PreNormResidual",
    "RMSNorm",
    "RotaryEmbedding",
    "RoutedMoE",
    "SquaredReLUMLP",
    "SwiGLU",
    "YaRN",
    "attention_with_sinks",
    "causal_depthwise_conv",
    "causal_window_mask",
    "count_parameters",
    "initialize",
    "make_norm",
    "ssd_scan",
]


def _wide(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32, or kept in float64: norms, decays and step sizes need the range."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


# --------------------------------------------------------------------------
# Norms


class RMSNorm(nn.Module):
    """Root-mean-square norm: ``x / sqrt(mean(x^2) + eps) * weight``.

    No centring and no bias; ``dim`` parameters. Computed in (at least)
    float32 and returned in the input's dtype.
    """

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = _wide(x)
        normed = wide * torch.rsqrt(wide.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (normed * _wide(self.weight)).to(x.dtype)


class LayerNorm1p(nn.Module):
    """Nemotron's LayerNorm with a zero-centred scale.

    Normalises to zero mean and unit variance, then applies ``(1 + weight)``
    and ``bias``. The weight is stored as the offset from one (initialised to
    zero), which is what makes weight decay pull the scale towards one.
    ``2 * dim`` parameters. At zero weight it is exactly a plain LayerNorm.
    """

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))
        self.bias = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (self.dim,), 1 + self.weight, self.bias, self.eps)


class GatedRMSNorm(nn.Module):
    """Mamba2's output norm: RMS-normalise ``x * silu(gate)``, then scale.

    The mean square is taken over groups of ``group_size`` channels (one
    group per Mamba2 B/C group, as Nemotron-H does); ``dim`` parameters.
    """

    def __init__(self, dim: int, group_size: int | None = None, eps: float = 1e-5) -> None:
        super().__init__()
        self.group_size = group_size or dim
        if dim % self.group_size:
            raise ValueError(
                f"GatedRMSNorm: dim {dim} is not a multiple of group_size {self.group_size}"
            )
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        gated = _wide(x) * F.silu(_wide(gate))
        grouped = gated.unflatten(-1, (-1, self.group_size))
        grouped = grouped * torch.rsqrt(grouped.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (grouped.flatten(-2) * _wide(self.weight)).to(x.dtype)


def make_norm(arch: ModelArch) -> Callable[[int], nn.Module]:
    """The norm class that ``arch.norm`` names (``rmsnorm`` or ``layernorm1p``)."""
    norms: dict[str, Callable[[int], nn.Module]] = {"rmsnorm": RMSNorm, "layernorm1p": LayerNorm1p}
    if arch.norm not in norms:
        raise ValueError(f"unknown norm {arch.norm!r}; known: {', '.join(norms)}")
    return norms[arch.norm]


# --------------------------------------------------------------------------
# Rotary position embedding


@dataclass(frozen=True)
class YaRN:
    """YaRN's RoPE scaling ("NTK-by-parts" interpolation plus an attention factor), from the paper
    (Peng et al. 2023, arXiv 2309.00071, section 3) as Hugging Face's ``rope_scaling`` of
    ``rope_type: yarn`` configures it.

    A model trained at ``original_positions`` tokens is stretched ``factor`` times: a pair whose
    wavelength is short (it turns more than ``beta_fast`` times over ``original_positions``) keeps
    its frequency, one that turns fewer than ``beta_slow`` times is interpolated (its frequency
    divided by ``factor``), and the pairs between ramp linearly from one to the other. With
    ``truncate`` (Hugging Face's default) the ramp's ends are rounded outwards to whole pairs;
    GPT-OSS's config sets ``truncate: false``. ``attention_factor`` scales cos and sin (so the
    attention logits by its square): by default the paper's ``0.1 ln(factor) + 1``.
    """

    factor: float
    original_positions: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    truncate: bool = True
    mscale: float | None = None  # the attention factor; None: 0.1 * ln(factor) + 1

    @property
    def attention_factor(self) -> float:
        if self.mscale is not None:
            return self.mscale
        return 0.1 * math.log(self.factor) + 1.0 if self.factor > 1 else 1.0

    def ramp_bounds(self, rotary_dim: int, base: float) -> tuple[float, float]:
        """The pair indices where the ramp from extrapolation (below) to interpolation (above) starts
        and ends: pair ``i`` turns ``r`` times over the original context where
        ``i = rotary_dim * ln(original_positions / (2 pi r)) / (2 ln(base))``, at ``r = beta_fast``
        and ``r = beta_slow``; kept within ``[0, rotary_dim - 1]``."""

        def pair_turning(rotations: float) -> float:
            turns = self.original_positions / (rotations * 2 * math.pi)
            return rotary_dim * math.log(turns) / (2 * math.log(base))

        low, high = pair_turning(self.beta_fast), pair_turning(self.beta_slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        return max(low, 0), min(high, rotary_dim - 1)

    def inverse_frequencies(
        self, rotary_dim: int, base: float, device: torch.device, dtype: torch.dtype
    ) -> torch.Tensor:
        """Each pair's frequency ``[rotary_dim / 2]``: ``base^(-2i/rotary_dim)`` blended with itself
        divided by ``factor``, by a ramp that is 0 below ``ramp_bounds``' low end, 1 above its high end."""
        exponent = torch.arange(0, rotary_dim, 2, device=device, dtype=dtype) / rotary_dim
        extrapolated = base**-exponent
        low, high = self.ramp_bounds(rotary_dim, base)
        width = high - low if high != low else 0.001  # one pair: a step, not a division by zero
        pairs = torch.arange(rotary_dim // 2, device=device, dtype=dtype)
        ramp = ((pairs - low) / width).clamp(0, 1)
        return extrapolated * (1 - ramp) + extrapolated / self.factor * ramp


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (RoPE) over the first ``fraction`` of each head.

    The first ``rotary_dim = fraction * head_dim`` channels of a head are
    taken as ``rotary_dim / 2`` pairs ``(x[i], x[i + rotary_dim/2])``; pair
    ``i`` at position ``p`` is rotated by the angle ``p * base^(-2i/rotary_dim)``.
    The remaining channels pass through unchanged (Nemotron-4 rotates half).
    No parameters. The cos/sin tables are built once per sequence length,
    device and dtype and kept (one instance serves every layer of a model).

    With ``scaling_factor`` > 1 the frequencies are YaRN's for a model
    trained at ``original_positions`` tokens (``beta_fast``, ``beta_slow``,
    ``truncate`` and ``attention_factor`` as ``YaRN`` describes them, Hugging
    Face's ``rope_scaling`` names aside): cos and sin are then multiplied by
    the attention factor.
    """

    def __init__(
        self,
        head_dim: int,
        base: float = 10_000.0,
        fraction: float = 1.0,
        *,
        scaling_factor: float = 1.0,
        original_positions: int = 0,
        beta_fast: float = 32.0,
        beta_slow: float = 1.0,
        truncate: bool = True,
        attention_factor: float | None = None,
    ) -> None:
        super().__init__()
        rotary_dim = int(head_dim * fraction)
        rotary_dim -= rotary_dim % 2
        if not 0 < rotary_dim <= head_dim:
            raise ValueError(
                f"RotaryEmbedding: fraction {fraction} of head_dim {head_dim} rotates nothing"
            )
        self.head_dim = head_dim
        self.rotary_dim = rotary_dim
        self.base = base
        self.yarn = None
        if scaling_factor > 1:
            if original_positions <= 0:
                raise ValueError("RotaryEmbedding: YaRN scaling needs original_positions")
            self.yarn = YaRN(
                scaling_factor, original_positions, beta_fast, beta_slow, truncate, attention_factor
            )
        self._tables: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def inverse_frequencies(self, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """Pair ``i``'s angle per position, ``[rotary_dim / 2]``: ``base^(-2i/rotary_dim)``, or YaRN's."""
        if self.yarn is not None:
            return self.yarn.inverse_frequencies(self.rotary_dim, self.base, device, dtype)
        exponent = torch.arange(0, self.rotary_dim, 2, device=device, dtype=dtype) / self.rotary_dim
        return self.base**-exponent

    def angles(
        self, seq_len: int, device: torch.device, dtype: torch.dtype = torch.float32
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of every position's angles, ``[seq_len, rotary_dim]`` in ``dtype`` (cached)."""
        key = (seq_len, torch.device(device), dtype)
        tables = self._tables.get(key)
        return tables if tables is not None else self._build(key)

    @torch.compiler.disable
    def _build(self, key: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        seq_len, device, dtype = key
        wide = torch.promote_types(dtype, torch.float32)
        with torch.no_grad(), torch.inference_mode(False):  # usable by later training steps
            inv_freq = self.inverse_frequencies(device, wide)
            positions = torch.arange(seq_len, device=device, dtype=wide)
            theta = torch.outer(positions, inv_freq)
            theta = torch.cat((theta, theta), dim=-1)
            scale = 1.0 if self.yarn is None else self.yarn.attention_factor
            tables = (theta.cos() * scale).to(dtype), (theta.sin() * scale).to(dtype)
        self._tables[key] = tables
        return tables

    def rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotate ``x [..., head_dim]`` by ``cos``/``sin``, which broadcast against ``x[..., :rotary_dim]``.

        Computed in the tables' dtype, returned in ``x``'s.
        """
        rot, rest = x[..., : self.rotary_dim], x[..., self.rotary_dim :]
        wide = rot.to(cos.dtype)
        first, second = wide.chunk(2, dim=-1)
        rot = (wide * cos + torch.cat((-second, first), dim=-1) * sin).to(x.dtype)
        return torch.cat((rot, rest), dim=-1) if rest.shape[-1] else rot

    def rotate_sequence_first(self, x: torch.Tensor) -> torch.Tensor:
        """Rotate ``x [batch, seq, heads, head_dim]`` (the projection's own layout)."""
        cos, sin = self.angles(x.shape[1], x.device, torch.promote_types(x.dtype, torch.float32))
        return self.rotate(x, cos.unsqueeze(1), sin.unsqueeze(1))

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate queries and keys, both ``[batch, heads, seq, head_dim]``."""
        cos, sin = self.angles(q.shape[-2], q.device, torch.promote_types(q.dtype, torch.float32))
        return self.rotate(q, cos, sin), self.rotate(k, cos, sin)


# --------------------------------------------------------------------------
# Attention


class GroupedQueryAttention(nn.Module):
    """Causal self-attention with grouped queries (GQA).

    ``heads`` query heads share ``query_groups`` key/value heads (query head
    ``i`` reads KV head ``i // (heads / query_groups)``). One fused input
    projection ``qkv_proj`` whose output is q, k and v laid end to end
    (``heads * head_dim``, then ``query_groups * head_dim`` twice), and an
    output projection, without biases (but see ``bias``); optional RoPE on q and k (rotated in
    one call); softmax(q k^T / sqrt(head_dim)) v under a causal mask through
    ``kernels.attention`` (SDPA; an explicit fused-kernel choice on GPU).
    With ``qk_norm`` (a norm class, e.g. ``RMSNorm``, called with
    ``head_dim``), every query head and every key head is normalised over its
    ``head_dim`` channels before RoPE, one weight for all query heads
    (``q_norm``) and one for all key heads (``k_norm``): Qwen3's QK-norm.
    Tensor parallelism may lower ``heads`` and ``query_groups`` to a rank's
    local counts, with ``qkv_proj`` holding that rank's q|k|v rows (the
    per-head norms are the same on every rank). The layer's pre-norm is not
    part of it.

    GPT-OSS's options (its model card, and ``modeling_gpt_oss.py`` in Hugging
    Face transformers): with ``bias`` both projections have biases; with
    ``sliding_window`` w > 0 a token attends to itself and the w - 1 tokens
    before it, no further back; with ``sinks`` each query head has one
    learned logit ``sinks[head]`` (initialised to 0) that joins every row of
    its scores in the softmax and is dropped after it, so a row's weights sum
    to less than one: ``softmax([q k^T / sqrt(head_dim), sink])[:-1] v``.
    It stays on SDPA, given the window as a boolean mask, and the sinks as
    one key more (``attention_with_sinks``).
    """

    def __init__(
        self,
        hidden: int,
        heads: int,
        query_groups: int,
        head_dim: int,
        rope: RotaryEmbedding | None = None,
        qk_norm: Callable[[int], nn.Module] | None = None,
        *,
        bias: bool = False,
        sliding_window: int = 0,
        sinks: bool = False,
    ) -> None:
        super().__init__()
        if heads % query_groups:
            raise ValueError(
                f"GroupedQueryAttention: {heads} heads do not split into {query_groups} groups"
            )
        if sliding_window < 0:
            raise ValueError(f"GroupedQueryAttention: sliding_window {sliding_window} < 0")
        self.heads, self.query_groups, self.head_dim = heads, query_groups, head_dim
        self.qkv_proj = nn.Linear(hidden, (heads + 2 * query_groups) * head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=bias)
        self.rope = rope
        self.q_norm = qk_norm(head_dim) if qk_norm is not None else None
        self.k_norm = qk_norm(head_dim) if qk_norm is not None else None
        self.sliding_window = sliding_window
        self.sinks = nn.Parameter(torch.empty(heads)) if sinks else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The sinks (the projections reset themselves): zero, a sink as strong as a zero score."""
        if self.sinks is not None:
            nn.init.zeros_(self.sinks)

    def extra_repr(self) -> str:
        window = f"sliding_window={self.sliding_window}, " if self.sliding_window else ""
        return f"{window}sinks={self.sinks is not None}"

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal attention of ``q [b, h, s, d]`` over ``k, v [b, g, s, d]``, windowed and with sinks
        as configured: ``[b, h, s, d]``."""
        if self.sinks is None and not self.sliding_window:
            return kernels.attention(q, k, v)
        allowed = causal_window_mask(q.shape[-2], self.sliding_window, q.device)
        if self.sinks is None:
            gqa = q.shape[1] != k.shape[1]
            return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=gqa)
        return attention_with_sinks(q, k, v, allowed, self.sinks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        heads, groups = self.heads, self.query_groups
        # [b, s, h + 2g, d]
        qkv = self.qkv_proj(x).unflatten(-1, (heads + 2 * groups, self.head_dim))
        qk, v = qkv[:, :, : heads + groups], qkv[:, :, heads + groups :]
        if self.q_norm is not None:
            qk = torch.cat((self.q_norm(qk[:, :, :heads]), self.k_norm(qk[:, :, heads:])), dim=2)
        if self.rope is not None:
            qk = self.rope.rotate_sequence_first(qk)
        q, k = qk[:, :, :heads], qk[:, :, heads:]
        out = self.attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, heads * self.head_dim))


def causal_window_mask(seq: int, window: int, device: torch.device) -> torch.Tensor:
    """``[seq, seq]`` booleans, True where query ``t`` may read key ``s``: ``s <= t``, and with a
    ``window`` w > 0 also ``t - s < w`` (the token itself and the w - 1 before it, as GPT-OSS's
    reference implementation and transformers' ``sliding_window_overlay`` mask)."""
    positions = torch.arange(seq, device=device)
    distance = positions.unsqueeze(1) - positions.unsqueeze(0)  # t - s
    allowed = distance >= 0
    return allowed & (distance < window) if window else allowed


def attention_with_sinks(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, sinks: torch.Tensor
) -> torch.Tensor:
    """``softmax([q k^T / sqrt(d) masked by allowed, sink]) v`` without the sink's column, per query
    head (``q [b, h, s, d]``, ``k, v [b, g, s, d]``, head i reading KV head ``i // (h / g)``,
    ``allowed [s, s]``, ``sinks [h]``): ``[b, h, s, d]``.

    Computed by SDPA over one key more, so that a fused kernel (memory linear in the sequence) can
    run it: every query carries its head's sink logit in one extra channel, the real keys carry 0
    there (their scores are unchanged) and the extra key, which every query sees, carries
    ``sqrt(d)``, so its score is exactly the sink; its value is zero, so it adds nothing but its
    share of the softmax's denominator. The extra channels are padded to 8 (the fused kernels'
    alignment); the scale stays ``1 / sqrt(d)``.
    """
    batch, heads, seq, dim = q.shape
    groups = k.shape[1]
    # on a GPU, KV heads repeated (as kernels.attention does where a fused kernel takes no grouped KV)
    if q.device.type == "cuda" and groups != heads:
        k, v = k.repeat_interleave(heads // groups, 1), v.repeat_interleave(heads // groups, 1)
    kv_heads = k.shape[1]
    sink = sinks.to(q.dtype).view(1, heads, 1, 1).expand(batch, -1, seq, 1)
    q = torch.cat((q, sink, q.new_zeros(batch, heads, seq, _SINK_CHANNELS - 1)), dim=-1)
    sink_key = k.new_zeros(batch, kv_heads, 1, dim + _SINK_CHANNELS)
    sink_key[..., dim] = math.sqrt(dim)
    k = torch.cat((F.pad(k, (0, _SINK_CHANNELS)), sink_key), dim=2)
    v = F.pad(v, (0, _SINK_CHANNELS, 0, 1))  # the extra channels, and the sink's zero value
    mask = torch.cat((allowed, allowed.new_ones(seq, 1)), dim=1)  # every query sees the sink
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=1 / math.sqrt(dim), enable_gqa=kv_heads != heads
    )
    return out[..., :dim]


_SINK_CHANNELS = 8  # the channels ``attention_with_sinks`` adds to each head


# --------------------------------------------------------------------------
# MLPs


class SwiGLU(nn.Module):
    """Gated MLP: ``down(silu(gate(x)) * up(x))``; three ``hidden x ffn`` matrices.

    The gate and up matrices are one fused projection ``gate_up_proj``
    (``2 * ffn`` outputs: the gate's, then the up's), computed in one product
    and split in two. With ``bias`` both projections have biases.
    """

    def __init__(self, hidden: int, ffn: int, bias: bool = False) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(hidden, 2 * ffn, bias=bias)
        self.down_proj = nn.Linear(ffn, hidden, bias=bias)

    def activate(self, gate_up: torch.Tensor) -> torch.Tensor:
        """The fused projection's output ``[..., 2 * ffn]`` -> ``silu(gate) * up`` ``[..., ffn]``."""
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.activate(self.gate_up_proj(x)))


class ClampedSwiGLU(SwiGLU):
    """GPT-OSS's expert MLP, a SwiGLU with clamped inputs and biases:
    ``down((clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g))``, ``g = min(gate, limit)``.

    ``alpha`` 1.702 and ``limit`` 7.0 are OpenAI's reference implementation's (``swiglu`` in
    openai/gpt-oss ``gpt_oss/torch/model.py``; ``swiglu_limit`` in the models' config.json, and
    transformers' ``swiglu_alpha``/``swiglu_limit`` defaults). The fused ``gate_up_proj`` is laid
    out as ``SwiGLU``'s, the gate's ``ffn`` rows and then the up's (GPT-OSS's checkpoints interleave
    them, gate and up alternating); with ``bias`` (GPT-OSS's) both projections have biases.
    """

    def __init__(
        self, hidden: int, ffn: int, bias: bool = False, alpha: float = 1.702, limit: float = 7.0
    ) -> None:
        super().__init__(hidden, ffn, bias)
        self.alpha, self.limit = alpha, limit

    def activate(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        gate = gate.clamp(max=self.limit)
        up = up.clamp(-self.limit, self.limit)
        return (up + 1) * gate * torch.sigmoid(self.alpha * gate)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, limit={self.limit}"


class SquaredReLUMLP(nn.Module):
    """Ungated MLP with a squared ReLU: ``down(relu(up(x))^2)``; two matrices."""

    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.relu(self.up_proj(x)).square())


def make_mlp(arch: ModelArch) -> Callable[[int], nn.Module]:
    """The MLP class that ``arch.activation`` names, as ``ffn -> module``."""
    if arch.activation not in MLPS:
        raise ValueError(f"unknown activation {arch.activation!r}; known: {', '.join(MLPS)}")
    mlp = MLPS[arch.activation]
    # a dense MLP: no bias (``expert_bias`` is the experts')
    return lambda ffn: mlp(arch.hidden, ffn)


# ``ModelArch.activation`` -> its MLP class (and the routed experts' class, ``RoutedMoE``)
MLPS: dict[str, type[nn.Module]] = {
    "swiglu": SwiGLU,
    "squared_relu": SquaredReLUMLP,
    "swiglu_clamped": ClampedSwiGLU,
}


# --------------------------------------------------------------------------
# Mixture of experts


def _check_expert_groups(experts: int, topk: int, groups: int, topk_groups: int) -> None:
    """ValueError unless ``groups`` (0 or 1: not grouped) split ``experts`` into groups of two or more
    of which ``topk_groups`` hold at least ``topk`` experts."""
    if groups <= 1:
        return
    if experts % groups or experts // groups < 2:
        raise ValueError(
            f"RoutedMoE: {experts} experts do not split into {groups} groups of two or more"
        )
    if not 0 < topk_groups <= groups or topk > topk_groups * (experts // groups):
        raise ValueError(
            f"RoutedMoE: topk_groups {topk_groups} must be in 1..{groups} and its groups must hold "
            f"the top {topk} experts"
        )


class _Router(nn.Linear):
    """The MoE router's projection ``hidden -> experts`` with DeepSeek-V3's score-correction bias, a
    float32 buffer ``score_correction_bias`` (zero at initialisation). It lives beside the weight it
    corrects so that whatever takes the router over (expert parallelism's layer holds the same router
    module) carries it too, and ``initialize`` resets both."""

    def __init__(self, hidden: int, experts: int, bias: bool = False) -> None:
        super().__init__(hidden, experts, bias=bias)
        self.register_buffer("score_correction_bias", torch.zeros(experts, dtype=torch.float32))

    def reset_parameters(self) -> None:
        super().reset_parameters()
        # None while nn.Linear's __init__ runs, before the buffer is registered
        correction = getattr(self, "score_correction_bias", None)
        if correction is not None:
            nn.init.zeros_(correction)


class RoutedMoE(nn.Module):
    """Token-choice mixture of SwiGLU experts, plus an optional shared expert.

    A bias-free router scores every token against every expert; each token
    goes to its ``topk`` highest-scoring experts. The routing weights are the
    chosen logits through a sigmoid (Llama 4) or a softmax over the chosen k
    (Mixtral-style). With ``weight_inputs`` the weight scales the token before
    its expert (Llama 4's choice), otherwise the expert's output. The shared
    expert, when present, sees every token and is added unweighted.

    Tokens are grouped by expert (a stable sort by expert id) with no host
    synchronisation; each expert is a ``SwiGLU`` and runs once on its batch
    of tokens, an empty batch included, so every expert's parameters take
    part in every step (DDP then reduces all of them, whatever the routing).
    On a GPU where the grouped GEMM is fast the experts run as two grouped
    products over their stacked weights (``kernels.grouped_mm``); elsewhere
    one product per expert. The outputs return to token order by a
    permutation and a sum over each token's k choices (no atomics). No
    load-balancing loss.

    GPT-OSS's options (its model card; ``GptOssMLP`` in transformers): with
    ``bias`` the router and every expert's projections have biases (an
    expert's output bias is weighted with the rest of its output);
    ``activation`` names the experts' MLP as ``ModelArch.activation`` does,
    ``"swiglu_clamped"`` for GPT-OSS's ``ClampedSwiGLU``.

    DeepSeekMoE's routing (DeepSeek-V3 technical report, arXiv:2412.19437,
    section 2.1.2; transformers' ``DeepseekV3TopkRouter``), when any of its
    options is set: every expert's score is ``score`` of its logit (sigmoid
    for DeepSeek-V3 and Kimi-K2); with ``score_correction`` a per-expert bias
    (a float32 buffer, ``router.score_correction_bias``, zero at
    initialisation and never trained by gradient: DeepSeek's
    auxiliary-loss-free balancing adjusts it between steps, which the proxy
    does not) is added to the scores for choosing experts only; with
    ``expert_groups`` G > 1 the experts form G consecutive groups, a group's
    score is the sum of its two best (corrected) scores, and only the best
    ``topk_groups`` groups are chosen from; the top ``topk`` experts among
    those are chosen, their uncorrected scores are the weights, renormalised
    to sum to one with ``normalize`` (``norm_topk_prob``) and multiplied by
    ``scaling`` (``routed_scaling_factor``).
    """

    def __init__(
        self,
        hidden: int,
        experts: int,
        moe_ffn: int,
        topk: int,
        shared_ffn: int = 0,
        score: str = "softmax",
        weight_inputs: bool = False,
        *,
        bias: bool = False,
        activation: str = "swiglu",
        score_correction: bool = False,
        expert_groups: int = 0,
        topk_groups: int = 0,
        normalize: bool = False,
        scaling: float = 1.0,
    ) -> None:
        super().__init__()
        if score not in ("softmax", "sigmoid"):
            raise ValueError(f"RoutedMoE: unknown score {score!r}; known: softmax, sigmoid")
        if not 0 < topk <= experts:
            raise ValueError(f"RoutedMoE: topk {topk} must be in 1..{experts}")
        _check_expert_groups(experts, topk, expert_groups, topk_groups)
        self.expert_groups, self.topk_groups = expert_groups, topk_groups
        self.normalize, self.scaling = normalize, scaling
        # DeepSeekMoE's routing: every expert's score, then the choice (see the class docstring)
        self.scores_all = score_correction or expert_groups > 1 or normalize or scaling != 1.0
        expert = {"swiglu": SwiGLU, "swiglu_clamped": ClampedSwiGLU}.get(activation)
        if expert is None:
            raise ValueError(
                f"RoutedMoE: unknown activation {activation!r}; known: swiglu, swiglu_clamped"
            )
        self.hidden, self.topk, self.score, self.weight_inputs = hidden, topk, score, weight_inputs
        self.router = (
            _Router(hidden, experts, bias) if score_correction else nn.Linear(hidden, experts, bias)
        )
        self.experts = nn.ModuleList(expert(hidden, moe_ffn, bias=bias) for _ in range(experts))
        self.shared_expert = SwiGLU(hidden, shared_ffn) if shared_ffn else None

    def route(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Routing weights and expert ids of ``tokens [T, hidden]``, both ``[T, topk]``."""
        logits = self.router(tokens)
        if self.scores_all:
            return self._route_by_all_scores(logits)
        top, ids = logits.topk(self.topk, dim=-1)
        weights = (
            torch.sigmoid(top.float())
            if self.score == "sigmoid"
            else torch.softmax(top.float(), dim=-1)
        )
        return weights, ids

    def _route_by_all_scores(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """DeepSeekMoE's routing of ``logits [T, experts]`` (scores in float32): weights and ids, ``[T, topk]``."""
        wide = logits.float()
        scores = torch.sigmoid(wide) if self.score == "sigmoid" else torch.softmax(wide, dim=-1)
        correction = getattr(self.router, "score_correction_bias", None)
        choice = scores if correction is None else scores + correction.float()
        if self.expert_groups > 1:
            choice = self._within_best_groups(choice)
        ids = choice.topk(self.topk, dim=-1).indices
        weights = scores.gather(-1, ids)
        if self.normalize:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return weights * self.scaling, ids

    def _within_best_groups(self, choice: torch.Tensor) -> torch.Tensor:
        """``choice [T, experts]`` with every expert outside each token's best ``topk_groups`` groups set to
        -inf; a group's score is the sum of its two best experts' (DeepSeek-V3's group-limited routing)."""
        grouped = choice.unflatten(-1, (self.expert_groups, -1))  # [T, G, experts per group]
        group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)  # [T, G]
        best = group_scores.topk(self.topk_groups, dim=-1).indices
        kept = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(-1, best, True)
        return grouped.masked_fill(~kept.unsqueeze(-1), -math.inf).flatten(-2)

    def run_experts(self, tokens: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Expert ``e`` on its ``counts[e]`` consecutive rows of ``tokens`` (grouped by expert, in order)."""
        device = tokens.device
        dtype = (
            torch.get_autocast_dtype(device.type)
            if torch.is_autocast_enabled(device.type)
            else tokens.dtype
        )
        ffn = self.experts[0].down_proj.in_features
        if kernels.grouped_mm_usable(device, dtype, self.hidden, ffn):
            offsets = counts.cumsum(0).to(torch.int32)
            gate_up = torch.stack(
                [e.gate_up_proj.weight.to(dtype) for e in self.experts]
            ).transpose(1, 2)
            down = torch.stack([e.down_proj.weight.to(dtype) for e in self.experts]).transpose(1, 2)
            first = self._with_bias(
                kernels.grouped_mm(tokens.to(dtype), gate_up, offsets), "gate_up_proj", counts
            )
            hidden = self.experts[0].activate(first)
            return self._with_bias(kernels.grouped_mm(hidden, down, offsets), "down_proj", counts)
        chunks = tokens.split(counts.tolist())  # on CPU a host read, not a device synchronisation
        return torch.cat(
            [expert(chunk) for expert, chunk in zip(self.experts, chunks, strict=True)]
        )

    def _with_bias(self, rows: torch.Tensor, projection: str, counts: torch.Tensor) -> torch.Tensor:
        """``rows`` (grouped by expert, ``counts[e]`` each) plus expert e's bias of ``projection``, if any."""
        if getattr(self.experts[0], projection).bias is None:
            return rows
        biases = torch.stack([getattr(e, projection).bias for e in self.experts]).to(rows.dtype)
        experts = torch.arange(len(self.experts), device=rows.device)
        # no host synchronisation: the output size is known
        owner = torch.repeat_interleave(experts, counts, output_size=rows.shape[0])
        return rows + biases[owner]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, self.hidden)
        weights, ids = self.route(tokens)
        flat_ids = ids.flatten()  # assignment j is token j // topk
        order = flat_ids.argsort(stable=True)
        counts = torch.zeros(len(self.experts), dtype=torch.int64, device=x.device)
        counts.scatter_add_(0, flat_ids, torch.ones_like(flat_ids))
        w = weights.flatten()[order].unsqueeze(-1)
        chosen = tokens[order // self.topk]
        if self.weight_inputs:
            y = self.run_experts((chosen * w).to(chosen.dtype), counts).to(tokens.dtype)
        else:
            y = (self.run_experts(chosen, counts) * w).to(tokens.dtype)
        out = (
            torch.empty_like(y).index_copy(0, order, y).view(-1, self.topk, self.hidden).sum(dim=1)
        )
        if self.shared_expert is not None:
            out = out + self.shared_expert(tokens).to(out.dtype)
        return out.view_as(x)


# --------------------------------------------------------------------------
# Mamba2


def _shifted_prefix_sum(values: torch.Tensor) -> torch.Tensor:
    """The inclusive cumulative sum of ``values`` over its last dimension, as ``ceil(log2(L))`` shifted
    additions (a Hillis-Steele scan): ``out[..., t] = sum_{s <= t} values[..., s]``. Plain pointwise
    work for any compiler, with a pointwise backward; unlike a product with a triangular ones matrix
    (whose inputs TF32 would round to 10 bits) it stays float32 additions whatever the matmul
    precision setting. Only the order of summation differs from a sequential cumsum: the same sums up
    to float rounding."""
    length, shift = values.shape[-1], 1
    while shift < length:
        values = values + F.pad(values[..., :-shift], (shift, 0))
        shift *= 2
    return values


def _prefix_sum(values: torch.Tensor) -> torch.Tensor:
    """The cumulative sum of ``values`` over its last dimension: ``torch.cumsum`` when run eagerly, the
    shifted additions of ``_shifted_prefix_sum`` in a graph that ``torch.compile`` builds.

    Not ``torch.cumsum`` in a compiled graph, on purpose: Inductor lowers a cumsum over a long
    dimension on a GPU to its split scan (``SplitScan``), whose code generation failed on torch 2.11 at
    Nemotron-H 56B's shapes (``InductorError: TypeError: list indices must be integers or slices, not
    NoneType``, buffer ``[1, 8, 32, 32, 256]``: the chunk's 256 steps), so a compiled Mamba2 layer
    could not run. Eagerly the one native kernel is the faster (the shifted additions took a quarter
    longer in a tiny proxy's scan on a CPU, forward and backward).
    """
    if torch.compiler.is_compiling():
        return _shifted_prefix_sum(values)
    return values.cumsum(dim=-1)


def _segment_decay(cumulative: torch.Tensor) -> torch.Tensor:
    """``exp(cumulative[t] - cumulative[s])`` for every ``t >= s`` (zero above).

    ``cumulative [..., L]`` (a cumulative sum of log-decays, in at least
    float32) -> ``[..., L(t), L(s)]``: the decay from step s to step t; the
    masked entries become exactly zero.
    """
    length = cumulative.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=cumulative.device).tril()
    segment = (cumulative.unsqueeze(-1) - cumulative.unsqueeze(-2)).masked_fill(~causal, -math.inf)
    return segment.exp()


def ssd_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk: int,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mamba2's selective state-space scan (SSD), computed chunk by chunk.

    Shapes: ``x [b, s, h, p]`` (h heads of p channels), ``dt [b, s, h]``
    (positive step sizes), ``A [h]`` (negative), ``B, C [b, s, g, n]`` (g
    groups of state size n; head i uses group ``i // (h / g)``). The
    recurrence it computes, per head, with a state ``H [p, n]``::

        H_t = exp(dt_t * A) * H_{t-1} + dt_t * x_t B_t^T
        y_t = H_t C_t

    Within a chunk of ``chunk`` steps the outputs are the quadratic
    (attention-like) form ``y_t = sum_{s<=t} (C_t . B_s) exp(sum_{s<r<=t} dt_r A) dt_s x_s``;
    each chunk also yields the state it leaves behind, and a recurrence over
    chunks carries the state forward, contributing ``exp(sum_{r<=t} dt_r A) H_prev C_t``
    to every output of the next chunk. A sequence that is not a multiple of
    ``chunk`` is zero-padded at the end (``dt = 0`` there: no decay, no input).

    Returns ``y [b, s, h, p]`` and the final state ``[b, h, p, n]``.
    """
    batch, seq, heads, head_dim = x.shape
    groups, state = B.shape[-2], B.shape[-1]
    per_group = heads // groups
    pad = (-seq) % chunk
    if pad:
        x, dt, B, C = (F.pad(t, (0,) * (2 * (t.dim() - 2)) + (0, pad)) for t in (x, dt, B, C))
    chunks = (seq + pad) // chunk

    # Laid out [b, g, r, c, l, ...] (heads into g groups of r, the sequence into c chunks of l steps), so
    # that every product below is one batched matrix product over (b, g, r, c); B and C have r = 1 and
    # broadcast over a group's heads. (Fewer operations than einsums over the sequence-first layout:
    # what a small model on a CPU spends its time on.)
    xs = x.reshape(batch, chunks, chunk, groups, per_group, head_dim).permute(0, 3, 4, 1, 2, 5)
    dts = dt.reshape(batch, chunks, chunk, groups, per_group).permute(0, 3, 4, 1, 2)
    Bs = B.reshape(batch, chunks, chunk, groups, 1, state).permute(0, 3, 4, 1, 2, 5)
    Cs = C.reshape(batch, chunks, chunk, groups, 1, state).permute(0, 3, 4, 1, 2, 5)
    x_dt = xs * dts.unsqueeze(-1).to(xs.dtype)  # [b, g, r, c, l, p]
    # cumulative log-decay within each chunk, in (at least) float32: [b, g, r, c, l]
    # (compiled: shifted additions, not torch.cumsum; see _prefix_sum)
    cumulative = _prefix_sum(_wide(dts) * _wide(A).view(groups, per_group, 1, 1))

    # 1. within chunks: the quadratic form, masked to s <= t
    # C_t . B_s, shared by a group's heads: [b, g, 1, c, l(t), l(s)]
    scores = Cs @ Bs.transpose(-1, -2)
    y = (scores * _segment_decay(cumulative)).to(x_dt.dtype) @ x_dt  # [b, g, r, c, l, p]

    # 2. the state each chunk leaves behind (from its own inputs only), laid out [n, p]
    # [b, g, r, c, l, 1]
    to_end = (cumulative[..., -1:] - cumulative).exp().unsqueeze(-1).to(x_dt.dtype)
    chunk_states = (Bs * to_end).transpose(-1, -2) @ x_dt  # [b, g, r, c, n, p]

    # 3. across chunks: carry the state forward, decaying by each whole chunk. With no initial state the
    # first chunk enters with none: its state is its own, and nothing enters it.
    chunk_decay = cumulative[..., -1].exp()  # [b, g, r, c]
    if initial_state is None:
        entering, carried, first = [], chunk_states[:, :, :, 0], 1
    else:
        entering, first = [], 0
        carried = initial_state.reshape(batch, groups, per_group, head_dim, state).transpose(-1, -2)
        carried = carried.to(chunk_states.dtype)
    for c in range(first, chunks):
        entering.append(carried)
        carried = (
            chunk_decay[..., c, None, None].to(carried.dtype) * carried + chunk_states[:, :, :, c]
        )

    # 4. what the entering state contributes to each output of its chunk
    if entering:
        if initial_state is None:
            entering.insert(0, torch.zeros_like(carried))
        previous = torch.stack(entering, dim=3)  # [b, g, r, c, n, p]: the state entering each chunk
        from_start = cumulative.exp().unsqueeze(-1).to(x_dt.dtype)  # [b, g, r, c, l, 1]
        y = y + (Cs.to(previous.dtype) * from_start) @ previous

    y = y.permute(0, 3, 4, 1, 2, 5).reshape(batch, chunks * chunk, heads, head_dim)[:, :seq]
    return y, carried.transpose(-1, -2).reshape(batch, heads, head_dim, state)


def causal_depthwise_conv(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """The Mamba2 mixer's depthwise causal convolution of channel-last ``x [b, s, c]``, as its ``nn.Conv1d``
    (``weight [c, 1, K]``, ``bias [c]``, padded by K - 1 and cut to the first s outputs) computes it:
    ``out[t] = bias + sum_k weight[k] * x[t - (K-1) + k]``, written as K shifted products. The CPU's path:
    at the tiny proxy's widths it takes a third less time (forward and backward) than the depthwise
    kernel, which took a sixth of a tiny Nemotron-H layer's; at thousands of channels it is up to a
    seventh slower, a negligible part of a layer beside its projections there."""
    width, seq = weight.shape[-1], x.shape[1]
    taps = weight.squeeze(1)  # [c, K]
    padded = F.pad(x, (0, 0, width - 1, 0))  # K - 1 zero steps before the first
    out = torch.addcmul(bias, padded[:, width - 1 :], taps[:, width - 1])
    for k in range(width - 1):
        out = torch.addcmul(out, padded[:, k : k + seq], taps[:, k])
    return out


# Outside the compiled graph, deliberately: the kernel is an autograd Function whose Python launches
# autotuned Triton kernels (not a registered operator), which Dynamo would otherwise trace through or
# break on in ways that differ between torch versions; run as is, between the compiled parts of its
# layer (one graph break per Mamba2 layer), it is exactly the kernel mamba_ssm's own Mamba2 runs.
@torch.compiler.disable
def _triton_scan(
    scan: Callable,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk: int,
    D: torch.Tensor,
    dt_bias: torch.Tensor,
) -> torch.Tensor:
    """``mamba_ssm``'s ``mamba_chunk_scan_combined`` as mamba_ssm's Mamba2 calls it: ``x [b, s, h, p]``,
    the raw ``dt [b, s, h]`` with ``dt_bias [h]`` and ``dt_softplus=True`` (the kernel takes
    ``softplus(dt + dt_bias)`` in float32, as the plain path does), ``A [h]``, ``B, C [b, s, g, n]``, the
    chunk size and ``D [h]``; returns ``y [b, s, h, p]``, the skip ``D * x`` included (what the plain
    path's ``ssd_scan`` plus its skip compute)."""
    return scan(x, dt, A, B, C, chunk, D=D, dt_bias=dt_bias, dt_softplus=True)


class Mamba2Mixer(nn.Module):
    """The Mamba2 mixer: a gated selective state-space layer.

    ``in_proj`` maps each token to the gate ``z`` (d_inner), the scan input
    ``x`` (d_inner), ``B`` and ``C`` (groups x state each) and one step size
    per head. ``x``, ``B`` and ``C`` go through a depthwise causal 1-d
    convolution (kernel ``conv_kernel``, with bias) and SiLU. The step size
    is ``softplus(dt + dt_bias)``, the decay rate ``A = -exp(A_log)``; the SSD
    scan (``ssd_scan``; on a GPU mamba_ssm's Triton kernel where it loads, see
    ``kernels.mamba_kernels``) runs per head, plus the skip ``D * x``. The result is
    normalised with ``z`` as its gate (``GatedRMSNorm``) and projected back by
    ``out_proj``. d_inner = heads * head_dim. The layer's pre-norm is not part of it.
    """

    def __init__(
        self,
        hidden: int,
        heads: int,
        head_dim: int,
        state: int,
        groups: int,
        conv_kernel: int,
        chunk: int,
        eps: float = 1e-5,
    ) -> None:
        super().__init__()
        if heads % groups:
            raise ValueError(f"Mamba2Mixer: {heads} heads do not split into {groups} groups")
        self.heads, self.head_dim, self.state, self.groups, self.chunk = (
            heads,
            head_dim,
            state,
            groups,
            chunk,
        )
        self.d_inner = heads * head_dim
        self.conv_dim = self.d_inner + 2 * groups * state
        self.in_proj = nn.Linear(hidden, self.d_inner + self.conv_dim + heads, bias=False)
        self.conv1d = nn.Conv1d(
            self.conv_dim,
            self.conv_dim,
            conv_kernel,
            groups=self.conv_dim,
            padding=conv_kernel - 1,
            bias=True,
        )
        self.dt_bias = nn.Parameter(torch.empty(heads))
        self.A_log = nn.Parameter(torch.empty(heads))
        self.D = nn.Parameter(torch.empty(heads))
        self.norm = GatedRMSNorm(self.d_inner, group_size=self.d_inner // groups, eps=eps)
        self.out_proj = nn.Linear(self.d_inner, hidden, bias=False)
        self.reset_parameters()

    def reset_parameters(self, dt_min: float = 1e-3, dt_max: float = 0.1) -> None:
        """Mamba's initialisation of its own per-head parameters: step sizes
        log-uniform in [dt_min, dt_max] (stored through softplus's inverse),
        decay rates uniform in [1, 16], skip 1."""
        with torch.no_grad():
            dt = (
                torch.empty_like(self.dt_bias, dtype=torch.float32)
                .uniform_(math.log(dt_min), math.log(dt_max))
                .exp()
            )
            self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)
            self.A_log.copy_(
                torch.empty_like(self.A_log, dtype=torch.float32).uniform_(1, 16).log()
            )
            self.D.fill_(1.0)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = hidden_states.shape
        fused = kernels.mamba_kernels(hidden_states.device)  # None on CPU: the plain-PyTorch path
        z, xbc, dt = self.in_proj(hidden_states).split(
            [self.d_inner, self.conv_dim, self.heads], dim=-1
        )
        # its widths: 2-4
        if fused is not None and fused.conv is not None and self.conv1d.kernel_size[0] <= 4:
            # channel-last and contiguous, so the kernel's 16-byte stride alignment holds whatever the head count
            xbc = fused.conv(
                xbc.contiguous().transpose(1, 2),
                self.conv1d.weight.squeeze(1),
                self.conv1d.bias,
                activation="silu",
            ).transpose(1, 2)
        elif xbc.device.type == "cpu":
            xbc = F.silu(causal_depthwise_conv(xbc, self.conv1d.weight, self.conv1d.bias))
        else:
            # causal: drop the look-ahead
            xbc = F.silu(self.conv1d(xbc.transpose(1, 2))[..., :seq].transpose(1, 2))
        x, B, C = xbc.split(
            [self.d_inner, self.groups * self.state, self.groups * self.state], dim=-1
        )
        x = x.view(batch, seq, self.heads, self.head_dim)
        B, C = (
            B.view(batch, seq, self.groups, self.state),
            C.view(batch, seq, self.groups, self.state),
        )
        A = -torch.exp(_wide(self.A_log))
        if fused is not None and fused.scan is not None:
            y = _triton_scan(fused.scan, x, dt, A, B, C, self.chunk, self.D, self.dt_bias)
        else:
            dt = F.softplus(_wide(dt) + _wide(self.dt_bias))
            y, _ = ssd_scan(x, dt, A, B, C, self.chunk)
            y = y + x * self.D.view(-1, 1).to(x.dtype)
        y = self.norm(y.reshape(batch, seq, self.d_inner), z)
        return self.out_proj(y)


# --------------------------------------------------------------------------
# Layers and the causal LM


class PreNormResidual(nn.Module):
    """``x + mixer(norm(x))``: one pre-norm residual sub-layer."""

    def __init__(self, norm: nn.Module, mixer: nn.Module) -> None:
        super().__init__()
        self.norm = norm
        self.mixer = mixer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mixer(self.norm(x))


class DecoderLayer(nn.Sequential):
    """One layer of kind ``kind``: its pre-norm residual sub-layers in order."""

    def __init__(self, kind: str, *sublayers: PreNormResidual) -> None:
        super().__init__(*sublayers)
        self.kind = kind

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}"


@dataclass(frozen=True)
class LayerParts:
    """How a family builds the parts of its layers; each factory makes a fresh module.

    ``norm(dim)`` is every pre-norm and the final norm; ``attention()`` the
    token mixer of ``A``, ``E`` and ``*`` layers; ``mlp(ffn)`` the dense MLP
    of ``A`` and ``-`` layers (called with ``arch.ffn``); ``moe()`` the MoE of
    ``E`` layers; ``mamba()`` the mixer of ``M`` layers. A family leaves out
    what its layer kinds do not use.
    """

    norm: Callable[[int], nn.Module]
    attention: Callable[[], nn.Module] | None = None
    mlp: Callable[[int], nn.Module] | None = None
    moe: Callable[[], nn.Module] | None = None
    mamba: Callable[[], nn.Module] | None = None


def build_layer(kind: str, arch: ModelArch, parts: LayerParts) -> DecoderLayer:
    """The layer of kind ``kind`` (see the module docstring), with its pre-norm(s)."""

    def need(name: str) -> Callable:
        factory = getattr(parts, name)
        if factory is None:
            raise ValueError(
                f"layer kind {kind!r} of {arch.family} {arch.size} needs a {name} part"
            )
        return factory

    def sub(mixer: nn.Module) -> PreNormResidual:
        return PreNormResidual(parts.norm(arch.hidden), mixer)

    if kind == "A":
        return DecoderLayer(kind, sub(need("attention")()), sub(need("mlp")(arch.ffn)))
    if kind == "E":
        return DecoderLayer(kind, sub(need("attention")()), sub(need("moe")()))
    if kind == "M":
        return DecoderLayer(kind, sub(need("mamba")()))
    if kind == "*":
        return DecoderLayer(kind, sub(need("attention")()))
    if kind == "-":
        return DecoderLayer(kind, sub(need("mlp")(arch.ffn)))
    raise ValueError(f"unknown layer kind {kind!r} in {arch.family} {arch.size}; known: A E M * -")


class CausalLM(nn.Module):
    """A decoder-only language model assembled from ``arch.layer_kinds()``.

    Token embedding (vocab x hidden) -> the layers, one per kind character ->
    final norm -> output layer (hidden -> vocab, no bias; the embedding
    matrix itself when ``arch.tied_embeddings``). ``forward(input_ids)`` maps
    int64 token ids ``[batch, seq]`` to logits ``[batch, seq, vocab]``;
    ``forward(input_ids, labels)`` returns the mean next-token cross-entropy
    instead, computed chunk by chunk from the final hidden states
    (``llmb.engines.torch.loss``) so that the full float32 logits never exist.
    Training calls the latter through the (DDP-wrapped) module, so the
    gradients are reduced as usual.
    """

    def __init__(self, arch: ModelArch, parts: LayerParts) -> None:
        super().__init__()
        self.arch = arch
        self.embedding = nn.Embedding(arch.vocab, arch.hidden)
        self.layers = nn.ModuleList(build_layer(kind, arch, parts) for kind in arch.layer_kinds())
        self.final_norm = parts.norm(arch.hidden)
        self.output = (
            None if arch.tied_embeddings else nn.Linear(arch.hidden, arch.vocab, bias=False)
        )

    def hidden(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The final hidden states ``[batch, seq, hidden]`` (after the final norm)."""
        x = self.embedding(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.final_norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The output layer on ``hidden``: ``[..., vocab]``."""
        if self.output is None:
            return F.linear(hidden, self.embedding.weight)
        return self.output(hidden)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        hidden = self.hidden(input_ids)
        if labels is None:
            return self.logits(hidden)
        weight = self.embedding.weight if self.output is None else self.output.weight
        # e.g. a vocabulary split by tensor parallelism: its own loss path
        if not loss.chunkable(weight):
            logits = self.logits(hidden)
            return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))
        return loss.chunked_cross_entropy(hidden.flatten(0, -2), weight, labels.flatten())


# --------------------------------------------------------------------------
# Helpers


def count_parameters(module: nn.Module) -> int:
    """Number of distinct parameter elements (a tied matrix counts once)."""
    return sum(p.numel() for p in module.parameters())


def initialize(module: nn.Module, seed: int | None = None) -> nn.Module:
    """Give every parameter of ``module`` its initial value again.

    Calls ``reset_parameters()`` on every sub-module that has one (each
    resets only its own direct parameters). Use it after
    ``module.to_empty(device=...)`` on a model built on the meta device.
    With ``seed``, each sub-module draws from its own seed
    (``module_seed(seed, i)``, i its place in ``module.modules()``), so a
    sub-module's values do not depend on the others: a rank that builds
    only its shard of a model (``llmb.engines.torch.parallel.materialize``) gets
    the values the whole model would have. Without it, one stream serves
    them all, from the current RNG state.
    """
    for index, sub in enumerate(module.modules()):
        reset = getattr(sub, "reset_parameters", None)
        if callable(reset):
            if seed is not None:
                torch.manual_seed(module_seed(seed, index))
            reset()
    return module


def module_seed(seed: int, index: int) -> int:
    """The seed of the ``index``-th sub-module's initial values in a model initialised from ``seed``."""
    return (seed * 1_000_003 + index) % 2**63
