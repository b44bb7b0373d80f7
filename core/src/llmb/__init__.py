"""llmb: run NVIDIA's LLM pre-training benchmarks and report what they achieve.

Plugins import what they need from here::

    from llmb import hookimpl
    from llmb.recipes.records import Workload, ModelFlops

(the whole list: ``llmb.public_api.PUBLIC``, shown in docs/plugin-api.md).
"""

from __future__ import annotations

import pluggy

from llmb.public_api import install_moved_modules

hookimpl = pluggy.HookimplMarker("llmb")
install_moved_modules()  # plugins written against the old module paths keep importing

__all__ = ["hookimpl", "__version__"]


def __getattr__(name: str) -> str:
    if name == "__version__":
        from importlib.metadata import version

        return version("llmb")
    raise AttributeError(name)
