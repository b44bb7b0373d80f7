"""The core's flaky-failure signatures as a plugin (``llmb_flaky_signatures``), registered by name
by ``llmb.plugins.host``."""

from __future__ import annotations

from llmb import hookimpl


@hookimpl
def llmb_flaky_signatures() -> list[str]:
    from llmb.lifecycle.flaky import builtin_signatures

    return list(builtin_signatures())
