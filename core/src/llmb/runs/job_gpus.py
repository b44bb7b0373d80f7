"""Which GPUs a local job computes on, as their indices: ``CUDA_VISIBLE_DEVICES`` as CUDA reads it,
a GPU named by its UUID resolved to its index through ``nvidia-smi -L``. A local job locks each of its
GPUs under that one name (``llmb.backends.local_gpus``), and ``llmb run`` refuses, before submitting, a
GPU named by a UUID that cannot be resolved (two jobs would otherwise share it under two names)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping

from llmb.errors import UsageError

VISIBLE_VARIABLE = "CUDA_VISIBLE_DEVICES"
_SMI_TIMEOUT_S = 20


def visible_devices(environ: Mapping[str, str]) -> list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` as CUDA reads it (the entries up to the first that names no
    device: ``-1`` hides every GPU); None when it is not set."""
    raw = environ.get(VISIBLE_VARIABLE)
    if raw is None:
        return None
    found = []
    for entry in raw.split(","):
        entry = entry.strip()
        if entry.isascii() and entry.isdigit():
            found.append(str(int(entry)))
        elif entry.startswith(("GPU-", "MIG-")) and len(entry) > 4:
            found.append(entry)
        else:
            break
    return found


class GpuNameError(UsageError):
    """A GPU named by its UUID whose index cannot be found: its lock would not be the GPU's."""


def _uuid_indices() -> tuple[dict[str, str] | None, str]:
    """``nvidia-smi -L``'s GPUs: (UUID -> index, ""), or (None, why it could not say)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None, "nvidia-smi is not on PATH"
    try:
        done = subprocess.run(
            [smi, "-L"],
            capture_output=True,
            text=True,
            timeout=_SMI_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return None, f"nvidia-smi -L did not answer in {_SMI_TIMEOUT_S} s"
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"nvidia-smi -L could not run: {exc}"
    found = {}
    for line in done.stdout.splitlines():
        listed = re.match(r"GPU (\d+):.*\(UUID: (GPU-[^)\s]+)\)", line.strip())
        if listed:
            found[listed.group(2)] = listed.group(1)
    if done.returncode != 0 or not found:
        said = next(
            (line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()), ""
        )[:200]
        how = f"exited with status {done.returncode}" if done.returncode else "listed no GPU"
        return None, f"nvidia-smi -L {how}" + (f": {said}" if said else "")
    return found, ""


def _as_index(entry: str, indices: dict[str, str]) -> str:
    """A ``GPU-`` UUID (or the unique prefix of one, as CUDA takes it) as its index, where known."""
    if entry.isdigit() or not entry.startswith("GPU-"):
        return entry
    matches = [index for uuid, index in indices.items() if uuid.startswith(entry)]
    return matches[0] if len(matches) == 1 else entry


def job_gpus(device: str, ranks: int, environ: Mapping[str, str]) -> list[str]:
    """The GPUs a local job's ranks compute on (their indices, or the names ``CUDA_VISIBLE_DEVICES``
    gives that are no GPU ``nvidia-smi -L`` lists); empty for a job on CPU. ``GpuNameError`` when
    a GPU is named by its UUID and ``nvidia-smi -L`` cannot say which index it is."""
    if device != "cuda" or ranks < 1:
        return []
    visible = visible_devices(environ)
    if visible is None:
        return [str(rank) for rank in range(ranks)]
    used = visible[:ranks]
    uuids = [entry for entry in used if entry.startswith("GPU-")]
    if uuids:
        indices, why = _uuid_indices()
        if indices is None:
            named = ", ".join(uuids)
            raise GpuNameError(
                f"{VISIBLE_VARIABLE} names {'GPU' if len(uuids) == 1 else 'GPUs'} {named} by UUID, "
                f"but {why}, so llmb cannot tell which GPU index {'it is' if len(uuids) == 1 else 'they are'}: "
                f"a local job locks each of its GPUs under its index, and a job naming a GPU by its UUID "
                f"would share it with one naming it by its index. Name the GPUs by index "
                f"({VISIBLE_VARIABLE}=0,1,...), or run where nvidia-smi -L lists them."
            )
        used = [_as_index(entry, indices) for entry in used]
    return list(dict.fromkeys(used))
