"""The preflight job's side: every rank measures, rank 0 writes ``measurements.json``.

``python -m llmb.worker RUN_JSON`` runs this for a spec of engine ``preflight``
(``RunSpec.preflight`` holds the sizes). Order: each rank's GEMM and memory
copy; the all-reduce inside each node; the all-reduce over every rank; then the
node pairs of ``llmb.preflight.pairing``, step by step (a step's pairs at once,
the other ranks waiting at a barrier). A node is named by Slurm
(``SLURMD_NODENAME``), else by its host name. On GPU nodes each node's local rank 0
also records ``nvidia-smi -q -x``. Everything goes through torch.distributed: NCCL on
GPUs, gloo on CPU ranks.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import timedelta

from llmb.preflight import measure, pairing

MEASUREMENTS = "measurements.json"
# Sizes: (GPU, CPU). A CPU rank's figures only compare with its peers', so its sizes are small.
# Seconds every GPU of a node computes while nvidia-smi reads the clocks (longer if nvidia-smi takes longer).
LOADED_S = 5.0
DEFAULTS = {
    "gemm_n": (8192, 384),
    "memory_mb": (2048, 64),
    "allreduce_mb": (256, 8),
    "repeats": (20, 15),
}


def node_name(environ=os.environ) -> str:
    return environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def settings(spec, cuda: bool) -> dict:
    given = spec.preflight or {}
    return {k: int(given.get(k) or pair[0 if cuda else 1]) for k, pair in DEFAULTS.items()}


def run(spec, rank: int, world: int, local_rank: int) -> None:
    import torch
    import torch.distributed as dist

    cuda = spec.device == "cuda" or (spec.device == "auto" and torch.cuda.is_available())
    if cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
        # one core per rank: a node's figure is its cores', not a shared pool's
        torch.set_num_threads(1)
    sizes = settings(spec, cuda)
    distributed = world > 1
    if distributed:
        dist.init_process_group(
            "nccl" if cuda else "gloo", rank=rank, world_size=world, timeout=timedelta(minutes=10)
        )
    names = [node_name()]
    if distributed:
        names = [None] * world
        dist.all_gather_object(names, node_name())
    nodes = list(dict.fromkeys(names))
    node_ranks = {n: [r for r, name in enumerate(names) if name == n] for n in nodes}
    mine = names[rank]

    barrier = dist.barrier if distributed else (lambda: None)
    gpu_report = None
    if cuda:  # nvidia-smi under load: every GPU of the node computes while its local rank 0 asks
        import threading
        import time

        from llmb.preflight.gpu_info import query

        barrier()
        until = time.monotonic() + LOADED_S
        if node_ranks[mine][0] == rank:
            found: dict = {}
            reader = threading.Thread(target=lambda: found.update(report=query()), daemon=True)
            reader.start()
            measure.busy_while(
                device, sizes["gemm_n"], lambda: reader.is_alive() or time.monotonic() < until
            )
            reader.join(timeout=60)
            gpu_report = found.get("report")
        else:
            measure.busy_while(device, sizes["gemm_n"], lambda: time.monotonic() < until)

    barrier()
    gemm = measure.gemm_tflops(device, sizes["gemm_n"], sizes["repeats"])
    barrier()
    memory = measure.memory_gb_s(device, sizes["memory_mb"], sizes["repeats"])
    own = {
        "rank": rank,
        "node": mine,
        "gemm": gemm,
        "memory": memory,
        "intra": None,
        "world": None,
        "pairs": {},
        "gpu_report": gpu_report,
        "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    }

    if distributed:
        # Every group is created by every rank, in the same order (torch.distributed's rule).
        node_groups = {n: dist.new_group(ranks) for n, ranks in node_ranks.items()}
        steps = pairing.schedule(len(nodes))
        pair_groups = {
            pair: dist.new_group(sorted(node_ranks[nodes[pair[0]]] + node_ranks[nodes[pair[1]]]))
            for step in steps
            for pair in step
        }
        mb, repeats = sizes["allreduce_mb"], sizes["repeats"]
        if len(node_ranks[mine]) > 1:
            own["intra"] = measure.allreduce_busbw(
                device, node_groups[mine], len(node_ranks[mine]), mb, repeats
            )
        barrier()
        if len(nodes) > 1:
            own["world"] = measure.allreduce_busbw(device, None, world, mb, repeats)
        for step in steps:
            barrier()
            here = nodes.index(mine)
            for pair in step:
                if here in pair:
                    size = len(node_ranks[nodes[pair[0]]]) + len(node_ranks[nodes[pair[1]]])
                    own["pairs"][f"{pair[0]}-{pair[1]}"] = measure.allreduce_busbw(
                        device, pair_groups[pair], size, mb, repeats
                    )
        barrier()
    gathered = [own]
    if distributed:
        gathered = [None] * world if rank == 0 else None
        dist.gather_object(own, gathered, dst=0)
    if rank == 0:
        data = {
            "job_id": spec.job_id,
            "gpu": spec.gpu,
            # the Slurm cluster it ran on: a run's --exclude-from warns when it is submitted to another
            "cluster": os.environ.get("SLURM_CLUSTER_NAME") or None,
            "device": "cuda" if cuda else "cpu",
            "torch": torch.__version__,
            "backend": "nccl" if cuda else ("gloo" if distributed else None),
            "nodes": nodes,
            "ranks_per_node": {n: len(r) for n, r in node_ranks.items()},
            "gpus_per_node": spec.ranks_per_node or spec.ranks,
            "sizes": sizes,
            "ranks": gathered,
            "pairs": [[list(pair) for pair in step] for step in pairing.schedule(len(nodes))],
        }
        path = os.path.join(spec.run_dir, MEASUREMENTS)
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
        os.replace(path + ".tmp", path)
        for r in gathered:
            print(
                f"[llmb] preflight rank {r['rank']} on {r['node']}: GEMM {r['gemm']:.3g} TFLOP/s, memory "
                f"{r['memory']:.4g} GB/s",
                flush=True,
            )
        print(
            f"[llmb] preflight: measurements of {len(nodes)} node(s) written to {path}", flush=True
        )
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
