"""The GPU catalogue (``data/gpus.yaml``): per-node count, memory, peaks."""

from __future__ import annotations

import re
from dataclasses import dataclass
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
            source="NVIDIA LLM Benchmarking Collection README (Peak Theoretical Throughput)",
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


@dataclass(frozen=True)
class PeakSource:
    """Where a GPU type's dense peak (MFU's denominator) comes from, and what other public sources give."""

    tflops: float
    document: str  # the public document llmb's figure is from
    others: tuple[tuple[str, float], ...]  # (document, value) of sources that give another figure

    def describe(self) -> str:
        text = f"{self.tflops:g} TFLOP/s dense per GPU ({self.document})"
        if self.others:
            text += "; other sources give " + ", ".join(
                f"{value:g} ({title})" for title, value in self.others
            )
        return text


@lru_cache(maxsize=1)
def _peak_sources() -> dict:
    return load_yaml_file(packaged_data("gpu_peak_sources.yaml"))


def peak_source(gpu: str, dtype: str) -> PeakSource | None:
    """The public source of ``gpu``'s ``dtype`` peak (``data/gpu_peak_sources.yaml``); None without a peak."""
    peak = catalogue()[gpu].peak_tflops.get(dtype) if gpu in catalogue() else None
    if peak is None:
        return None
    raw = _peak_sources()
    titles = {
        key: re.split(r" \(|, ", doc["title"], maxsplit=1)[0]
        for key, doc in raw["documents"].items()
    }
    entries = [
        e for e in (raw["gpus"].get(gpu, {}).get(dtype, {}).get("sources") or ()) if "value" in e
    ]
    own = next(
        (titles[e["source"]] for e in entries if float(e["value"]) == peak),
        "no public source recorded",
    )
    others: dict[float, str] = {}
    for entry in entries:
        if abs(float(entry["value"]) - peak) >= 1:  # not the same figure rounded (989 for 989.5)
            others.setdefault(float(entry["value"]), titles[entry["source"]])
    return PeakSource(peak, own, tuple((title, value) for value, title in others.items()))
