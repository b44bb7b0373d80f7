"""llmb: run NVIDIA's LLM pre-training benchmarks and report what they achieve.

Plugins import what they need from here, and only from here::

    from llmb import ModelFlops, Workload, hookimpl

(the whole list: ``llmb.public_api.FACADE``, shown in docs/plugin-api.md). Each name's module is
imported the first time the name is asked for: ``import llmb`` imports none of them.
"""

from __future__ import annotations

import os as _os
import sys as _sys

# The worker library (llmb.install.worker_library) keeps its copies of llmb's dependencies in
# <install>/python/.fallback: appended last, after the interpreter's site-packages, so that the
# environment's own click, PyYAML, ... win and llmb's copies serve only what it lacks. A pip
# install of llmb has no such directory.
_fallback = _os.path.join(
    _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))), ".fallback"
)
if _os.path.isdir(_fallback) and _fallback not in _sys.path:
    _sys.path.append(_fallback)

from llmb.public_api import FACADE as _FACADE  # noqa: E402 - after the fallback is on the path
from llmb.public_api import install_moved_modules  # noqa: E402

install_moved_modules()  # plugins written against the old module paths keep importing

__all__ = [*_FACADE, "__version__"]


def __getattr__(name: str):
    # made on first use: ``python -m llmb.worker`` names a missing pluggy before then
    if name == "hookimpl":
        import pluggy

        globals()["hookimpl"] = marker = pluggy.HookimplMarker("llmb")
        return marker
    if name == "__version__":
        from importlib.metadata import version

        return version("llmb")
    if name in _FACADE:
        from llmb.public_api import resolve

        globals()[name] = value = resolve(name)  # once: later lookups do not come here
        return value
    raise AttributeError(f"module 'llmb' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
