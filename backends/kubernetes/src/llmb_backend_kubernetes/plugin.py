"""Registers the ``kubernetes`` backend (its modules, and the Kubernetes client, load only when it is used)."""

from __future__ import annotations

import pluggy
from llmb import Backend

hookimpl = pluggy.HookimplMarker("llmb")


def _load():
    from llmb_backend_kubernetes.backend import KubernetesBackend

    return KubernetesBackend()


@hookimpl
def llmb_backends() -> list[Backend]:
    return [
        Backend(
            name="kubernetes",
            description="Kubernetes: one JobSet per run (Kueue optional), through the official client",
            load=_load,
        )
    ]
