"""The nodes' GPUs as sinfo describes them: whether the cluster schedules GPUs
as generic resources (GRES), and which GPU types llmb knows it names.

sinfo's ``%G`` lists a node group's GRES, ``gpu:8``, ``gpu:h100:8`` or
``gpu:h100:8(S:0-1),nvme:1`` (``(null)`` for none); ``%f`` its features,
comma-separated (``gpu,h100,ib``). A GPU type counts when a GRES type or a
feature holds its name as a whole word (``nvidia_h100_80gb`` is h100; ``gh200``
is not h200).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llmb import UsageError, catalogue

_PARENTHESES = re.compile(r"\([^)]*\)")
_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class NodeGpus:
    uses_gres: bool  # some node has GPUs as generic resources
    types: dict[str, str]  # GPU type -> where sinfo named it, e.g. "sinfo GRES gpu:h100:8"


def _known(name: str) -> list[str]:
    known = catalogue()
    return [word for word in _WORD.findall(name.lower()) if word in known]


def read(rows: list[tuple[str, str]]) -> NodeGpus:
    """What ``SlurmCommands.node_gpus`` rows say."""
    uses_gres, types = False, {}
    for gres, features in rows:
        for item in _PARENTHESES.sub("", gres).split(","):
            parts = item.strip().split(":")
            if parts[0] != "gpu":
                continue
            uses_gres = True
            if len(parts) >= 3 or (len(parts) == 2 and not parts[1].isdigit()):
                for name in _known(parts[1]):
                    types.setdefault(name, f"sinfo GRES {item.strip()}")
        for feature in features.split(","):
            for name in _known(feature):
                types.setdefault(name, f"sinfo node feature {feature.strip()}")
    return NodeGpus(uses_gres, types)


def check_type(gpu: str, found: NodeGpus, where: str) -> None:
    """UsageError when the nodes' GPUs are known and ``gpu`` is not among them."""
    if not found.types or gpu in found.types:
        return
    seen = "; ".join(f"{name} ({source})" for name, source in sorted(found.types.items()))
    raise UsageError(
        f"--gpu {gpu}, but the nodes of {where} have {seen}: the run's recipe, its node count and "
        f"binding follow --gpu, so use --gpu {' or --gpu '.join(sorted(found.types))}, or a partition "
        f"(--partition) whose nodes are {gpu}."
    )
