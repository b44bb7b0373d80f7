"""Logging: structlog on stderr, human-readable on a terminal, JSON lines
otherwise (``LLMB_LOG_FORMAT=json|console`` forces one). Data never goes
here; it goes to stdout."""

from __future__ import annotations

import logging
import os
import sys

import structlog

_configured = False


def configure(level: str | None = None) -> None:
    global _configured
    if _configured:
        return
    _configured = True
    fmt = os.environ.get("LLMB_LOG_FORMAT") or ("console" if sys.stderr.isatty() else "json")
    renderer = (
        structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        if fmt == "console"
        else structlog.processors.JSONRenderer()
    )
    name = (level or os.environ.get("LLMB_LOG_LEVEL") or "info").upper()
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, name, logging.INFO)),
        # sys.stderr is looked up when a logger is made, not when llmb is
        # configured, so redirected streams (tests, embedding) are honoured.
        logger_factory=lambda *args: structlog.PrintLogger(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str = "llmb") -> structlog.typing.FilteringBoundLogger:
    configure()
    return structlog.get_logger(name)
