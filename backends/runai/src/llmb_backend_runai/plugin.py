"""Registers the ``runai`` backend (its modules load only when it is used)."""

from __future__ import annotations

import pluggy
from llmb import Backend

hookimpl = pluggy.HookimplMarker("llmb")


def _load():
    from llmb_backend_runai.backend import RunaiBackend

    return RunaiBackend()


@hookimpl
def llmb_backends() -> list[Backend]:
    return [
        Backend(
            name="runai",
            description="Run:ai: distributed or training workloads through its REST API",
            load=_load,
            secrets=("APP_SECRET",),
        )
    ]
