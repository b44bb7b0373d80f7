#!/usr/bin/env python3
"""Torch-engine throughput on CPU: achieved GFLOP/s against torch.mm's peak, beside a reference.

    .venv/bin/python benchmarks/engine_throughput.py [--rounds 5] [--ga 1] [--ranks 1,2] [--only tiny|8b] [--compile]
    python benchmarks/engine_throughput.py --gpu h100 --only 8b [--layers 2] [--ga 4] [--compiled-only]  # one CUDA GPU

Each row trains the way ``llmb run`` trains: the torch engine's own ``Engine``
(``llmb.engines.torch.train``) builds the model through the plugin host and runs
``Engine.step`` (its optimizer, gradient clipping, gradient accumulation over
--ga micro-batches, DDP when --ranks has 2). Models: every workload's ``tiny``
proxy (micro-batch 4, the proxy's sequence), and Llama 3.1 8B's width with one layer
and a 8,192-token vocabulary (hidden 4096, FFN 14336, 32 heads, 8 KV groups,
micro-batch 1, sequence 256). FLOPs are the workload's seed formula, as the
engine's log counts them.

Beside each Llama row, ``Reference`` (below, ~80 lines): a minimal Llama with
the same shapes, parameter count and FLOPs, trained by a plain loop with the
same data, AdamW settings, clipping and GA, in the same process. The engine's
and the reference's steps alternate with an fp32 ``torch.mm`` sample of the
8B-width FFN shape ([256 x 4096] @ [4096 x 14336]), so each ratio compares
numbers taken under the same machine load; all figures are medians over
--rounds. The bf16 peak is measured once, for information (CPU ranks compute
in fp32). Targets at 8B width: the engine at >= 90% of the reference and
>= 70% of the fp32 peak. Threads: the engine's own default (``cpu_threads``:
1 per rank unless OMP_NUM_THREADS). Speed is never asserted by a test; this
script only prints.

On a GPU, where transformers is installed (NVIDIA's PyTorch images have it), the
Llama rows also time its peer: Hugging Face transformers' ``LlamaForCausalLM`` at
the same shape and work (``transformers_trainer``: fp32 weights, bf16 autocast,
SDPA, each decoder layer compiled, fused AdamW, clipping 1.0, full-vocabulary
loss), and a last line gives the engine's speed as a multiple of the peer's
(aim: at least 1.05x at 2 and at 10 layers).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import socket
import statistics
import sys
import time
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

PEAK_SHAPE = (256, 4096, 14336)  # tokens x hidden @ hidden x ffn: the 8B-width proxy's FFN matmul
# bf16 at a smaller shape: a CPU without AVX512-BF16/AMX runs bf16 matmuls through a slow fallback
# (measured here on an AVX2-only EPYC: under 1 GFLOP/s, minutes at PEAK_SHAPE).
BF16_SHAPE = (64, 1024, 1024)
WIDE_VOCAB, WIDE_SEQ = 8192, 256
GPU_SEQ = 8192  # Llama 3.1 8B's published sequence length


# ---------------------------------------------------------------- the reference Llama (written for this script)


class Reference(nn.Module):
    """Pre-norm decoder: RMSNorm, GQA attention with RoPE (SDPA, causal), SwiGLU; untied output."""

    def __init__(self, arch, rope_base: float = 500_000.0):
        super().__init__()
        h, d = arch.hidden, arch.head_dim
        self.heads, self.groups, self.head_dim = arch.heads, arch.query_groups, d
        self.embed = nn.Embedding(arch.vocab, h)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                {
                    "norm1": nn.RMSNorm(h, eps=1e-5),
                    "norm2": nn.RMSNorm(h, eps=1e-5),
                    "q": nn.Linear(h, arch.heads * d, bias=False),
                    "k": nn.Linear(h, arch.query_groups * d, bias=False),
                    "v": nn.Linear(h, arch.query_groups * d, bias=False),
                    "o": nn.Linear(arch.heads * d, h, bias=False),
                    "gate": nn.Linear(h, arch.ffn, bias=False),
                    "up": nn.Linear(h, arch.ffn, bias=False),
                    "down": nn.Linear(arch.ffn, h, bias=False),
                }
            )
            for _ in range(arch.layers)
        )
        self.norm = nn.RMSNorm(h, eps=1e-5)
        self.out = nn.Linear(h, arch.vocab, bias=False)
        inv_freq = 1.0 / rope_base ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def rope(self, x, cos, sin):
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def attention(self, b, x):
        n, s, _ = x.shape
        q = b["q"](x).view(n, s, self.heads, self.head_dim).transpose(1, 2)
        k = b["k"](x).view(n, s, self.groups, self.head_dim).transpose(1, 2)
        v = b["v"](x).view(n, s, self.groups, self.head_dim).transpose(1, 2)
        positions = torch.arange(s, dtype=torch.float32, device=x.device)
        angles = torch.outer(positions, self.inv_freq).repeat(1, 2)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=self.heads != self.groups
        )
        return b["o"](y.transpose(1, 2).reshape(n, s, -1))

    def forward(self, tokens):
        x = self.embed(tokens)
        for b in self.blocks:
            x = x + self.attention(b, b["norm1"](x))
            y = b["norm2"](x)
            x = x + b["down"](F.silu(b["gate"](y)) * b["up"](y))
        return self.out(self.norm(x))


def plain_loop(model, logits_of, arch, mbs: int, seq: int, ga: int, seed: int, device: str):
    """``step(i) -> loss`` of a plain training loop over ``model`` (``logits_of(model, tokens)``) with the
    engine's data, AdamW settings (fused), clipping and GA; on a GPU, like the engine: fp32 weights,
    bf16 autocast. The reference and the transformers peer both train through it."""
    from llmb.engines.torch.optim import CLIP_NORM, learning_rate

    cuda = device == "cuda"
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=learning_rate(1),
        betas=(0.9, 0.95),
        weight_decay=0.1,
        eps=1e-8,
        fused=True,
    )
    generator = torch.Generator().manual_seed(seed * 1000)

    def step(i: int) -> float:
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(i)
        total = 0.0
        for _ in range(ga):
            tokens = torch.randint(0, arch.vocab, (mbs, seq + 1), generator=generator).to(device)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
                logits = logits_of(model, tokens[:, :-1])
            loss = (
                F.cross_entropy(logits.float().reshape(-1, arch.vocab), tokens[:, 1:].reshape(-1))
                / ga
            )
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return total

    return step


def reference_trainer(arch, mbs: int, seq: int, ga: int, seed: int, device: str = "cpu"):
    """The reference Llama in a plain training loop (``plain_loop``): (model, step)."""
    torch.manual_seed(seed)
    model = Reference(arch).to(device)
    return model, plain_loop(model, lambda m, t: m(t), arch, mbs, seq, ga, seed, device)


# ---------------------------------------------------------------- the peer: transformers' Llama


def transformers_available() -> bool:
    try:
        import transformers  # noqa: F401
    except Exception:  # noqa: BLE001 - absent or broken: the peer's row is left out
        return False
    return True


def transformers_trainer(
    arch, mbs: int, seq: int, ga: int, seed: int, device: str = "cuda", compile_layers: bool = True
):
    """Hugging Face transformers' ``LlamaForCausalLM`` at the row's shape, trained as the engine trains
    on a GPU: fp32 weights, bf16 autocast, SDPA attention, each decoder layer compiled, the engine's
    data, AdamW settings (fused), clipping and GA, the full-vocabulary loss in fp32: step(i) -> loss.
    Returns (model, step)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=arch.vocab,
        hidden_size=arch.hidden,
        intermediate_size=arch.ffn,
        num_hidden_layers=arch.layers,
        num_attention_heads=arch.heads,
        num_key_value_heads=arch.query_groups,
        head_dim=arch.head_dim,
        max_position_embeddings=seq,
        rope_theta=500_000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
        use_cache=False,
    )
    model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa").to(device)
    model.train()
    if compile_layers:
        for layer in model.model.layers:
            layer.compile()
    step = plain_loop(model, lambda m, t: m(input_ids=t).logits, arch, mbs, seq, ga, seed, device)
    return model, step


