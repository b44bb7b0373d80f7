"""The GPUs a job runs on, as the job sees them, and whether they are the run's.

``seen`` asks ``nvidia-smi --query-gpu=name,driver_version --format=csv,noheader``
(one line per GPU: ``NVIDIA H100 80GB HBM3, 550.54.15``); where nvidia-smi is
missing or fails, the names the NVIDIA driver lists (``llmb.runs.capability``,
without a driver version); "no GPU" when neither finds one. torch is not
asked: a production-engine worker must not import it before its framework
check, and it would name the same devices. ``gpu_type_of`` names the catalogue's GPU type of a
device name (``data/gpu_names.yaml``). ``check`` compares them with the run's
``--gpu``: a known type that differs stops the job, since its TFLOP/s per GPU
and MFU would be computed against another GPU's peak; a name llmb does not know
only warns.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache

from llmb.errors import LlmbError
from llmb.paths import packaged_data
from llmb.recipes.gpus import catalogue, recipes_of
from llmb.yamlio import load_yaml_file

NO_GPU = "no GPU"
QUERY = ("--query-gpu=name,driver_version", "--format=csv,noheader")
TIMEOUT_S = 30.0


class GpuMismatchError(LlmbError):
    """The job's GPUs are another type than the run was planned for."""


@dataclass(frozen=True)
class GpusSeen:
    names: tuple[str, ...]  # one per GPU
    drivers: tuple[str, ...]  # the distinct driver versions
    source: str  # nvidia-smi | driver | none

    @property
    def name(self) -> str:
        distinct = list(dict.fromkeys(self.names))
        return " + ".join(distinct) if distinct else NO_GPU

    def as_dict(self) -> dict:
        types = list(dict.fromkeys(gpu_type_of(n) for n in self.names))
        return {
            "name": self.name,
            "count": len(self.names),
            "driver": ", ".join(self.drivers) or None,
            "type": " + ".join(t or "unknown" for t in types) or None,
            "source": self.source,
        }


@lru_cache(maxsize=1)
def _patterns() -> tuple[tuple[re.Pattern, str], ...]:
    table = load_yaml_file(packaged_data("gpu_names.yaml"))
    return tuple(
        (re.compile(pattern, re.IGNORECASE), gpu)
        for gpu, patterns in table.items()
        for pattern in patterns
    )


def gpu_type_of(name: str) -> str | None:
    """The GPU type (``h100``, ``gb200``, ...) of a device name; None when llmb does not know it."""
    plain = " ".join(name.split())
    return next((gpu for pattern, gpu in _patterns() if pattern.fullmatch(plain)), None)


def parse_query(text: str) -> GpusSeen:
    """nvidia-smi's answer to ``QUERY``: ``NAME, DRIVER`` per GPU (other lines, such as
    "No devices were found", name none)."""
    names, drivers = [], []
    for line in text.splitlines():
        name, comma, driver = line.rpartition(",")
        if comma and name.strip():
            names.append(name.strip())
            if driver.strip() and driver.strip() != "[N/A]":
                drivers.append(driver.strip())
    return GpusSeen(tuple(names), tuple(dict.fromkeys(drivers)), "nvidia-smi")


def from_nvidia_smi(environ=os.environ) -> GpusSeen | None:
    """What nvidia-smi reports; None when it is not there or fails."""
    smi = shutil.which("nvidia-smi", path=environ.get("PATH"))
    if smi is None:
        return None
    try:
        done = subprocess.run(
            [smi, *QUERY],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            env=dict(environ),
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return parse_query(done.stdout)


def seen(environ=os.environ) -> GpusSeen:
    """The GPUs of this node: nvidia-smi's answer, else the driver's list."""
    found = from_nvidia_smi(environ)
    if found is not None:
        return found
    from llmb.runs.capability import detect

    names = detect().gpu_names
    return GpusSeen(names, (), "driver" if names else "none")


def check(requested: str, gpus: GpusSeen) -> list[str]:
    """Warnings about the job's GPUs; GpuMismatchError when a known type is not ``requested``."""
    types = {name: gpu_type_of(name) for name in dict.fromkeys(gpus.names)}
    wrong = {name: gpu for name, gpu in types.items() if gpu is not None and gpu != requested}
    if wrong:
        seen_text = ", ".join(f"{name} ({gpu})" for name, gpu in wrong.items())
        other = next(iter(wrong.values()))
        # two types that run the same recipes (an H200 runs the H100's) share its peaks: what goes wrong is
        # the record and the memory the run is planned for
        why = (
            f"it would be recorded as a {requested} run and planned for the {requested}'s memory"
            if recipes_of(other) == recipes_of(requested)
            else f"its TFLOP/s per GPU and MFU would be computed against the {requested} peak and be wrong"
        )
        raise GpuMismatchError(
            f"this job runs on {seen_text} but the run was planned for {requested} (--gpu {requested}); "
            f"{why}, so it stops before training. Run it with --gpu {other}, or on {requested} nodes "
            f"(--partition, --constraint or --nodelist)."
        )
    known = ", ".join(catalogue())
    return [
        f"the job's GPU {name!r} is not one llmb knows ({known}), so it cannot check that it is a {requested}: "
        f"TFLOP/s per GPU and MFU are computed against the {requested} peak."
        for name, gpu in types.items()
        if gpu is None
    ]
