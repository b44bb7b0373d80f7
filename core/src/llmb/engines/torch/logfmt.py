"""The log lines the torch engine writes: Megatron-Bridge's (field-facts §2),
so that one parser reads engine runs and cluster runs alike."""

from __future__ import annotations

from datetime import datetime


def tflops_text(value: float) -> str:
    """One decimal like Megatron for GPU-sized numbers; significant digits
    for a CPU proxy's, which would otherwise print as 0.0."""
    return f"{value:.1f}" if value >= 10 else f"{value:.4g}"


def step_time(seconds: float, tflops: float) -> str:
    return f"Step Time : {seconds:.2f}s GPU utilization: {tflops_text(tflops)}MODEL_TFLOP/s/GPU"


def iteration(
    i: int,
    total: int,
    *,
    consumed: int,
    elapsed_ms: float,
    tflops: float,
    lr: float,
    gbs: int,
    loss: float,
    grad_norm: float,
    when: datetime | None = None,
) -> str:
    stamp = (when or datetime.now()).strftime("%Y-%m-%d %H:%M:%S")
    return (
        f" [{stamp}] iteration {i:8d}/{total:8d} | consumed samples: {consumed:12d} | "
        f"elapsed time per iteration (ms): {elapsed_ms:.1f} | throughput per GPU (TFLOP/s/GPU): {tflops_text(tflops)} | "
        f"learning rate: {lr:.6E} | global batch size: {gbs:5d} | lm loss: {loss:.6E} | loss scale: 1.0 | "
        f"grad norm: {grad_norm:.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


def parameters(layers: int, embedding: int, total: int) -> list[str]:
    return [
        f"Number of parameters in transformer layers in billions: {layers / 1e9:6.2f}",
        f"Number of parameters in embedding layers in billions: {embedding / 1e9:.2f}",
        f"Total number of parameters in billions: {total / 1e9:.2f}",
        f"Total number of parameters: {total}",
    ]


def memory(i: int, rank: int, fields: dict[str, float]) -> str:
    parts = " | ".join(f"{name}: {value:.3f}" for name, value in fields.items())
    return f"[Rank {rank}] (after {i} iterations) memory (GB) | {parts}"


def checkpoint_saved(
    fmt: str, iteration_: int, path: str, ms_min: float, ms_max: float, started: float
) -> list[str]:
    if fmt == "nemo":
        return [
            f"Global Checkpoint Save : Rank: 0 : Iteration: {iteration_} : Start time: {started:.3f}s : "
            f"Save duration: {ms_max / 1000:.3f}s"
        ]
    return [
        f"successfully saved checkpoint from iteration {iteration_:7d} to {path} [ t 1/1, p 1/1 ]",
        f"(min, max) time across ranks (ms): save-checkpoint ................................: "
        f"({ms_min:.2f}, {ms_max:.2f})",
    ]


def checkpoint_loaded(
    fmt: str, path: str, ms_min: float, ms_max: float, started: float
) -> list[str]:
    if fmt == "nemo":
        return [
            f"Global Checkpoint Load : Rank : 0 : Start time : {started:.3f}s : "
            f"Time spent in load_checkpoint: {ms_max / 1000:.3f}s"
        ]
    return [
        f"successfully loaded checkpoint from {path} [ t 1/1, p 1/1 ]",
        f"(min, max) time across ranks (ms): load-checkpoint ................................: "
        f"({ms_min:.2f}, {ms_max:.2f})",
    ]
