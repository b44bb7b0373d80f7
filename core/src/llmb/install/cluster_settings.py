"""The cluster settings a run may take from a flag, its environment variable
or the cluster file (``$LLMB_INSTALL/cluster.yaml``), in that order, and the
one check each value passes wherever it comes from.

Most of these values end up in ``#SBATCH`` lines, which sbatch reads itself:
a value never holds a line break, a space or a quote, only the characters
Slurm's names, host lists and feature expressions use.

Where sbatch reads an input environment variable for the option
(``man sbatch``, INPUT ENVIRONMENT VARIABLES) llmb reads the same one;
``LLMB_*`` names stand in where sbatch has none (``--nodelist``,
``--exclude``, ``--segment``) or the setting is llmb's own.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from llmb.engines.frameworks.settings import FALSE, TRUE
from llmb.errors import UsageError

_NAMES = re.compile(r"[A-Za-z0-9_.@+%-]+(,[A-Za-z0-9_.@+%-]+)*")  # accounts, partitions, QOS, reservations
_HOSTLIST = re.compile(r"[A-Za-z0-9_.,\[\]-]+")  # node001,node[002-004]
_FEATURES = re.compile(r"[A-Za-z0-9_.,:&|\[\]*!()-]+")  # gpu&ib, [rack1|rack2], gpu*2
_TIME = re.compile(r"(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+(:\d{1,2}){0,2}|UNLIMITED|INFINITE)", re.I)
_GRES = re.compile(r"none|gpu:(\d+)")
MAX_SEGMENT = 131072  # nodes; beyond any cluster: a typo


def _text(value: object, where: str, pattern: re.Pattern, valid: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise UsageError(f"{where}: expected text ({valid}), got {value!r}.")
    text = str(value).strip()
    if not pattern.fullmatch(text):
        raise UsageError(f"{where} {text!r}: expected {valid}, without spaces, quotes or line breaks.")
    return text


def names(value: object, where: str) -> str:
    return _text(value, where, _NAMES, "a name or comma-separated names of letters, digits and _ . @ + % -")


def hostlist(value: object, where: str) -> str:
    if isinstance(value, list):  # the cluster file may list nodes
        value = ",".join(str(v) for v in value)
    return _text(value, where, _HOSTLIST, "a Slurm host list such as node001,node[002-004]")


def features(value: object, where: str) -> str:
    return _text(value, where, _FEATURES, "a Slurm feature expression such as gpu&ib or [rack1|rack2]")


def time_limit(value: object, where: str) -> str:
    return _text(value, where, _TIME, "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (Slurm's forms), "
                                      "e.g. 30 or 2:00:00")


def count(value: object, where: str, low: int, high: int, example: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise UsageError(f"{where} {value!r}: expected a whole number from {low} to {high:,}, e.g. {example}.")
    return value


def segment(value: object, where: str) -> int:
    return count(value, where, 1, MAX_SEGMENT, "4")


def gpus_per_node(value: object, where: str) -> int:
    from llmb.recipes.gpus import MAX_GPUS_PER_NODE

    return count(value, where, 1, MAX_GPUS_PER_NODE, "8")


def gres(value: object, where: str) -> str:
    from llmb.recipes.gpus import MAX_GPUS_PER_NODE

    text = str(value).strip() if isinstance(value, str) else value
    match = _GRES.fullmatch(text) if isinstance(text, str) else None
    if match is None or (match[1] is not None and not 1 <= int(match[1]) <= MAX_GPUS_PER_NODE):
        raise UsageError(f"{where} {value!r}: expected gpu:N (N GPUs per node, 1 to {MAX_GPUS_PER_NODE}) where the "
                         f"cluster schedules GPUs as gres, or none where it does not.")
    return text


def boolean(value: object, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in TRUE + FALSE:
        return value.strip().lower() in TRUE
    raise UsageError(f"{where} {value!r}: expected true or false ({'/'.join(TRUE)} or {'/'.join(FALSE)}).")


def gpu(value: object, where: str) -> str:
    from llmb.recipes.gpus import catalogue

    known = list(catalogue())
    if not isinstance(value, str) or value.strip().lower() not in known:
        raise UsageError(f"{where} {value!r}: unknown GPU type; llmb knows: {', '.join(known)}.")
    return value.strip().lower()


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
    Setting("account", "--account", "SBATCH_ACCOUNT", "account", names, "none: the cluster's default account"),
    Setting("partition", "--partition", "SBATCH_PARTITION", "partition", names,
            "none: the cluster's default partition"),
    Setting("time_limit", "--time-limit", "SBATCH_TIMELIMIT", "slurm.time", time_limit,
            "none: the partition's limit"),
    Setting("nodelist", "--nodelist", "LLMB_NODELIST", "slurm.nodelist", hostlist, "none: any nodes"),
    Setting("exclude", "--exclude", "LLMB_EXCLUDE", "slurm.exclude", hostlist, "none"),
    Setting("reservation", "--reservation", "SBATCH_RESERVATION", "slurm.reservation", names, "none"),
    Setting("qos", "--qos", "SBATCH_QOS", "slurm.qos", names, "none: the association's default"),
    Setting("constraint", "--constraint", "SBATCH_CONSTRAINT", "slurm.constraint", features, "none"),
    Setting("segment", "--segment", "LLMB_SEGMENT", "slurm.segment", segment,
            "none: llmb's rule on 4-GPU-node systems"),
    Setting("gres", "--gres", "SBATCH_GRES", "gres", gres, "detected from the cluster"),
    Setting("numa_binding", "--numa-binding", "LLMB_NUMA_BINDING", "numa_binding", boolean,
            "true: each rank on its GPU's NUMA node", True),
    Setting("gpu", "--gpu", "GPU_TYPE", "gpu", gpu, "none: --gpu or the published recipe's default"),
    Setting("gpus_per_node", "--gpus-per-node", "GPUS_PER_NODE", "gpus_per_node", gpus_per_node,
            "the GPU type's: 4 on GB200/GB300, 8 otherwise"),
)
BY_NAME = {s.name: s for s in SETTINGS}
VARIABLES = {s.name: s.variable for s in SETTINGS}
