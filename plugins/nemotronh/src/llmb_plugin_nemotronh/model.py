"""Nemotron-H for the torch engine, composed from ``llmb.engines.torch.blocks``.

A hybrid decoder that follows ``arch.layer_pattern`` one layer per
character, each with its own RMSNorm pre-norm and residual: ``M`` a Mamba2
mixer (SSD scan chunked by ``mamba_chunk``, gated RMSNorm grouped by
``mamba_groups``), ``*`` grouped-query attention without position embedding
(the Mamba layers carry position), ``-`` a squared-ReLU MLP. Untied
embedding and output layer.

Imports torch: import this module only inside ``llmb_build_model``.
"""

from __future__ import annotations

from llmb import (
    CausalLM,
    GroupedQueryAttention,
    LayerParts,
    Mamba2Mixer,
    ModelArch,
    RMSNorm,
    SquaredReLUMLP,
)


def build(arch: ModelArch) -> CausalLM:
    """The Nemotron-H model of ``arch`` (layer kinds ``M``, ``*`` and ``-``)."""
    if (
        arch.norm != "rmsnorm"
        or arch.activation != "squared_relu"
        or not set(arch.layer_kinds()) <= {"M", "*", "-"}
    ):
        raise ValueError(
            f"nemotronh {arch.size}: expected RMSNorm, squared ReLU and an M/*/- pattern, got "
            f"{arch.norm}, {arch.activation}, {arch.layer_kinds()!r}"
        )
    return CausalLM(
        arch,
        LayerParts(
            norm=RMSNorm,
            attention=lambda: GroupedQueryAttention(
                arch.hidden, arch.heads, arch.query_groups, arch.head_dim
            ),
            mlp=lambda ffn: SquaredReLUMLP(arch.hidden, ffn),
            mamba=lambda: Mamba2Mixer(
                arch.hidden,
                arch.mamba_heads,
                arch.mamba_head_dim,
                arch.mamba_state,
                arch.mamba_groups,
                arch.mamba_conv_kernel,
                arch.mamba_chunk,
            ),
        ),
    )
