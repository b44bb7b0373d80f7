"""Synthetic training logs in the formats of field-facts §2, for the parse
benchmark and the tests. Deterministic for a given seed.

Lines follow the examples in the seeds and field-facts exactly; the numbers
are made up.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator

DTYPE_CODES = (7, 9)  # float32, bfloat16
COLLECTIVES = ("AllReduce", "AllGather", "ReduceScatter", "Broadcast")


def megatron_bridge_lines(
    iterations: Iterable[int],
    last: int = 50,
    step_ms: dict[int, float] | None = None,
    tflops: dict[int, float] | None = None,
    gbs: int = 128,
    nan_at: Iterable[int] = (),
    prefix: str = "",
    seed: int = 0,
) -> Iterator[str]:
    """A ``Step Time`` line, then its ``iteration i/N`` line, per iteration."""
    rng = random.Random(seed)
    nan_at = set(nan_at)
    for i in iterations:
        ms = (step_ms or {}).get(i, 1000.0 + rng.random() * 20)
        tf = (tflops or {}).get(i, 900.0 + rng.random() * 10)
        grad = "nan" if i in nan_at else f"{1 + rng.random():.3f}"
        yield f"{prefix}Step Time : {ms / 1000:.2f}s GPU utilization: {tf:.1f}MODEL_TFLOP/s/GPU"
        yield (
            f"{prefix} [2026-11-21 10:00:{i % 60:02d}] iteration {i:8d}/{last:8d} | consumed samples: {i * gbs:12d} | "
            f"elapsed time per iteration (ms): {ms:.1f} | learning rate: 3.000000E-05 | global batch size: {gbs:5d} | "
            f"lm loss: 1.2E+01 | loss scale: 1.0 | grad norm: {grad} | number of skipped iterations:   0 | "
            f"number of nan iterations:   0 |"
        )


def nemo2_lines(
    iterations: Iterable[int],
    last: int = 49,
    step_s: dict[int, float] | None = None,
    tflops: dict[int, float] | None = None,
    gbs: int = 128,
    seed: int = 0,
) -> Iterator[str]:
    """NeMo 2 (Lightning) lines; iterations are 0-based (a 50-step run ends at 49/49)."""
    rng = random.Random(seed)
    for i in iterations:
        seconds = (step_s or {}).get(i, 6.0 + rng.random() * 0.2)
        tf = (tflops or {}).get(i, 1200.0 + rng.random() * 50)
        yield (
            f"Training epoch 0, iteration {i}/{last} | lr: 6.897e-06 | global_batch_size: {gbs} | global_step: {i} | "
            f"reduced_train_loss: 11.96 | train_step_timing in s: {seconds:.4f} | TFLOPS_per_GPU: {tf:.3e} | "
            f"consumed_samples: {(i + 1) * gbs}"
        )


def nccl_lines(count: int, seed: int = 0) -> Iterator[str]:
    """``NCCL_DEBUG_SUBSYS=COLL`` collective lines."""
    rng = random.Random(seed)
    for op in range(count):
        name = COLLECTIVES[rng.randrange(len(COLLECTIVES))]
        yield (
            f"node{rng.randrange(1, 33):03d}:{rng.randrange(1000, 99999)}:{rng.randrange(1000, 99999)} "
            f"[{rng.randrange(8)}] NCCL INFO {name}: opCount {op:x} sendbuff 0x7ffb4713c200 recvbuff "
            f"0x7ffb4713c200 count {rng.choice((1, 1024, 4194304, 16777216))} datatype "
            f"{DTYPE_CODES[rng.randrange(2)]} op 0 root 0 comm 0x55556b100660 "
            f"[nranks={rng.choice((8, 64, 128))}] stream 0x5555630c58b0"
        )


CHECKPOINT_MEGATRON = (
    "successfully saved checkpoint from iteration      50 to /nemo_run/code/nemo_experiments/default/checkpoints "
    "[ t 1/1, p 1/1 ] (min, max) time across ranks (ms): save-checkpoint ................................: "
    "(24895.07, 24895.13)"
)
CHECKPOINT_NEMO_SAVE = (
    "[NeMo I 2025-04-11 14:48:45 nemo_logging:393] Global Checkpoint Save : Rank: 0 : Iteration: 50 : "
    "Start time: 1744408121.151s : Save duration: 4.389s"
)
CHECKPOINT_NEMO_LOAD = (
    "[NeMo I 2025-04-11 14:46:18 nemo_logging:393] Global Checkpoint Load : Rank : 0 : Start time : "
    "1744407969.270s : Time spent in load_checkpoint: 9.712s"
)
WATCHDOG = (
    "[rank368]:[E808 04:21:41.160918398 ProcessGroupNCCL.cpp:655] [Rank 368] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600001 "
    "milliseconds before timing out."
)
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.10 GiB of which 1.06 GiB is free."
)
NODE_FAILURE = "slurmstepd: error: *** JOB 4242 ON node017 CANCELLED AT 2026-11-21T10:11:12 DUE TO NODE FAILURE ***"
TRACEBACK = (
    "[rank3]: Traceback (most recent call last):",
    '[rank3]:   File "/opt/megatron/train.py", line 120, in <module>',
    "[rank3]:     main()",
    '[rank3]:   File "/opt/megatron/train.py", line 80, in main',
    "[rank3]:     raise ValueError('bad tensor shape (8192, 4096) vs (4096,)')",
    "[rank3]: ValueError: bad tensor shape (8192, 4096) vs (4096,)",
)


def write_lines(path, lines: Iterable[str]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(line)
            handle.write("\n")


def write_large_trace(path, size_bytes: int, seed: int = 0, block_lines: int = 20_000) -> int:
    """A Megatron-Bridge log of 50 iterations whose first steps are buried in
    NCCL collective lines, about ``size_bytes`` long (a block of trace lines
    is generated once and repeated, so writing a gigabyte takes seconds)."""
    block = ("\n".join(nccl_lines(block_lines, seed)) + "\n").encode()
    iteration_lines = list(megatron_bridge_lines(range(1, 51), seed=seed))
    written = 0
    with open(path, "wb") as handle:
        pairs = [iteration_lines[i : i + 2] for i in range(0, len(iteration_lines), 2)]
        blocks_total = max(1, size_bytes // len(block))
        per_step = max(1, blocks_total // 5)  # the trace covers the first five steps
        for step, pair in enumerate(pairs):
            if step < 5:
                for _ in range(per_step):
                    handle.write(block)
                    written += len(block)
            data = ("\n".join(pair) + "\n").encode()
            handle.write(data)
            written += len(data)
    return written


NOISE_LINE = "[NeMo W 2026-11-21 10:00:00 nemo_logging:361] a warning that says nothing useful " * 2
TREE_EXPERIMENTS = (  # names the seeds' launchers give (workloads whose window is the replaced tool's 35-44)
    "pretrain_llama3.1_8b_fp8_gpus8_tp1_pp1_cp1_vpNone_ep1_mbs2_gbs128",
    "pretrain_llama3.1_8b_bf16_gpus8_tp1_pp1_cp1_vpNone_ep1_mbs2_gbs128",
    "pretrain_llama3.1_70b_fp8_gpus64_tp4_pp4_cp1_vp5_ep1_mbs1_gbs128",
    "pretrain_llama3.1_405b_fp8_gpus128_tp8_pp8_cp2_vp8_ep1_mbs1_gbs128",
    "pretrain_nemotron4_15b_bf16_gpus16_tp1_pp1_cp1_vpNone_epNone_mbs2_gbs128",
    "pretrain_nemotron4_340b_fp8_gpus128_tp8_pp8_cp1_vp12_epNone_mbs1_gbs128",
    "pretrain_custom_model_bf16_gpus8_mbs1_gbs128",
)


def _noisy_run(path, size_bytes: int, kind: str, seed: int) -> int:
    """One run's log of about ``size_bytes``: warnings around 50 Megatron-Bridge
    iterations. ``kind``: ``success``, ``incomplete`` (stops after 40),
    ``nan`` (grad norm nan at 20) or ``oom`` (dies before its first step)."""
    lines = [
        f"[NeMo I 2026-11-21 10:00:00 nemo_logging:393] Experiments will be logged at /nemo_run/experiments/{seed}"
    ]
    if kind == "oom":
        lines += [*TRACEBACK, OOM]
    else:
        stop = 40 if kind == "incomplete" else 50
        lines += megatron_bridge_lines(
            range(1, stop + 1), nan_at=(20,) if kind == "nan" else (), seed=seed
        )
    noise = (NOISE_LINE + "\n") * max(0, (size_bytes // len(lines) - 200) // (len(NOISE_LINE) + 1))
    written = 0
    with open(path, "w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(noise)
            handle.write(line + "\n")
            written += len(noise) + len(line) + 1
    return written


def write_experiments_tree(
    root, size_bytes: int = 1_000_000_000, small_runs: int = 200, seed: int = 0
) -> dict:
    """An ``experiments`` tree of about ``size_bytes`` in the seeds' layout,
    ``<root>/<exp>/<exp>_<timestamp>/<exp>/log-<exp>_<jobid>_0.out`` (job ids
    make each log's file name unique): 60 % in six runs whose first steps carry
    an NCCL collective trace, 20 % in two runs of 200 MB-style noise, 20 % in
    ``small_runs`` runs of warnings around their iterations, one in ten of them
    incomplete, one in ten with a nan grad norm, one in ten dead of CUDA OOM.
    Returns {log path: kind}."""
    import os

    kinds: dict[str, str] = {}
    plan = [("trace", int(size_bytes * 0.1))] * 6 + [("noise", int(size_bytes * 0.1))] * 2
    small = int(size_bytes * 0.2 / max(1, small_runs))
    plan += [
        ({7: "incomplete", 8: "nan", 9: "oom"}.get(i % 10, "success"), small)
        for i in range(small_runs)
    ]
    for index, (kind, size) in enumerate(plan):
        exp = TREE_EXPERIMENTS[index % len(TREE_EXPERIMENTS)]
        run = os.path.join(root, exp, f"{exp}_{1763719200 + index}", exp)
        os.makedirs(run, exist_ok=True)
        log = os.path.join(run, f"log-{exp}_{4_200_000 + index}_0.out")
        if kind == "trace":
            write_large_trace(log, size, seed=seed + index)
        else:
            _noisy_run(log, size, "success" if kind == "noise" else kind, seed + index)
        kinds[log] = kind
    return kinds
