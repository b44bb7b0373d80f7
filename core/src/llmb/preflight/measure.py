"""What each rank measures, through torch (imported by the job only).

Every figure is the median over ``repeats`` timed repetitions after a warm-up, so that one
disturbed repetition does not decide. GEMM: dense matrix products (bfloat16 on GPUs, float32 on
CPU ranks), TFLOP/s = 2 n^3 / time; on a GPU each repetition is a batch of products back to back,
what the GPU sustains (``sustained_seconds``). Memory: a device-to-device copy of a large tensor, GB/s =
2 x bytes / time (read and write). All-reduce: ``torch.distributed.all_reduce`` over a group,
reported as NCCL's bus bandwidth, ``bytes / time x 2 (n - 1) / n`` (nccl-tests' definition), so
that figures of groups of different sizes compare.
"""

from __future__ import annotations

import statistics
import time


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, device, repeats: int, warmup: int = 1) -> float:
    """The median seconds of ``fn`` over ``repeats`` runs."""
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# On a GPU a GEMM figure is what the GPU sustains: each timed repetition is a batch of back-to-back
# products lasting about GEMM_BATCH_S, after GEMM_WARM_S of them. One product of 8192^3 lasts about 1.4 ms
# on an H100, too short for its power state to settle. On one healthy H100 (700 W), 2026-11-26: medians
# of 20 single products read 605 to 771 TFLOP/s from one measurement to the next, these batches 673 to 715,
# and products back to back for 5 to 90 s ran at 678 to 694.
GEMM_BATCH_S = 0.05
GEMM_WARM_S = 0.5


def sustained_seconds(fn, device, repeats: int, batch_s: float, warm_s: float) -> float:
    """The median seconds of one ``fn()`` when run back to back: ``fn`` runs for ``warm_s`` first, then
    ``repeats`` timed batches of as many calls as last about ``batch_s``."""
    one = _timed(fn, device, 3)
    count = max(1, round(batch_s / max(one, 1e-9)))

    def batch() -> None:
        for _ in range(count):
            fn()

    deadline = time.monotonic() + warm_s
    while time.monotonic() < deadline:
        batch()
        _sync(device)
    return _timed(batch, device, repeats, warmup=0) / count


def gemm_tflops(device, size: int, repeats: int) -> float:
    import torch

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)

    def product():
        return torch.mm(a, b)

    if device.type == "cuda":
        seconds = sustained_seconds(product, device, repeats, GEMM_BATCH_S, GEMM_WARM_S)
    else:  # a CPU rank's figure only compares with its peers'
        seconds = _timed(product, device, repeats)
    return 2 * size**3 / seconds / 1e12


def memory_gb_s(device, megabytes: int, repeats: int) -> float:
    import torch

    elements = megabytes * (1 << 20) // 4
    src = torch.ones(elements, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    seconds = _timed(lambda: dst.copy_(src), device, repeats)
    return 2 * elements * 4 / seconds / 1e9


def allreduce_busbw(device, group, group_size: int, megabytes: int, repeats: int) -> float:
    """Bus bandwidth (GB/s) of an all-reduce of ``megabytes`` over ``group``; every member calls it."""
    import torch
    import torch.distributed as dist

    elements = megabytes * (1 << 20) // 4
    tensor = torch.ones(elements, device=device, dtype=torch.float32)
    seconds = _timed(lambda: dist.all_reduce(tensor, group=group), device, repeats)
    size = elements * 4
    return size / seconds * 2 * (group_size - 1) / group_size / 1e9


def busy_while(device, size: int, running, limit_s: float = 30.0) -> None:
    """Dense GEMMs until ``running()`` is false (at most ``limit_s``): load under which nvidia-smi reads the
    clocks a benchmark runs at."""
    import torch

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(size, size, device=device, dtype=dtype)
    deadline = time.monotonic() + limit_s
    while running() and time.monotonic() < deadline:
        for _ in range(8):
            torch.mm(a, a)
        _sync(device)