# ---------------------------------------------------------------- the engine, as llmb run drives it


def engine_spec(
    host,
    workload,
    arch,
    seq: int,
    mbs: int,
    ga: int,
    ranks: int,
    compile_: bool,
    gpu: str | None = None,
):
    """The RunSpec ``llmb run`` would give the engine: fp32 on CPU, bf16 autocast on ``gpu``."""
    from llmb.runs.runspec import RunSpec

    flops = host.model_flops(workload, arch, seq)
    return RunSpec(
        job_id="bench",
        workload=workload.name,
        variant="bench",
        framework="bench",
        engine="torch",
        size=arch.size,
        arch=arch.__dict__.copy(),
        proxy="bench",
        gpu=gpu or "cpu",
        dtype="bf16" if gpu else "fp32",
        compute_dtype="bfloat16" if gpu else "float32",
        device="cuda" if gpu else "cpu",
        ranks=ranks,
        mbs=mbs,
        ga=ga,
        gbs=mbs * ga * ranks,
        seq_len=seq,
        steps=1000,
        seed=1234,
        compile=compile_,
        flops_per_sample=flops.per_sample,
        experiment="bench",
        run_dir="",
        inner_dir="",
        log="",
    )


def build_engine(spec, rank: int = 0, world: int = 1):
    from llmb.engines.torch.train import Engine
    from llmb.plugins.host import PluginHost

    # this process's host (the worker makes the run's)
    engine = Engine(spec, rank, world, rank, PluginHost())
    with contextlib.redirect_stdout(io.StringIO()):  # the start-up lines
        engine.build()
    return engine


