"""One rank of a multi-process CPU test: gloo over a file store (no ports to race for).

``tests/engine_parallel_runs.py`` and ``tests/parallel_layout_ranks.py`` run
as ``python SCRIPT ... RANK WORLD STORE OUT``, one process per rank; each
rank's body runs inside ``gloo_group``. Tests whose ranks rendezvous over TCP
(env://) take their port from ``free_port``.
"""

from __future__ import annotations

import contextlib
import socket

import torch


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for MASTER_PORT: env:// rendezvous)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def gloo_group(rank: int, world: int, store: str):
    """The default process group (gloo, ``file://store``) with one CPU thread, for the body; a barrier
    when the body finished (no rank leaves while another still writes), then the group is destroyed."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        yield
        dist.barrier()
    finally:
        dist.destroy_process_group()
