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

from llmb import UsageError, gpu_type, load_yaml_file


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


def binding(
    gpu: str,
    workload: str,
    gpus_in_node: int,
    framework: str | None = None,
    opt_in: str | None = None,
) -> Binding:
    """The reference's binding: each rank on its GPU's socket (GPUs per socket =
    GPUs per node / sockets per node), and the GPU type's core pinning where the
    run's launcher has it and ``opt_in`` (the submitting environment's value of
    the rule's variable, ENABLE_PCT_BINDING) turns it on."""
    divisor = max(1, gpus_in_node // int(reference()["sockets_per_node"]))
    pin = (reference().get("core_pinning") or {}).get(gpu_type(gpu).name)
    if (
        pin
        and opted_in(pin.get("opt_in"), opt_in)
        and workload not in pin.get("not_for", ())
        and framework in pin.get("frameworks", ())
    ):
        return Binding(divisor, int(pin["stride"]), int(pin["cores"]))
    return Binding(divisor)


def opted_in(name: str | None, value: str | None) -> bool:
    """Whether ``value`` of the opt-in variable ``name`` turns the setting on, read as the
    reference reads it (launch.sh lowercases it, argument_parser.bool_arg parses it);
    unset or empty: off. A rule without an opt-in is always on."""
    if not name:
        return True
    text = (value or "").strip().lower()
    if text in ("true", "1", "t", "yes", "y"):
        return True
    if text in ("", "false", "0", "f", "no", "n"):
        return False
    raise UsageError(f"{name}={value!r}: expected true or false.")


def segment(nodes: int, gpus_in_node: int, override: int | None) -> int | None:
    """sbatch's ``--segment``: ``override`` when given (0: none), else the reference's rule
    on systems of 4-GPU nodes; None where there is none."""
    if override is not None:
        if override < 0 or (override and nodes % override):
            raise UsageError(
                f"--segment {override}: a segment is a whole divisor of the run's {nodes} node(s) "
                f"(e.g. {largest_divisor(nodes, nodes)}), or 0 for none."
            )
        return override or None
    rule = reference()["segment"]
    if gpus_in_node != int(rule["node_gpus"]):
        return None
    return largest_divisor(nodes, int(rule["largest"]))


def largest_divisor(nodes: int, at_most: int) -> int:
    return next(d for d in range(min(nodes, at_most), 0, -1) if nodes % d == 0)


def rank_env(gpu: str, hf_token_passed: bool, row: dict | None = None) -> dict[str, str]:
    """The variables the reference sets on every rank, for this GPU type, and, given
    the run's ``row`` (see ``row_of``), the per-row rules (``row_env``)."""
    data = reference()
    env = {k: str(v) for k, v in (data.get("rank_env") or {}).items()}
    if hf_token_passed:
        env.update({k: str(v) for k, v in (data.get("rank_env_with_hf_token") or {}).items()})
    env.update(
        {k: str(v) for k, v in ((data.get("gpu_env") or {}).get(gpu_type(gpu).name) or {}).items()}
    )
    if row is not None:
        for rule in data.get("row_env") or ():
            if not matches(rule["when"], row):
                continue
            env.update({k: str(v) for k, v in (rule.get("set") or {}).items()})
            if "unset" in rule and not any(
                matches(kept["when"], row)
                for kept in (data.get("keep") or {}).get(rule.get("keep"), ())
            ):
                env.pop(rule["unset"], None)
    return env


def row_of(
    framework: str | None,
    workload: str,
    size: str,
    gpu: str,
    gpus: int,
    framework_config: dict | None,
) -> dict:
    """What the per-row rules match: the run's framework, workload, size, GPU type and
    GPU count, and (production runs) the framework's recipe and precision names."""
    config = framework_config or {}
    return {
        "framework": framework,
        "workload": workload,
        "size": size,
        "gpu": gpu_type(gpu).name,
        "gpus": gpus,
        "recipe": config.get("recipe"),
        "precision": (config.get("precision") or {}).get("name"),
    }


def matches(when: dict, row: dict) -> bool:
    """Every key of ``when`` matches ``row``: a value or a list of values; ``min_gpus`` a floor."""
    for key, wanted in when.items():
        if key == "min_gpus":
            if row["gpus"] < int(wanted):
                return False
        elif row.get(key) not in (wanted if isinstance(wanted, list) else [wanted]):
            return False
    return True
