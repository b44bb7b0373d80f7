"""One rank's place in a torch-engine run: its device, its process group, what rank 0 prints.

``Rank`` resolves an ``auto`` device (``resolve_device``), picks this rank's
GPU or one CPU thread per rank (``cpu_threads``), joins the process group
(NCCL on GPU, gloo on CPU) when there is more than one rank, and tears it
down (``close``). ``say`` prints on rank 0 only (the log's lines are
Megatron-Bridge's, ``engines/torch/logfmt.py``); ``reduce`` is a min/max
over the ranks. Also here: NVTX ranges on GPU (``nvtx``) and Python's
garbage collector on a fixed cadence (``GarbageCollection``).
"""

from __future__ import annotations

import contextlib
import gc
import os
from datetime import timedelta

from llmb.runs.runspec import RunSpec

# Python's garbage collector: automatic collection off, generations 0-1 collected every GC_EVERY steps,
# so every rank collects at the same step instead of whenever its allocations trigger it (a rank that
# collects mid-step stalls the others at the next gradient reduction). 50: outside the seeds' statistics
# windows (e.g. steps 35-44) of a default 50-step run.
GC_EVERY = 50


def cpu_threads() -> int:
    """Threads for one CPU rank: OMP_NUM_THREADS when set (the cluster's or the user's word), else 1.
    Measured here: two threads per rank were 1.1-1.4x slower than one on a quiet machine, and 10-40x
    slower on a loaded one, where ranks that spin-wait for each other's threads stall."""
    if os.environ.get("OMP_NUM_THREADS", "").strip().isdigit():
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    return 1


def resolve_device(spec: RunSpec, cuda: bool, record: bool) -> RunSpec:
    """An ``auto`` device decided where the job runs; rank 0 records it in ``recipe.json``."""
    from dataclasses import replace

    from llmb.runs import experiment

    device, dtype = ("cuda", "bfloat16") if cuda else ("cpu", "float32")
    if record:
        path = os.path.join(spec.run_dir, experiment.RECIPE_FILE)
        data = experiment.read_json(path)
        if data is not None:
            data.update({"device": device, "compute_dtype": dtype})
            experiment.write_json(path, data)
    return replace(spec, device=device, compute_dtype=dtype)


def nvtx(enabled: bool):
    """A ``range(name)`` context factory: NVTX on GPU, nothing on CPU."""
    if not enabled:
        return lambda name: contextlib.nullcontext()
    try:
        import nvtx  # the nvtx package, when installed

        return lambda name: nvtx.annotate(name)
    except ImportError:
        import torch

        return torch.cuda.nvtx.range


class GarbageCollection:
    """Python's garbage collector on a fixed cadence: ``start`` collects fully and turns automatic
    collection off, ``after_step(step)`` collects generations 0 and 1 every ``every`` steps, ``stop``
    turns automatic collection back on (when it was on at ``start``)."""

    def __init__(self, every: int = GC_EVERY):
        self.every = every
        self.was_enabled = gc.isenabled()

    def start(self) -> None:
        self.was_enabled = gc.isenabled()
        gc.collect()
        gc.disable()

    def after_step(self, step: int) -> None:
        if step % self.every == 0:
            gc.collect(1)

    def stop(self) -> None:
        if self.was_enabled:
            gc.enable()


class Rank:
    """This process's rank of ``world``: ``spec`` (its device resolved), ``device``, ``cuda``, and whether
    a process group joins the ranks (``distributed``, joined here, left by ``close``)."""

    def __init__(self, spec: RunSpec, rank: int, world: int, local_rank: int):
        import torch

        self.torch = torch
        if spec.device == "auto":
            spec = resolve_device(spec, torch.cuda.is_available(), record=rank == 0)
        self.spec, self.rank, self.world = spec, rank, world
        self.cuda = spec.device == "cuda"
        if self.cuda:
            torch.cuda.set_device(local_rank)
            self.device = torch.device("cuda", local_rank)
        else:
            self.device = torch.device("cpu")
            torch.set_num_threads(cpu_threads())
        self.distributed = world > 1
        if self.distributed:
            import torch.distributed as dist

            dist.init_process_group(
                "nccl" if self.cuda else "gloo",
                rank=rank,
                world_size=world,
                timeout=timedelta(minutes=10),
            )
        self.range = nvtx(self.cuda)

    def say(self, *lines: str) -> None:
        """Print ``lines`` on rank 0 (the run's log is rank 0's)."""
        if self.rank == 0:
            for line in lines:
                print(line, flush=True)

    def reduce(self, value: float, op: str) -> float:
        """``value``'s ``max`` or ``min`` over the ranks (every rank must call it)."""
        if not self.distributed:
            return value
        import torch.distributed as dist

        tensor = self.torch.tensor([value], dtype=self.torch.float64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.MIN)
        return float(tensor.item())

    def close(self) -> None:
        """Leave the process group, after every rank got here (not on failure: the barrier would wait
        forever for the rank that failed)."""
        if self.distributed:
            import torch.distributed as dist

            dist.barrier()
            dist.destroy_process_group()