def timed(fn, *args) -> float:
    begin = time.perf_counter()
    fn(*args)
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter() - begin


def mm_gflops(
    dtype: torch.dtype,
    shape: tuple[int, int, int] = PEAK_SHAPE,
    repeats: int = 1,
    device: str = "cpu",
) -> float:
    m, k, n = shape
    a = torch.randn(m, k, dtype=dtype, device=device)
    b = torch.randn(k, n, dtype=dtype, device=device)
    timed(torch.mm, a, b)  # warm-up
    seconds = statistics.median(timed(torch.mm, a, b) for _ in range(repeats))
    return 2 * m * k * n / seconds / 1e9


def median_step(step, rounds: int, warmup: int) -> float:
    """Median seconds of ``step(i)`` over ``rounds`` steps after ``warmup`` of them."""
    return statistics.median([timed(step, i) for i in range(1, warmup + rounds + 1)][warmup:])


def release_gpu_memory() -> None:
    import gc

    gc.collect()
    torch.cuda.empty_cache()


def measure_gpu(spec, with_reference: bool, rounds: int, warmup: int) -> dict:
    """Median step seconds of the engine, then of the reference, one after the other (a GPU holds one
    full-width model's weights and optimizer at a time), and the engine's peak allocated GiB."""
    engine = build_engine(spec)
    times = {"engine": median_step(engine.step, rounds, warmup), "reference": math.nan}
    times["memory"] = torch.cuda.max_memory_allocated() / 2**30
    engine.close()
    del engine
    release_gpu_memory()
    if with_reference:
        arch = spec.model_arch()
        _, reference = reference_trainer(
            arch, spec.mbs, spec.seq_len, spec.ga, spec.seed, device="cuda"
        )
        times["reference"] = median_step(reference, rounds, warmup)
        del reference
        release_gpu_memory()
    return times


def measure_peer(spec, rounds: int, warmup: int) -> dict:
    """Median step seconds and peak allocated GiB of transformers' Llama at the spec's shape."""
    torch.cuda.reset_peak_memory_stats()
    model, step = transformers_trainer(
        spec.model_arch(), spec.mbs, spec.seq_len, spec.ga, spec.seed, device="cuda"
    )
    seconds = median_step(step, rounds, warmup)
    memory = torch.cuda.max_memory_allocated() / 2**30
    del model, step
    release_gpu_memory()
    return {"seconds": seconds, "memory": memory}


def measure(spec, with_reference: bool, rounds: int, warmup: int, steps_per_round: int) -> dict:
    """Median step seconds of the engine (and the reference), and the fp32 peak, sampled in turn: a
    round is ``steps_per_round`` engine steps, as many reference steps, one peak sample."""
    engine = build_engine(spec)
    arch = spec.model_arch()
    reference = None
    if with_reference:
        model, reference = reference_trainer(arch, spec.mbs, spec.seq_len, spec.ga, spec.seed)
        assert sum(p.numel() for p in model.parameters()) == sum(
            p.numel() for p in engine.model.parameters()
        )
    times: dict[str, list[float]] = {"engine": [], "reference": [], "peak": []}
    n = steps_per_round
    for r in range(warmup + rounds):
        engine_s = sum(timed(engine.step, r * n + i + 1) for i in range(n)) / n
        reference_s = (
            sum(timed(reference, r * n + i + 1) for i in range(n)) / n if reference else math.nan
        )
        if r >= warmup:
            times["engine"].append(engine_s)
            times["reference"].append(reference_s)
            times["peak"].append(mm_gflops(torch.float32))
    engine.close()
    return {key: statistics.median(values) for key, values in times.items()}


