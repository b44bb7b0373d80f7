"""Registers the ``slurm`` backend (its modules load only when it is used)."""

from __future__ import annotations

import pluggy
from llmb import Backend

hookimpl = pluggy.HookimplMarker("llmb")


def _load():
    from llmb_backend_slurm.backend import SlurmBackend

    return SlurmBackend()


@hookimpl
def llmb_backends() -> list[Backend]:
    return [
        Backend(
            name="slurm",
            description="Slurm: sbatch (pyxis containers or bare), squeue/sacct tracking",
            load=_load,
        )
    ]
