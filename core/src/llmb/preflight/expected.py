"""What a healthy node reaches, and when a node is flagged.

Expected figures per GPU type come from public data: the dense BF16 peak of
``data/gpus.yaml`` (sources in ``data/gpu_peak_sources.yaml``) and the HBM,
NVLink and NIC bandwidth of ``data/gpu_bandwidth.yaml`` (NVIDIA's datasheets).
A node is flagged when a figure is below ``FRACTION[kind]`` of the expected
figure, or below its peers' median by more than ``PEER_MARGIN`` (the only test
a CPU run, which has no expected figure, can make). docs/preflight.md gives
the reasons for each number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from llmb.paths import packaged_data
from llmb.yamlio import load_yaml_file

# The kinds of figure measured per node, and their units.
KINDS = ("gemm", "memory", "intra", "inter")
UNITS = {"gemm": "TFLOP/s", "memory": "GB/s", "intra": "GB/s", "inter": "GB/s"}
# Fraction of the expected (datasheet) figure a healthy node reaches at least. A dense BF16 GEMM of
# 8192^3 reaches about 70-80% of the dense peak on a healthy H100/B200; a copy kernel 80-90% of HBM
# bandwidth; NCCL's all-reduce bus bandwidth 80-90% of NVLink's one-way bandwidth inside a node and of
# the NIC's line rate across nodes. The fractions leave room below those for clocks, sizes and library
# versions, and still catch what the issue names: low clocks, a flapping NIC, a socket fallback (an
# order of magnitude slower).
FRACTION = {"gemm": 0.6, "memory": 0.6, "intra": 0.5, "inter": 0.5}
# Below the median of the other nodes by more than this: flagged, whatever the datasheet says.
PEER_MARGIN = 0.25


@dataclass(frozen=True)
class Expected:
    """Expected per-GPU figures (None: no public figure, peer comparison only) and their sources."""

    gpu: str
    gemm: float | None = None  # dense BF16 TFLOP/s
    memory: float | None = None  # HBM GB/s
    # all-reduce bus bandwidth inside a node, GB/s: NVLink's one-way bandwidth
    intra: float | None = None
    inter: float | None = None  # all-reduce bus bandwidth across nodes, GB/s: the NIC's line rate
    sources: dict[str, str] = field(default_factory=dict)

    def figure(self, kind: str) -> float | None:
        return getattr(self, kind)

    def as_dict(self) -> dict:
        return {
            "gpu": self.gpu,
            **{k: self.figure(k) for k in KINDS},
            "sources": dict(self.sources),
            "fraction": dict(FRACTION),
            "peer_margin": PEER_MARGIN,
        }


@lru_cache(maxsize=1)
def _bandwidth() -> dict:
    return load_yaml_file(packaged_data("gpu_bandwidth.yaml"))


def expected(gpu: str, device: str = "cuda") -> Expected:
    """The expected figures of ``gpu``; on CPU ranks none (a CPU node is only compared with its peers)."""
    from llmb.recipes.gpus import catalogue, peak_source

    if device != "cuda":
        return Expected(gpu)
    raw = _bandwidth()
    docs = {key: doc["title"] for key, doc in raw["documents"].items()}
    row = raw["gpus"].get(gpu) or {}
    sources: dict[str, str] = {}
    peak = catalogue()[gpu].peak_tflops.get("bf16") if gpu in catalogue() else None
    if peak is not None:
        found = peak_source(gpu, "bf16")
        sources["gemm"] = found.cited() if found else "data/gpus.yaml"

    def take(key: str, kind: str, scale: float) -> float | None:
        entry = row.get(key)
        if not entry:
            return None
        sources[kind] = docs[entry["source"]] + (
            f" ({entry['derived']})" if entry.get("derived") else ""
        )
        return float(entry["value"]) * scale

    return Expected(
        gpu=gpu,
        gemm=peak,
        memory=take("hbm_tb_s", "memory", 1000.0),  # TB/s -> GB/s
        intra=take("nvlink_gb_s", "intra", 0.5),  # both directions -> one way
        inter=take("nic_gbit_s", "inter", 1 / 8),  # Gb/s -> GB/s
        sources=sources,
    )
