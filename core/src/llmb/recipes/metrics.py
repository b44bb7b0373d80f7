"""The seeds' performance formulas, each exactly as the seeds write it.

    tokens/s       = seq_len * GBS / step_time
    days to train  = total_tokens / tokens_per_s / 86400     (1e12 tokens)
    TFLOP/s/GPU    = GBS * model_flops_per_sample / step_time / GPUs / 1e12
    MFU            = TFLOP/s/GPU / peak TFLOP/s (GPU type, dtype: field-facts §5)

MFU is shown against two peaks: the run dtype's (the seeds' way: an FP8 run
against the FP8 peak) and BF16's (comparable across dtypes). A GPU type that
lists no peak for a dtype gets no MFU for it: no other peak stands in.
"""

from __future__ import annotations

from collections.abc import Mapping

BF16 = "bf16"

SECONDS_PER_DAY = 86400
ONE_TRILLION = 1e12


def tokens_per_second(seq_len: int, gbs: int, step_time_s: float) -> float:
    return seq_len * gbs / step_time_s


def days_to_train(tokens_per_s: float, total_tokens: float = ONE_TRILLION) -> float:
    return total_tokens / tokens_per_s / SECONDS_PER_DAY


def tflops_per_gpu(flops_per_sample: float, gbs: int, step_time_s: float, gpus: int) -> float:
    return gbs * flops_per_sample / step_time_s / gpus / 1e12


def mfu(tflops_per_gpu_value: float, peak_tflops: float) -> float:
    """Model FLOPs utilisation as a fraction (0.3093 for 30.93%)."""
    return tflops_per_gpu_value / peak_tflops


def _pct(tflops_per_gpu_value: float, peak: float | None) -> float | None:
    return 100 * mfu(tflops_per_gpu_value, peak) if peak else None


def mfu_pcts(
    tflops_per_gpu_value: float, peaks: Mapping[str, float], dtype: str | None
) -> tuple[float | None, float | None]:
    """MFU in percent (30.93 for 30.93%) against the dense peak of ``dtype`` and against the BF16
    dense peak (the same number for a BF16 run); ``peaks`` are the GPU type's, by dtype. Either is
    None when ``peaks`` lists no such peak."""
    at_dtype = _pct(tflops_per_gpu_value, peaks.get(dtype)) if dtype else None
    return at_dtype, _pct(tflops_per_gpu_value, peaks.get(BF16))


def mfu_at_bf16_pct(mfu_pct: float | None, peaks: Mapping[str, float], dtype: str) -> float | None:
    """An MFU (percent) against ``dtype``'s peak restated against the BF16 peak (a published
    figure: the same TFLOP/s/GPU over the other peak); None without both peaks."""
    dtype_peak, bf16_peak = peaks.get(dtype), peaks.get(BF16)
    if mfu_pct is None or not dtype_peak or not bf16_peak:
        return None
    return mfu_pct * dtype_peak / bf16_peak
