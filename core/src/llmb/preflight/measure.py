"""What each rank measures, through torch (imported by the job only).

Every figure is the median over ``repeats`` timed repetitions after a warm-up, so that one
disturbed repetition does not decide. GEMM: dense matrix products (bfloat16 on GPUs, float32 on
CPU ranks), TFLOP/s = 2 n^3 / time. Memory: a device-to-device copy of a large tensor, GB/s =
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


def gemm_tflops(device, size: int, repeats: int) -> float:
    import torch

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    seconds = _timed(lambda: torch.mm(a, b), device, repeats)
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
