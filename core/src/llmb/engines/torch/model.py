"""Build the torch engine's model: on the meta device, through the workload's plugin, in its precision.

``build_on_meta`` asks the plugin host it is given (``llmb_build_model``)
for the workload's model, built on the meta device (no memory, no wasted
init; ``parallelize.lay_out`` materialises and initialises it where it
runs). ``choose_precision`` decides what the run computes in (float8 for
an fp8 recipe on a GPU with float8 matrix products, Transformer Engine's
nvfp4 / mxfp8, else the compute dtype), ``startup_lines`` are rank 0's
first lines (the run, the layout, the precision, the parameter counts,
both FLOP counts: ``flops_line``), and ``apply_precision`` converts the
model's linear layers to that precision and records it in ``recipe.json``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from llmb.engines.torch import logfmt, parallel
from llmb.runs.runspec import RunSpec

if TYPE_CHECKING:
    from llmb.plugins.host import PluginHost

# LLMB_FLOAT8_EMULATE=1: an fp8 recipe on CPU runs torchao's float8 emulation (a test of the numerics, slower
# than float32; on GPU the real float8 kernels run without it).
FLOAT8_EMULATE = "LLMB_FLOAT8_EMULATE"


def build_on_meta(host: PluginHost, spec: RunSpec):
    """The workload's model at the run's architecture, built on the meta device by its plugin."""
    import torch

    workload = host.workload(spec.workload)
    # Built on the meta device (no memory, no wasted init), then materialised where it runs and
    # initialised there, each sub-module from its own seed: every rank starts from the same weights,
    # and a sharded layout is laid out on meta first and materialises only this rank's share.
    with torch.device("meta"):
        return host.build_model(workload, spec.model_arch())


def choose_precision(spec: RunSpec, device):
    """What this run computes in (``llmb.engines.torch.parallel.float8.choose_precision``): float8 for an fp8
    recipe on a GPU that has float8 matrix products, else the run's compute dtype, with the reason."""
    from llmb.engines.torch.parallel.float8 import choose_precision

    emulate = os.environ.get(FLOAT8_EMULATE) == "1"
    return choose_precision(
        spec.dtype,
        device,
        spec.compute_dtype,
        emulate_on_cpu=emulate,
        tensor_parallel=spec.layout.tp,
    )


def flops_line(spec: RunSpec) -> str:
    """The start-up line with both FLOP counts: the workload's seed formula (the log's MODEL_TFLOP/s/GPU)
    and Megatron-Bridge's (causal attention), so MFU compares with either."""
    from llmb.recipes.flops import megatron_bridge_sample

    ours = spec.flops_per_sample
    megatron = megatron_bridge_sample(spec.model_arch(), spec.seq_len)
    line = f"[llmb] model FLOPs per sample: {ours:.4e} (the workload's formula: the logged MODEL_TFLOP/s/GPU)"
    if megatron is None:
        return line + "; Megatron-Bridge's formula does not describe this architecture"
    line += f"; Megatron-Bridge's count (causal attention): {megatron.per_sample:.4e}"
    if ours:
        line += f" (TFLOP/s on that count: the logged value x {megatron.per_sample / ours:.4f})"
    return line


def startup_lines(spec: RunSpec, world: int, model, precision) -> list[str]:
    """Rank 0's first lines: the run, its parallel layout, its precision, parameters, FLOP counts."""
    arch = spec.model_arch()
    total = sum(p.numel() for p in model.parameters())
    embedding = arch.vocab * arch.hidden * (1 if arch.tied_embeddings else 2)
    label = f" ({spec.proxy} proxy)" if spec.proxy else ""
    return [
        f"[llmb] torch engine: {spec.workload} {spec.size}{label}, {spec.ranks} rank(s) on {spec.device}, "
        f"computing in {spec.compute_dtype} (recipe {spec.dtype}), MBS {spec.mbs} x GA {spec.ga} x DP "
        f"{spec.layout.dp(world)} = GBS {spec.gbs}, sequence {spec.seq_len}, {spec.steps} steps",
        f"[llmb] parallel layout: {parallel.describe(spec.layout, world)}",
        *precision.lines(),
        *logfmt.parameters(total - embedding, embedding, total),
        flops_line(spec),
    ]


def apply_precision(model, precision, run_dir: str | None):
    """Convert ``model``'s linear layers to ``precision`` (torchao float8, Transformer Engine's layers) and
    record it in ``run_dir``'s ``recipe.json`` (rank 0 gives one; the others None). Returns Transformer
    Engine's autocast context factory when its layers compute the row's format, else None."""
    from llmb.engines.torch.parallel.float8 import apply_float8, record_precision

    if run_dir is not None:
        record_precision(run_dir, precision)
    if precision.float8:
        apply_float8(model, precision.float8, emulate=precision.emulate)
    if not precision.te:
        return None
    from llmb.engines.torch.parallel.transformer_engine import apply_te_linears, te_autocast

    apply_te_linears(model)
    return te_autocast(precision.te)
