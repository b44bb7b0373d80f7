"""Which linear layers a low-precision format converts, shared by ``float8.py`` and ``transformer_engine.py``.

Kept in high precision: the output layer and the MoE router (as the
production recipes keep them), and any linear whose dimensions are not
multiples of the format's alignment (float8 GEMMs: 16; Transformer
Engine's block-scaled formats: 32, their scaling blocks).
"""

from __future__ import annotations

from torch import nn

SKIPPED = ("output", "router")  # module names kept in high precision


def eligible_linear(module: nn.Module, name: str, alignment: int) -> bool:
    """Whether ``module`` (called ``name``) is a linear layer a format of ``alignment`` may convert."""
    if not isinstance(module, nn.Linear) or name.rsplit(".", 1)[-1] in SKIPPED:
        return False
    return module.in_features % alignment == 0 and module.out_features % alignment == 0
