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
    return build_catalogue(load_yaml_file(packaged_data("gpus.yaml")))


def build_catalogue(raw: dict) -> dict[str, GpuType]:
    """The GPU types of a ``gpus.yaml`` table. A type with ``runs_recipes_of: OTHER`` takes OTHER's peaks
    where it lists none of its own; OTHER must be a type of the table that runs its own recipes."""
    for name, spec in raw.items():
        other = spec.get("runs_recipes_of")
        if other is None:
            continue
        if other not in raw or raw[other].get("runs_recipes_of") is not None or other == name:
            raise ValueError(
                f"gpus.yaml: {name} runs_recipes_of {other!r}, which is not a GPU type with recipes of "
                f"its own ({', '.join(n for n, s in raw.items() if not s.get('runs_recipes_of'))})"
            )
        if not spec.get("why"):
            raise ValueError(f"gpus.yaml: {name} runs_recipes_of {other} without a `why`")

    def peaks(spec: dict) -> dict[str, float]:
        own = spec.get("peak_tflops")
        if own is None and spec.get("runs_recipes_of"):
            own = raw[spec["runs_recipes_of"]].get("peak_tflops")
        return {k: float(v) for k, v in (own or {}).items()}

    return {
        name: GpuType(
            name=name,
            gpus_per_node=int(spec["gpus_per_node"]),
            memory_gb=None if spec.get("memory_gb") is None else float(spec["memory_gb"]),
            peak_tflops=peaks(spec),
            source="NVIDIA LLM Benchmarking Collection README (Peak Theoretical Throughput)",
            sm=None if spec.get("sm") is None else int(spec["sm"]),
            runs_recipes_of=spec.get("runs_recipes_of"),
            why=str(spec.get("why") or ""),
        )
        for name, spec in raw.items()
    }


def gpu_order_key(name: str) -> tuple[int, str]:
    """A GPU type's place in the catalogue's order (gpus.yaml: h100, h200, b200, ...); a name it lacks
    after them, alphabetically."""
    order = list(catalogue())
    return (order.index(name) if name in order else len(order), name)


def in_gpu_order(names) -> list[str]:
    """``names`` in ``gpu_order_key``'s order, each once: every list of GPU types llmb prints is in this
    one order."""
    return sorted(dict.fromkeys(names), key=gpu_order_key)


def in_dtype_order(names) -> list[str]:
    """``names`` in ``DTYPES``' order (bf16, fp8, nvfp4), each once; another after them, alphabetically."""
    return sorted(
        dict.fromkeys(names),
        key=lambda name: (DTYPES.index(name) if name in DTYPES else len(DTYPES), name),
    )


def recipes_of(gpu: str | None) -> str | None:
    """The GPU type whose recipes, published figures and MFU peaks ``gpu`` uses: the one its
    ``runs_recipes_of`` names (an H200 runs the H100's), else ``gpu`` itself (also for a name the
    catalogue lacks, and None for None). Every lookup of a recipe row, a published figure or a
    plausibility bound by GPU type goes through here; a run's records keep its own GPU type."""
    if gpu is None:
        return None
    key = gpu.strip().lower()
    spec = catalogue().get(key)
    return spec.runs_recipes_of if spec is not None and spec.runs_recipes_of else key


def runs_note(gpu: str | None) -> str | None:
    """``h200 runs the h100 recipe (same chip, more memory: NVIDIA's H200 product page)`` for a type that
    runs another's recipes; None for one that runs its own."""
    other = recipes_of(gpu)
    if gpu is None or other == gpu.strip().lower():
        return None
    own = catalogue()[gpu.strip().lower()]
    return f"{own.name} runs the {other} recipe ({own.why})"


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
    # For a type that runs another's recipes (gpus.yaml ``runs_recipes_of``) and takes its peak: the type
    # whose figure it is, and the public document that gives the run's own type the same figure.
    of_gpu: str | None = None
    same_for: str | None = None  # the run's own type
    confirmed_by: str | None = None

    def cited(self) -> str:
        """The document, and for another type's figure whose it is and who gives the run's type the same:
        ``NVIDIA LLM Benchmarking Collection README, the h100's; the same figure for the h200: ...``."""
        if not self.of_gpu:
            return self.document
        text = f"{self.document}, the {self.of_gpu}'s"
        if self.confirmed_by:
            text += f"; the same figure for the {self.same_for}: {self.confirmed_by}"
        return text

    def describe(self) -> str:
        text = f"{self.tflops:g} TFLOP/s dense per GPU"
        if self.of_gpu:
            text += f", the {self.of_gpu}'s"
        text += f" ({self.document}"
        if self.of_gpu and self.confirmed_by:
            text += f"; the same figure for the {self.same_for}: {self.confirmed_by}"
        text += ")"
        if self.others:
            text += "; other sources give " + ", ".join(
                f"{value:g} ({title})" for title, value in self.others
            )
        return text


@lru_cache(maxsize=1)
def _peak_sources() -> dict:
    return load_yaml_file(packaged_data("gpu_peak_sources.yaml"))


def peak_source(gpu: str, dtype: str) -> PeakSource | None:
    """The public source of ``gpu``'s ``dtype`` peak (``data/gpu_peak_sources.yaml``); None without a peak.
    A type that runs another's recipes and takes its peak (an H200: the H100's) names the other type's
    source, and the document that gives its own type the same figure (NVIDIA's H200 page)."""
    table = catalogue()
    peak = table[gpu].peak_tflops.get(dtype) if gpu in table else None
    if peak is None:
        return None
    owner = recipes_of(gpu)
    inherited = owner != gpu and table[owner].peak_tflops.get(dtype) == peak
    raw = _peak_sources()
    titles = {
        key: re.split(r" \(|, ", doc["title"], maxsplit=1)[0]
        for key, doc in raw["documents"].items()
    }

    def entries(of: str) -> list[dict]:
        found = raw["gpus"].get(of, {}).get(dtype, {}).get("sources") or ()
        return [e for e in found if "value" in e]

    mine = entries(gpu)
    listed = entries(owner) + mine if inherited else mine
    own = next(
        (titles[e["source"]] for e in listed if float(e["value"]) == peak),
        "no public source recorded",
    )
    others: dict[float, str] = {}
    for entry in listed:
        if abs(float(entry["value"]) - peak) >= 1:  # not the same figure rounded (989 for 989.5)
            others.setdefault(float(entry["value"]), titles[entry["source"]])
    confirmed = next((titles[e["source"]] for e in mine if abs(float(e["value"]) - peak) < 1), None)
    return PeakSource(
        peak,
        own,
        tuple((title, value) for value, title in others.items()),
        of_gpu=owner if inherited else None,
        same_for=gpu if inherited else None,
        confirmed_by=confirmed if inherited else None,
    )
