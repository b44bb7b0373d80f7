"""Published figures an erratum says are wrong, recomputed the way llmb
computes a run's own: on the FLOPs count a run of the recipe's variant is held
to (the workload's formula, or Megatron-Bridge's count where the recipe computes
MFU from its log's figure), the recipe's GBS and layout at that GPU count, the
published step time, and the GPU type's peak for the dtype.

Llama 4's 128-GPU GB200 BF16 MFU is printed as 18.71% (divided by the FP8
peak); recomputed it is 37.43%. The Llama 3.1 Megatron-Bridge recipe's example
prints 1636.80 TFLOP/s/GPU and MFU 33.40% at 5.74147 s, 9% fewer FLOPs than
Megatron-Bridge counts for its configuration; recomputed, 1,800.6 and 36.75%.
Everywhere llmb shows such a figure it shows the corrected one, marked, with the
printed one beside it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from llmb.recipes.flops import megatron_bridge_sample
from llmb.recipes.gpus import gpu_type
from llmb.recipes.metrics import mfu, tflops_per_gpu
from llmb.recipes.records import ModelArch, ModelFlops, ReferenceResult, Workload

# Below this (percentage points) a printed MFU is rounding, not an error.
TOLERANCE_PCT = 0.01

FlopsOf = Callable[[Workload, ModelArch, int], "ModelFlops | None"]


def recomputed(
    workload: Workload, ref: ReferenceResult, flops_of: FlopsOf
) -> tuple[float, float] | None:
    """(TFLOP/s per GPU, MFU %) at the published step time, by llmb's count for the recipe's variant (its
    workload's formula; Megatron-Bridge's count where the variant takes MFU from a Megatron-Bridge log);
    None when the recipe, its FLOPs or a peak is unknown."""
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
            if variant.mfu_from == "log" and variant.framework == "megatron_bridge":
                # the workload's own count where the core's does not describe the architecture (MLA)
                flops = megatron_bridge_sample(arch, series.seq_len, series.tp) or flops_of(
                    workload, arch, series.seq_len
                )
            else:
                flops = flops_of(workload, arch, series.seq_len)
            if flops is None:
                return None
            gbs = ref.gbs or int(series.gbs.at(ref.gpus))
            tflops = tflops_per_gpu(flops.per_sample, gbs, ref.step_time_s, ref.gpus)
            return round(tflops, 1), round(100 * mfu(tflops, peak), 2)
    return None


def recomputed_mfu_pct(workload: Workload, ref: ReferenceResult, flops_of: FlopsOf) -> float | None:
    """MFU (%) at the published step time, by llmb's count (``recomputed``)."""
    found = recomputed(workload, ref, flops_of)
    return None if found is None else found[1]


def with_corrected_figures(workload: Workload, flops_of: FlopsOf) -> Workload:
    """``workload`` with each erratum-affected reference's MFU (and TFLOP/s per GPU, where it prints one)
    replaced by the recomputed ones (``printed_mfu_pct`` and ``printed_tflops_per_gpu`` keep what the
    document printed)."""
    changed = False
    references = []
    for ref in workload.references:
        if ref.erratum and ref.mfu_pct is not None:
            found = recomputed(workload, ref, flops_of)
            if found is not None and abs(found[1] - ref.mfu_pct) >= TOLERANCE_PCT:
                tflops, fixed = found
                ref = replace(
                    ref,
                    mfu_pct=fixed,
                    printed_mfu_pct=ref.mfu_pct,
                    **(
                        {"tflops_per_gpu": tflops, "printed_tflops_per_gpu": ref.tflops_per_gpu}
                        if ref.tflops_per_gpu is not None
                        else {}
                    ),
                )
                changed = True
        references.append(ref)
    return replace(workload, references=tuple(references)) if changed else workload