def _ddp_rank(rank: int, spec, steps: int, warmup: int, port: int, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    engine = build_engine(spec, rank, spec.ranks)
    seconds = median_step(engine.step, steps, warmup)
    engine.close()
    if rank == 0:
        queue.put(seconds)


def measure_ddp(spec, steps: int, warmup: int) -> float:
    """Median step seconds of ``spec.ranks`` engine ranks under DDP (gloo), one process each."""
    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    mp.start_processes(
        _ddp_rank, args=(spec, steps, warmup, port, queue), nprocs=spec.ranks, start_method="spawn"
    )
    return queue.get()


# ---------------------------------------------------------------- the table


def models(host, only: str | None, gpu: str | None, layers: int | None):
    """(label, workload, arch, seq, mbs, has a reference) for each row. On a GPU the 8B row keeps the
    full vocabulary and the recipe's 8,192-token sequence, with ``layers`` layers (default 2)."""
    from llmb.recipes.proxies import PROXIES, shrink

    rows = []
    if only in (None, "tiny"):
        for workload in host.workloads().values():
            arch = shrink(workload.architecture(workload.default_variant.series[0].size), "tiny")
            rows.append(
                (
                    f"{workload.name} tiny",
                    workload,
                    arch,
                    PROXIES["tiny"].seq_len,
                    4,
                    workload.name == "llama31",
                )
            )
    if only in (None, "8b"):
        workload = host.workload("llama31")
        full = workload.architecture("8b")
        n = layers or (2 if gpu else 1)
        vocab, seq = (full.vocab, GPU_SEQ) if gpu else (WIDE_VOCAB, WIDE_SEQ)
        arch = replace(full.with_layers(n), vocab=vocab, size=f"8b-width-{n}layer")
        rows.append((f"llama31 8B width, {n} layer", workload, arch, seq, 1, True))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=5, help="timed rounds per row (a tiny row's round: 4 steps)"
    )
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--ga", type=int, default=1, help="micro-batches per optimizer step")
    parser.add_argument(
        "--ranks", default="1", help="comma-separated world sizes: 1, or 1,2 for DDP as well"
    )
    parser.add_argument("--only", choices=("tiny", "8b"))
    parser.add_argument(
        "--compile", action="store_true", help="the engine's --compile (per-block torch.compile)"
    )
    parser.add_argument(
        "--gpu",
        help="run on CUDA, this GPU type's published bf16 peak as the MFU's denominator (e.g. h100)",
    )
    parser.add_argument(
        "--layers", type=int, help="the 8B row's layers (default 1 on CPU, 2 on a GPU)"
    )
    parser.add_argument(
        "--compiled-only",
        action="store_true",
        help="on a GPU, time the engine compiled only (no eager or reference row), beside the peer",
    )
    args = parser.parse_args()
    from llmb.engines.torch.runtime import cpu_threads
    from llmb.plugins.host import PluginHost

    host = PluginHost()
    worlds = [int(w) for w in args.ranks.split(",")]
    if args.gpu:
        run_gpu(args, host)
        return
    torch.set_num_threads(cpu_threads())
    load = os.getloadavg()
    bf16 = mm_gflops(torch.bfloat16, BF16_SHAPE, repeats=3)
    print(
        f"CPU, torch {torch.__version__}, {torch.get_num_threads()} thread(s) per rank, GA {args.ga}, "
        f"compile {'on' if args.compile else 'off'}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print(
        f"torch.mm fp32 {PEAK_SHAPE[0]}x{PEAK_SHAPE[1]} @ {PEAK_SHAPE[1]}x{PEAK_SHAPE[2]}: sampled once per round "
        f"(column 'peak'); bf16 {BF16_SHAPE[0]}x{BF16_SHAPE[1]} @ {BF16_SHAPE[1]}x{BF16_SHAPE[2]}: {bf16:.1f} GFLOP/s"
    )
    header = (
        "model",
        "ranks",
        "tokens/step",
        "engine s",
        "GFLOP/s/rank",
        "peak",
        "% peak",
        "reference s",
        "ref GFLOP/s",
        "% of ref",
    )
    widths = (26, 5, 11, 9, 12, 7, 7, 11, 11, 8)
    print("  ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True)))
    for label, workload, arch, seq, mbs, has_reference in models(
        host, args.only, None, args.layers
    ):
        per_round = 4 if "tiny" in label else 1
        for world in worlds:
            spec = engine_spec(host, workload, arch, seq, mbs, args.ga, world, args.compile)
            step_flops = spec.gbs * spec.flops_per_sample
            if world == 1:
                result = measure(spec, has_reference, args.rounds, args.warmup, per_round)
            else:
                result = {
                    "engine": measure_ddp(spec, args.rounds * per_round, args.warmup),
                    "reference": math.nan,
                    "peak": math.nan,
                }
            achieved = step_flops / result["engine"] / world / 1e9
            reference = step_flops / result["reference"] / 1e9
            cells = (
                label,
                world,
                spec.gbs * seq,
                f"{result['engine']:.3f}",
                f"{achieved:.1f}",
                f"{result['peak']:.1f}",
                f"{100 * achieved / result['peak']:.0f}%",
                f"{result['reference']:.3f}",
                f"{reference:.1f}",
                f"{100 * achieved / reference:.0f}%",
            )
            cells = ["-" if "nan" in str(c) else c for c in cells]
            print("  ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)), flush=True)
    load = os.getloadavg()
    print(
        f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; python {sys.version.split()[0]}"
    )


def run_gpu(args, host) -> None:
    """One GPU: each row with the engine compiled and eager, then the reference (eager); MFU against the
    GPU type's published dense bf16 peak (llmb's GPU table, as ``llmb run`` reports it)."""
    from llmb.recipes.gpus import gpu_type

    if not torch.cuda.is_available():
        sys.exit("engine_throughput: --gpu needs a CUDA device; torch sees none")
    peak = gpu_type(args.gpu).peak_tflops.get("bf16")
    measured = mm_gflops(torch.bfloat16, (8192, 8192, 8192), repeats=10, device="cuda") / 1e3
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, GA {args.ga}; published bf16 "
        f"peak {peak} TFLOP/s; torch.mm bf16 8192^3 measured {measured:.0f} TFLOP/s"
    )
    header = ("model", "engine", "tokens/step", "step s", "TFLOP/s", "MFU", "of mm", "max GiB")
    widths = (26, 9, 11, 8, 8, 6, 6, 8)
    print("  ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True)))

    def row(label, kind, tokens, seconds, flops, memory):
        achieved = flops / seconds / 1e12
        cells = (
            label,
            kind,
            tokens,
            f"{seconds:.3f}",
            f"{achieved:.1f}",
            f"{100 * achieved / peak:.1f}%" if peak else "-",
            f"{100 * achieved / measured:.0f}%",
            "-" if math.isnan(memory) else f"{memory:.1f}",
        )
        print("  ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)), flush=True)

    peer = transformers_available()
    if not peer:
        print("transformers is not installed: no peer row (pip install transformers to add it)")
    ratios = []
    for label, workload, arch, seq, mbs, has_reference in models(
        host, args.only, args.gpu, args.layers
    ):
        compiled_s = math.nan
        for compiled in (True,) if args.compiled_only else (True, False):
            spec = engine_spec(host, workload, arch, seq, mbs, args.ga, 1, compiled, args.gpu)
            torch.cuda.reset_peak_memory_stats()
            result = measure_gpu(spec, has_reference and not compiled, args.rounds, args.warmup)
            flops = spec.gbs * spec.flops_per_sample
            kind = "compiled" if compiled else "eager"
            row(label, kind, spec.gbs * seq, result["engine"], flops, result["memory"])
            if not math.isnan(result["reference"]):
                row(label, "reference", spec.gbs * seq, result["reference"], flops, math.nan)
            if compiled:
                compiled_s = result["engine"]
        if (
            peer and has_reference
        ):  # the Llama rows: transformers' LlamaForCausalLM is the same model
            spec = engine_spec(host, workload, arch, seq, mbs, args.ga, 1, True, args.gpu)
            result = measure_peer(spec, args.rounds, args.warmup)
            flops = spec.gbs * spec.flops_per_sample
            row(label, "transformers", spec.gbs * seq, result["seconds"], flops, result["memory"])
            ratios.append((label, result["seconds"] / compiled_s))
    for label, ratio in ratios:
        # the engine's speed relative to the peer's: its step time over the engine's (aim: >= 1.05x)
        print(
            f"{label}: the engine (compiled) runs at {ratio:.2f}x transformers' speed (aim >= 1.05x)"
        )


if __name__ == "__main__":
    main()
