"""Published figures an erratum says are wrong, recomputed the way llmb
computes a run's own: the seed's FLOPs formula, the recipe's GBS at that GPU
count, the published step time, and the GPU type's peak for the dtype.

Llama 4's 128-GPU GB200 BF16 MFU is printed as 18.71% (divided by the FP8
peak); recomputed it is 37.43%. Everywhere llmb shows such a figure it shows
the corrected one, marked, with the printed one beside it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from llmb.recipes.gpus import gpu_type
from llmb.recipes.metrics import mfu, tflops_per_gpu
from llmb.recipes.records import ModelArch, ModelFlops, ReferenceResult, Workload

# Below this (percentage points) a printed MFU is rounding, not an error.
TOLERANCE_PCT = 0.01

FlopsOf = Callable[[Workload, ModelArch, int], "ModelFlops | None"]


def recomputed_mfu_pct(workload: Workload, ref: ReferenceResult, flops_of: FlopsOf) -> float | None:
    """MFU (%) at the published step time, by llmb's formula; None when the recipe or a peak is unknown."""
    variant = workload.variant(ref.variant)
    peak = gpu_type(ref.gpu).peak_tflops.get(ref.dtype)
    if variant is None or not peak:
        return None
    for series in variant.series:
        if (
            (series.size, series.gpu, series.scaling) == (ref.size, ref.gpu, ref.scaling)
            and ref.dtype in series.dtypes
            and series.min_gpus <= ref.gpus <= series.max_gpus
        ):
            arch = workload.architecture(series.size).with_layers(series.layers)
            flops = flops_of(workload, arch, series.seq_len)
            if flops is None:
                return None
            gbs = int(series.gbs.at(ref.gpus))
            return round(
                100 * mfu(tflops_per_gpu(flops.per_sample, gbs, ref.step_time_s, ref.gpus), peak), 2
            )
    return None


def with_corrected_figures(workload: Workload, flops_of: FlopsOf) -> Workload:
    """``workload`` with each erratum-affected reference's MFU replaced by the recomputed one
    (``printed_mfu_pct`` keeps what the seed printed)."""
    changed = False
    references = []
    for ref in workload.references:
        if ref.erratum and ref.mfu_pct is not None:
            fixed = recomputed_mfu_pct(workload, ref, flops_of)
            if fixed is not None and abs(fixed - ref.mfu_pct) >= TOLERANCE_PCT:
                ref = replace(ref, mfu_pct=fixed, printed_mfu_pct=ref.mfu_pct)
                changed = True
        references.append(ref)
    return replace(workload, references=tuple(references)) if changed else workload
