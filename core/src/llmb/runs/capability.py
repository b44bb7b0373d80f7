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


@dataclass(frozen=True)
class HostMemory:
    """The memory this machine's processes may use, in GiB (2^30 bytes, as llmb's estimates), and what
    says so: the machine's RAM, a container's (cgroup's) limit, or this process's address-space limit,
    whichever is least."""

    gb: float
    source: str

    def describe(self) -> str:
        return f"this machine's {self.gb:.1f} GiB ({self.source})"


_GIB = float(1 << 30)


def host_memory() -> HostMemory | None:
    """The least of: ``/proc/meminfo``'s MemTotal, the cgroup's memory limit (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``), and ``RLIMIT_AS``; None where none can be read (not Linux)."""
    found: list[tuple[float, str]] = []
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    found.append((int(line.split()[1]) * 1024 / _GIB, "its RAM, /proc/meminfo"))
                    break
    except (OSError, ValueError, IndexError):
        pass
    for limit in _cgroup_limits():
        found.append((limit / _GIB, "its container's memory limit, the cgroup's"))
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft not in (resource.RLIM_INFINITY, -1) and soft > 0:
            found.append((soft / _GIB, "the address-space limit, ulimit -v"))
    except (ImportError, OSError, ValueError):
        pass
    if not found:
        return None
    gb, source = min(found)
    return HostMemory(gb, source)


def _cgroup_limits() -> list[int]:
    """This process's cgroup memory limits in bytes (none where unlimited or unreadable)."""
    limits = []
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as handle:
            entries = [line.rstrip("\n").split(":", 2) for line in handle]
    except OSError:
        return limits
    for entry in entries:
        if len(entry) != 3:
            continue
        _, controllers, path = entry
        if controllers == "":  # v2
            candidates = [
                f"/sys/fs/cgroup{path}/memory.max",
                f"/sys/fs/cgroup/unified{path}/memory.max",
            ]
        elif "memory" in controllers.split(","):
            candidates = [f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"]
        else:
            continue
        for candidate in candidates:
            try:
                with open(candidate, encoding="ascii") as handle:
                    text = handle.read().strip()
            except OSError:
                continue
            # "max", or v1's page-rounded 2^63 for no limit
            if text.isdigit() and int(text) < (1 << 62):
                limits.append(int(text))
            break
    return limits


def detect() -> Machine:
    if os.environ.get("LLMB_FORCE_CPU"):
        names: tuple[str, ...] = ()
    else:
        names = _gpu_names()
    count = _visible(len(names))
    return Machine(gpus=count, gpu_names=names[:count], cpus=os.cpu_count() or 1)
