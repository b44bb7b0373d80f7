#!/usr/bin/env python3
"""Torch-engine throughput: steps/s of each workload's CPU proxy, and on a GPU
the MFU of a Llama 3.1 8B-width proxy against the H100 BF16 peak.

    .venv/bin/python benchmarks/engine_throughput.py [--steps 10] [--gpu-layers 4] [--seq 8192]

CPU: one process, the ``tiny`` proxy of every workload, micro-batch 4,
sequence 128, AdamW steps (forward, backward, optimizer), after 2 warm-up
steps. GPU (when torch sees one): Llama 3.1 8B's width with --gpu-layers
layers, sequence --seq, micro-batch 1, bf16 autocast, torch.compile off and
on; MFU = model FLOPs (the seed's formula) / step time / the H100 BF16 peak
of data/gpus.yaml (989 TFLOP/s). The target there is at least 50%.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def measure(model, optimizer, batch, steps: int, device, autocast) -> list[float]:
    import torch
    import torch.nn.functional as F

    times = []
    for index in range(steps + 2):
        start = time.perf_counter()
        with autocast:
            logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if index >= 2:
            times.append(time.perf_counter() - start)
    return times


def cpu_table(host, steps: int) -> None:
    import contextlib

    import torch
    from llmb.proxies import PROXIES, shrink

    torch.manual_seed(0)
    seq = PROXIES["tiny"].seq_len
    rows = []
    for workload in host.workloads().values():
        arch = shrink(workload.architecture(workload.default_variant.series[0].size), "tiny")
        model = host.build_model(workload, arch)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        batch = torch.randint(0, arch.vocab, (4, seq + 1))
        times = measure(model, optimizer, batch, steps, torch.device("cpu"), contextlib.nullcontext())
        median = statistics.median(times)
        params = sum(p.numel() for p in model.parameters())
        rows.append((workload.name, arch.size, f"{params / 1e6:.2f}M", f"{1 / median:.2f}", f"{4 * seq / median:,.0f}"))
    print(f"CPU ({torch.get_num_threads()} threads), tiny proxies, micro-batch 4 x {seq} tokens, {steps} steps")
    header = ("workload", "proxy", "params", "steps/s", "tokens/s")
    print("  ".join(f"{h:>14}" for h in header))
    for row in rows:
        print("  ".join(f"{c:>14}" for c in row))


def gpu_table(host, steps: int, layers: int, seq: int) -> None:
    import torch

    if not torch.cuda.is_available():
        print("\nGPU: none available (torch.cuda.is_available() is False): the MFU measurement was skipped.")
        return
    from llmb.engine import blocks
    from llmb.gpus import gpu_type

    workload = host.workload("llama31")
    arch = workload.architecture("8b").with_layers(layers)
    flops = host.model_flops(workload, arch, seq).per_sample
    device = torch.device("cuda")
    peak = gpu_type("h100").peak_tflops["bf16"] * 1e12
    print(f"\nGPU {torch.cuda.get_device_name()}: Llama 3.1 8B width, {layers} layers, sequence {seq}, "
          f"micro-batch 1, bf16 autocast; model FLOPs {flops:.3e} per sample; peak {peak / 1e12:g} TFLOP/s "
          f"(H100 BF16)")
    print(f"{'torch.compile':>14}  {'step ms':>10}  {'TFLOP/s':>10}  {'MFU':>8}")
    for compiled in (False, True):
        torch.manual_seed(0)
        with torch.device("meta"):  # as the engine does: no CPU copy of the weights
            model = host.build_model(workload, arch)
        model = blocks.initialize(model.to_empty(device=device))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        runner = torch.compile(model) if compiled else model
        batch = torch.randint(0, arch.vocab, (1, seq + 1), device=device)
        times = measure(runner, optimizer, batch, steps, device, torch.autocast("cuda", dtype=torch.bfloat16))
        median = statistics.median(times)
        achieved = flops / median
        print(f"{'on' if compiled else 'off':>14}  {median * 1000:10.1f}  {achieved / 1e12:10.1f}  "
              f"{100 * achieved / peak:7.1f}%")
        del model, optimizer, runner
        torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--gpu-layers", type=int, default=4)
    parser.add_argument("--seq", type=int, default=8192)
    parser.add_argument("--skip-cpu", action="store_true")
    args = parser.parse_args()
    from llmb.host import PluginHost

    host = PluginHost()
    if not args.skip_cpu:
        cpu_table(host, args.steps)
    gpu_table(host, args.steps, args.gpu_layers, args.seq)
    print(f"\npython {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
