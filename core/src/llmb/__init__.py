"""llmb: run NVIDIA's LLM pre-training benchmarks and report what they achieve.

Plugins import what they need from here::

    from llmb import hookimpl
    from llmb.records import Workload, ModelFlops
"""

from __future__ import annotations

import pluggy

hookimpl = pluggy.HookimplMarker("llmb")

__all__ = ["hookimpl", "__version__"]


def __getattr__(name: str) -> str:
    if name == "__version__":
        from importlib.metadata import version

        return version("llmb")
    raise AttributeError(name)
