"""The seeds' performance formulas, each exactly as the seeds write it.

    tokens/s       = seq_len * GBS / step_time
    days to train  = total_tokens / tokens_per_s / 86400     (1e12 tokens)
    TFLOP/s/GPU    = GBS * model_flops_per_sample / step_time / GPUs / 1e12
    MFU            = TFLOP/s/GPU / peak TFLOP/s (GPU type, dtype: field-facts §5)
"""

from __future__ import annotations

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
