"""Multi-head latent attention (MLA), DeepSeek-V2's and DeepSeek-V3's attention.

Written from the DeepSeek-V2 paper (arXiv:2405.04434, section 2.1) and the DeepSeek-V3 technical
report (arXiv:2412.19437, section 2.1.1), with the numerics of Hugging Face transformers'
``DeepseekV3Attention`` (``modeling_deepseek_v3.py``) as the reference the tests compare against.

Keys and values of every head are expanded from one small latent per token, and each head's query
and key carry a separate, shared rotary part (the "decoupled RoPE"), so that the latent and the one
rotary key are all a decoder would cache. For training, the latent is expanded to full keys and
values and the attention is ordinary causal attention, with keys of ``head_dim`` channels
(``head_dim - rope_head_dim`` from the latent, ``rope_head_dim`` rotated) and values of
``v_head_dim``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from llmb.engines.torch import kernels
from llmb.engines.torch.blocks import RMSNorm, RotaryEmbedding

__all__ = ["LatentAttention", "yarn_mscale"]


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature for a context stretched ``factor`` times: ``0.1 * mscale * ln(factor)
    + 1`` (1 when not stretched). DeepSeek's configs name two of them: ``mscale`` and
    ``mscale_all_dim``; the ratio of the first to the second scales RoPE's cos and sin, and the square
    of the second scales the softmax of every attention layer (transformers' ``yarn_get_mscale``)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


class LatentAttention(nn.Module):
    """Causal multi-head latent attention (MLA), as DeepSeek-V3 and Kimi-K2 compute it.

    Per token ``x`` (``hidden`` wide), with ``nope = head_dim - rope_head_dim``:

    * queries: ``q_b_proj(norm(q_a_proj(x)))`` through a ``q_lora_rank`` bottleneck (or one
      ``q_proj`` when ``q_lora_rank`` is 0), ``heads x head_dim``; each head's first ``nope``
      channels are used as they are, its last ``rope_head_dim`` rotated;
    * keys and values: ``kv_a_proj(x)`` gives the latent (``kv_lora_rank``) and one shared rotary
      key (``rope_head_dim``, the "MQA" part); ``kv_b_proj(norm(latent))`` gives every head's
      ``nope`` key channels and its ``v_head_dim`` value; each head's key is its own ``nope``
      channels followed by the shared rotated key;
    * ``softmax(q k^T * scale) v`` under a causal mask, ``scale = 1 / sqrt(head_dim)``, times
      ``yarn_mscale(factor, mscale_all_dim) ** 2`` when ``rope`` is YaRN-scaled and
      ``mscale_all_dim`` is nonzero (DeepSeek's correction of the softmax temperature);
    * ``o_proj`` from ``heads x v_head_dim`` back to ``hidden``.

    ``norm(dim)`` makes the two latent norms (RMSNorm in DeepSeek's models). No projection has a
    bias. ``rope`` rotates ``rope_head_dim`` channels (its ``head_dim``): pairs
    ``(x[i], x[i + rope_head_dim / 2])`` as ``RotaryEmbedding`` does. DeepSeek's checkpoints pair
    neighbouring channels instead (transformers' ``rope_interleave``), which is the same attention
    with the rotary rows of ``q_b_proj`` and ``kv_a_proj`` permuted. The layer's pre-norm is not part
    of it. Tensor parallelism computes it replicated (it is not split by heads).
    """

    def __init__(
        self,
        hidden: int,
        heads: int,
        head_dim: int,
        rope_head_dim: int,
        v_head_dim: int,
        kv_lora_rank: int,
        rope: RotaryEmbedding,
        q_lora_rank: int = 0,
        norm: Callable[[int], nn.Module] = RMSNorm,
        mscale_all_dim: float = 0.0,
    ) -> None:
        super().__init__()
        if not 0 < rope_head_dim < head_dim:
            raise ValueError(
                f"LatentAttention: rope_head_dim {rope_head_dim} must be in 1..{head_dim - 1} "
                f"(head_dim {head_dim} holds the rotary and the non-rotary channels)"
            )
        if rope.head_dim != rope_head_dim or rope.rotary_dim != rope_head_dim:
            raise ValueError(
                f"LatentAttention: rope must rotate all of rope_head_dim {rope_head_dim} channels, "
                f"not {rope.rotary_dim} of {rope.head_dim}"
            )
        self.heads, self.head_dim, self.v_head_dim = heads, head_dim, v_head_dim
        self.rope_head_dim, self.nope_head_dim = rope_head_dim, head_dim - rope_head_dim
        self.kv_lora_rank, self.q_lora_rank = kv_lora_rank, q_lora_rank
        if q_lora_rank:
            self.q_a_proj = nn.Linear(hidden, q_lora_rank, bias=False)
            self.q_a_norm = norm(q_lora_rank)
            self.q_b_proj = nn.Linear(q_lora_rank, heads * head_dim, bias=False)
        else:
            self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.kv_a_proj = nn.Linear(hidden, kv_lora_rank + rope_head_dim, bias=False)
        self.kv_a_norm = norm(kv_lora_rank)
        self.kv_b_proj = nn.Linear(
            kv_lora_rank, heads * (self.nope_head_dim + v_head_dim), bias=False
        )
        self.o_proj = nn.Linear(heads * v_head_dim, hidden, bias=False)
        self.rope = rope
        self.scale = head_dim**-0.5 * self.temperature_correction(rope, mscale_all_dim)

    # YaRN's temperature, offered here too: what a model needs beside the class to build its RoPE
    yarn_mscale = staticmethod(yarn_mscale)

    @staticmethod
    def temperature_correction(rope: RotaryEmbedding, mscale_all_dim: float) -> float:
        """The factor on ``1 / sqrt(head_dim)``: ``yarn_mscale(factor, mscale_all_dim) ** 2`` under YaRN
        with a nonzero ``mscale_all_dim`` (DeepSeek-V3's config: 1.0), else 1."""
        yarn = getattr(rope, "yarn", None)
        if yarn is None or not mscale_all_dim:
            return 1.0
        return yarn_mscale(yarn.factor, mscale_all_dim) ** 2

    def extra_repr(self) -> str:
        return (
            f"heads={self.heads}, head_dim={self.head_dim}, rope_head_dim={self.rope_head_dim}, "
            f"v_head_dim={self.v_head_dim}, scale={self.scale:.6g}"
        )

    def queries(self, x: torch.Tensor) -> torch.Tensor:
        """``x [b, s, hidden]`` -> every head's query ``[b, s, heads, head_dim]``, not yet rotated."""
        q = self.q_b_proj(self.q_a_norm(self.q_a_proj(x))) if self.q_lora_rank else self.q_proj(x)
        return q.unflatten(-1, (self.heads, self.head_dim))

    def keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x [b, s, hidden]`` -> the heads' non-rotary keys ``[b, s, heads, nope]``, their values
        ``[b, s, heads, v_head_dim]`` and the shared rotary key ``[b, s, 1, rope_head_dim]`` (not yet
        rotated)."""
        latent, rope_key = self.kv_a_proj(x).split([self.kv_lora_rank, self.rope_head_dim], dim=-1)
        expanded = self.kv_b_proj(self.kv_a_norm(latent))
        expanded = expanded.unflatten(-1, (self.heads, self.nope_head_dim + self.v_head_dim))
        keys, values = expanded.split([self.nope_head_dim, self.v_head_dim], dim=-1)
        return keys, values, rope_key.unsqueeze(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        heads, nope = self.heads, self.nope_head_dim
        q = self.queries(x)
        k_nope, v, k_rope = self.keys_values(x)
        # the heads' rotary query parts and the one shared rotary key, rotated in one call
        rotated = self.rope.rotate_sequence_first(torch.cat((q[..., nope:], k_rope), dim=2))
        q = torch.cat((q[..., :nope], rotated[:, :, :heads]), dim=-1)
        shared = rotated[:, :, heads:].expand(-1, -1, heads, -1)
        k = torch.cat((k_nope, shared), dim=-1)
        out = kernels.attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=self.scale
        )
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, heads * self.v_head_dim))
