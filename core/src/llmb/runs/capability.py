"""What this machine can run, without importing torch (the CLI stays light).

GPUs are counted from the NVIDIA driver's ``/proc/driver/nvidia/gpus``
(restricted by ``CUDA_VISIBLE_DEVICES``), else from ``nvidia-smi -L``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class Machine:
    gpus: int
    gpu_names: tuple[str, ...]
    cpus: int

    @property
    def device(self) -> str:
        return "cuda" if self.gpus else "cpu"


def _visible(count: int) -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return count
    ids = [v for v in visible.split(",") if v.strip() and v.strip() != "-1"]
    return min(count, len(ids))


def _gpu_names() -> tuple[str, ...]:
    proc = "/proc/driver/nvidia/gpus"
    names = []
    if os.path.isdir(proc):
        for entry in sorted(os.listdir(proc)):
            try:
                with open(os.path.join(proc, entry, "information"), encoding="utf-8") as handle:
                    for line in handle:
                        if line.startswith("Model:"):
                            names.append(line.split(":", 1)[1].strip())
                            break
            except OSError:
                names.append("NVIDIA GPU")
        if names:
            return tuple(names)
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            return ()
        return tuple(
            line.split(":", 1)[1].split("(")[0].strip()
            for line in out.splitlines()
            if line.startswith("GPU")
        )
    return ()


def detect() -> Machine:
    if os.environ.get("LLMB_FORCE_CPU"):
        names: tuple[str, ...] = ()
    else:
        names = _gpu_names()
    count = _visible(len(names))
    return Machine(gpus=count, gpu_names=names[:count], cpus=os.cpu_count() or 1)
