"""The core's log parsers as a plugin (``llmb_log_parsers``), registered by name by
``llmb.plugins.host``; the parsers are imported only when a command reads logs."""

from __future__ import annotations

from llmb import hookimpl


@hookimpl
def llmb_log_parsers() -> list:
    from llmb.results.formats import BUILTIN_PARSERS

    return list(BUILTIN_PARSERS)
