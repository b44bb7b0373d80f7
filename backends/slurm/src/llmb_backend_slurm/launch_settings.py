"""What the reference launcher does for a run, from ``launch.yaml`` and the GPU
catalogue: the ranks' environment, their NUMA binding, the sbatch segment.

The reference is NVIDIA's Megatron-Bridge ``scripts/performance`` launcher,
which measured the published numbers. Nothing here asks Slurm anything;
``backend.py`` combines these with what the cluster supports.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from functools import lru_cache

from llmb.errors import UsageError
from llmb.recipes.gpus import gpu_type
from llmb.yamlio import load_yaml_file


@lru_cache(maxsize=1)
def reference() -> dict:
    return load_yaml_file(os.path.join(os.path.dirname(__file__), "launch.yaml"))


@dataclass(frozen=True)
class Binding:
    """One rank's binding: NUMA node ``SLURM_LOCALID // divisor``; with ``pin_cores``,
    also CPUs ``SLURM_LOCALID * pin_stride`` onwards."""

    divisor: int
    pin_stride: int = 0
    pin_cores: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def node_gpus(gpu: str, cluster_gpus_per_node: int | None) -> int:
    """GPUs in one of the cluster's nodes: the cluster's own count when given, else the GPU type's."""
    return cluster_gpus_per_node or gpu_type(gpu).gpus_per_node


def binding(gpu: str, workload: str, gpus_in_node: int) -> Binding:
    """The reference's binding: each rank on its GPU's socket (GPUs per socket =
    GPUs per node / sockets per node), and the GPU type's core pinning."""
    divisor = max(1, gpus_in_node // int(reference()["sockets_per_node"]))
    pin = (reference().get("core_pinning") or {}).get(gpu_type(gpu).name)
    if pin and workload not in pin.get("not_for", ()):
        return Binding(divisor, int(pin["stride"]), int(pin["cores"]))
    return Binding(divisor)


def segment(nodes: int, gpus_in_node: int, override: int | None) -> int | None:
    """sbatch's ``--segment``: ``override`` when given (0: none), else the reference's rule
    on systems of 4-GPU nodes; None where there is none."""
    if override is not None:
        if override < 0 or (override and nodes % override):
            raise UsageError(f"--segment {override}: a segment is a whole divisor of the run's {nodes} node(s) "
                             f"(e.g. {largest_divisor(nodes, nodes)}), or 0 for none.")
        return override or None
    rule = reference()["segment"]
    if gpus_in_node != int(rule["node_gpus"]):
        return None
    return largest_divisor(nodes, int(rule["largest"]))


def largest_divisor(nodes: int, at_most: int) -> int:
    return next(d for d in range(min(nodes, at_most), 0, -1) if nodes % d == 0)


def rank_env(gpu: str, hf_token_passed: bool) -> dict[str, str]:
    """The variables the reference sets on every rank, for this GPU type."""
    data = reference()
    env = {k: str(v) for k, v in (data.get("rank_env") or {}).items()}
    if hf_token_passed:
        env.update({k: str(v) for k, v in (data.get("rank_env_with_hf_token") or {}).items()})
    env.update({k: str(v) for k, v in ((data.get("gpu_env") or {}).get(gpu_type(gpu).name) or {}).items()})
    return env
