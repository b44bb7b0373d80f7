"""The GPU catalogue (``data/gpus.yaml``): per-node count, memory, peaks."""

from __future__ import annotations

from functools import lru_cache

from llmb.errors import UsageError
from llmb.paths import packaged_data
from llmb.recipes.records import GpuType
from llmb.yamlio import load_yaml_file

DTYPES = ("bf16", "fp8", "nvfp4")
# The most GPUs a run may ask for: 2^17, several times the largest training clusters built so far. Beyond
# it a count is a typo (an extra digit, a pasted number), and would only overflow node and rank arithmetic.
MAX_GPUS = 131072
MAX_GPUS_PER_NODE = 72  # an NVL72 rack seen as one node is the most any scheduler calls a node


@lru_cache(maxsize=1)
def catalogue() -> dict[str, GpuType]:
    raw = load_yaml_file(packaged_data("gpus.yaml"))
    return {
        name: GpuType(
            name=name,
            gpus_per_node=int(spec["gpus_per_node"]),
            memory_gb=None if spec.get("memory_gb") is None else float(spec["memory_gb"]),
            peak_tflops={k: float(v) for k, v in (spec.get("peak_tflops") or {}).items()},
            source="field-facts §1, §5",
            sm=None if spec.get("sm") is None else int(spec["sm"]),
        )
        for name, spec in raw.items()
    }


def gpu_type(name: str) -> GpuType:
    """The GPU type called ``name`` (case-insensitive)."""
    table = catalogue()
    key = name.strip().lower()
    if key not in table:
        raise UsageError(f"unknown GPU type {name!r}; llmb knows: {', '.join(table)}.")
    return table[key]
