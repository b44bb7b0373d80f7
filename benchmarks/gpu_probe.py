#!/usr/bin/env python3
"""Two questions the first H100 run raised, answered on one CUDA GPU (about 2 minutes):

1. Where the torch engine loses to a plain training loop at Llama 3.1 8B's width: the output layer and
   loss (``llmb.engines.torch.loss.chunked_cross_entropy``) forward and backward at 8,192 tokens and the
   128,256 vocabulary, by tokens per chunk, beside ``F.linear`` + ``F.cross_entropy`` on whole logits;
   then the engine's 2-layer step (eager) at two chunk sizes.
2. What a dense bf16 GEMM sustains: a median of 20 single timed products and ``llmb preflight``'s
   figure (batches back to back, ``llmb.preflight.measure.gemm_tflops``) on a cold GPU and after 5 s
   and 25 s of back-to-back products, with the SM clock, power and throttle reasons nvidia-smi reads
   meanwhile.

    python benchmarks/gpu_probe.py
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

TOKENS, HIDDEN, VOCAB = 8192, 4096, 128256


def median_s(fn) -> float:
    """Median seconds of ``fn()`` over 10 timed calls after 3, synchronized (preflight's timer)."""
    from llmb.preflight import measure

    return measure._timed(fn, torch.device("cuda"), 10, warmup=3)


def loss_table() -> None:
    from llmb.engines.torch import loss

    hidden = torch.randn(TOKENS, HIDDEN, device="cuda", requires_grad=True)
    weight = (torch.randn(VOCAB, HIDDEN, device="cuda") * 0.02).requires_grad_()
    labels = torch.randint(0, VOCAB, (TOKENS,), device="cuda")
    flops = 3 * 2 * TOKENS * HIDDEN * VOCAB  # forward, grad of hidden, grad of weight

    def chunked(tokens):
        def run():
            hidden.grad = weight.grad = None
            with torch.autocast("cuda", dtype=torch.bfloat16):
                value = loss.chunked_cross_entropy(hidden, weight, labels, chunk_tokens=tokens)
            value.backward()

        return run

    def whole():
        hidden.grad = weight.grad = None
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = F.linear(hidden, weight)
        F.cross_entropy(logits.float(), labels).backward()

    default = loss.LOGITS_PER_CHUNK // VOCAB
    print(
        f"output layer + loss, fwd+bwd, {TOKENS} tokens x {HIDDEN} -> {VOCAB} (weight fp32, bf16 autocast)"
    )
    print(f"{'variant':>34}  {'ms':>7}  {'TFLOP/s':>7}  {'peak GiB':>8}")
    for label, fn in [
        (f"chunked, {default} tokens (default)", chunked(default)),
        ("chunked, 2048 tokens", chunked(2048)),
        ("chunked, 4096 tokens", chunked(4096)),
        ("chunked, 8192 tokens (one chunk)", chunked(8192)),
        ("F.linear + F.cross_entropy", whole),
    ]:
        torch.cuda.reset_peak_memory_stats()
        seconds = median_s(fn)
        peak = torch.cuda.max_memory_allocated() / 2**30
        print(
            f"{label:>34}  {seconds * 1e3:7.2f}  {flops / seconds / 1e12:7.0f}  {peak:8.2f}",
            flush=True,
        )
    torch.cuda.empty_cache()


def smi() -> str:
    query = "clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active"
    done = subprocess.run(
        ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    return done.stdout.strip() or done.stderr.strip()


def gemm_table() -> None:
    from llmb.preflight import measure

    device = torch.device("cuda")
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)

    def figures() -> str:
        single = 2 * n**3 / measure._timed(lambda: torch.mm(a, a), device, 20) / 1e12
        sustained = measure.gemm_tflops(device, n, 20)
        return f"single products {single:.0f}, preflight's figure {sustained:.0f} TFLOP/s"

    print(f"\nbf16 GEMM {n}^3: a median of 20 single timed products, preflight's figure, and load")
    print(f"  cold: {figures()}; nvidia-smi: {smi()}")
    begin = time.monotonic()
    for mark in (5, 25):
        window_start, window_done = time.monotonic(), 0
        while time.monotonic() - begin < mark:
            for _ in range(8):
                torch.mm(a, a)
            torch.cuda.synchronize()
            window_done += 8
        rate = 2 * n**3 * window_done / (time.monotonic() - window_start) / 1e12
        reading = smi()
        print(
            f"  after {mark:2d} s of products ({rate:.0f} TFLOP/s back to back): {figures()}; "
            f"nvidia-smi: {reading}",
            flush=True,
        )


def engine_table() -> None:
    import engine_throughput as bench
    from llmb.engines.torch import loss
    from llmb.plugins.host import PluginHost

    host = PluginHost()
    label, workload, arch, seq, mbs, _ = bench.models(host, "8b", "h100", 2)[0]
    spec = bench.engine_spec(host, workload, arch, seq, mbs, 1, 1, False, "h100")
    flops = spec.gbs * spec.flops_per_sample
    default = loss.LOGITS_PER_CHUNK
    print(f"\n{label}, engine eager, by the loss's chunk (LOGITS_PER_CHUNK)")
    for elements in (default, 2**28, 2**30):
        loss.LOGITS_PER_CHUNK = elements
        torch.cuda.reset_peak_memory_stats()
        result = bench.measure_gpu(spec, False, rounds=4, warmup=2)
        print(
            f"  {elements // VOCAB:5d} tokens per chunk: step {result['engine'] * 1e3:.1f} ms, "
            f"{flops / result['engine'] / 1e12:.0f} TFLOP/s, max {result['memory']:.1f} GiB",
            flush=True,
        )
    loss.LOGITS_PER_CHUNK = default


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__)
    gemm_table()
    loss_table()
    engine_table()
