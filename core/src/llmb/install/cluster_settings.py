"""The cluster settings a run may take from a flag, its environment variable
or the cluster file (``$LLMB_INSTALL/cluster.yaml``), in that order, and the
one check each value passes wherever it comes from (``llmb.install.value_checks``,
which an ``ADDITIONAL_SLURM_PARAMS`` item for the same sbatch option passes too).

Where sbatch reads an input environment variable for the option
(``man sbatch``, INPUT ENVIRONMENT VARIABLES) llmb reads the same one;
``LLMB_*`` names stand in where sbatch has none (``--nodelist``,
``--exclude``, ``--segment``) or the setting is llmb's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# Each kind's one check, shared by the flags, the variables, the cluster file and ADDITIONAL_SLURM_PARAMS.
from llmb.install.value_checks import (
    boolean,
    features,
    gpu,
    gpus_per_node,
    gres,
    hostlist,
    names,
    segment,
    time_limit,
)


@dataclass(frozen=True)
class Setting:
    """One cluster setting: its name (``SubmitOptions``' field, or the request's), the
    flag, the environment variable, the cluster file's key, its check, and the default."""

    name: str
    flag: str
    variable: str
    key: str  # in the cluster file: "account", "slurm.qos"
    check: Callable[[object, str], object]
    default: str  # in words, as llmb config show prints it
    default_value: object = None  # what a run takes when nothing gives a value (None: not set)


SETTINGS = (
    Setting(
        "account",
        "--account",
        "SBATCH_ACCOUNT",
        "account",
        names,
        "none: the cluster's default account",
    ),
    Setting(
        "partition",
        "--partition",
        "SBATCH_PARTITION",
        "partition",
        names,
        "none: the cluster's default partition",
    ),
    Setting(
        "time_limit",
        "--time-limit",
        "SBATCH_TIMELIMIT",
        "slurm.time",
        time_limit,
        "derived from the run: llmb plan shows it",
    ),
    Setting(
        "nodelist", "--nodelist", "LLMB_NODELIST", "slurm.nodelist", hostlist, "none: any nodes"
    ),
    Setting("exclude", "--exclude", "LLMB_EXCLUDE", "slurm.exclude", hostlist, "none"),
    Setting(
        "reservation", "--reservation", "SBATCH_RESERVATION", "slurm.reservation", names, "none"
    ),
    Setting("qos", "--qos", "SBATCH_QOS", "slurm.qos", names, "none: the association's default"),
    Setting(
        "constraint", "--constraint", "SBATCH_CONSTRAINT", "slurm.constraint", features, "none"
    ),
    Setting(
        "segment",
        "--segment",
        "LLMB_SEGMENT",
        "slurm.segment",
        segment,
        "none: llmb's rule on 4-GPU-node systems",
    ),
    Setting("gres", "--gres", "SBATCH_GRES", "gres", gres, "detected from the cluster"),
    Setting(
        "numa_binding",
        "--numa-binding",
        "LLMB_NUMA_BINDING",
        "numa_binding",
        boolean,
        "true: each rank on its GPU's NUMA node",
        True,
    ),
    Setting(
        "gpu", "--gpu", "GPU_TYPE", "gpu", gpu, "none: --gpu or the published recipe's default"
    ),
    Setting(
        "gpus_per_node",
        "--gpus-per-node",
        "GPUS_PER_NODE",
        "gpus_per_node",
        gpus_per_node,
        "the GPU type's: 4 on GB200/GB300, 8 otherwise",
    ),
)
BY_NAME = {s.name: s for s in SETTINGS}
VARIABLES = {s.name: s.variable for s in SETTINGS}
