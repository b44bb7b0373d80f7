"""Logging and the warnings a user reads, on stderr. Data never goes here;
it goes to stdout.

Two formats. ``console``, the default: a warning is one plain line,
``llmb: warning: <text>``, and any other log line is ``llmb: <level>: <text>``.
``json``, only when asked (``llmb --log-format json`` or
``LLMB_LOG_FORMAT=json``): every line is a structlog JSON object
(``event``, ``level``, ``timestamp`` and the record's fields).

In either format a warning is said once per command: the same text (and
fields) again is dropped, however many tasks of a sweep meet it.
``warn`` is the CLI's way to say one; ``get_logger`` gives plugins and
backends a structlog logger that goes through the same rules. Plain
warnings never import structlog (it costs a command a twentieth of a second).
"""

from __future__ import annotations

import os
import sys
from typing import Any

FORMATS = ("console", "json")
_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}

_format: str | None = None  # --log-format; None: LLMB_LOG_FORMAT, else console
_level: str | None = None
_structlog_ready = False
_said: set[tuple] = set()  # the warnings said in this command


def configure(level: str | None = None, fmt: str | None = None) -> None:
    """Set the format and level (None: from LLMB_LOG_FORMAT, LLMB_LOG_LEVEL)
    and start a new command: every warning may be said once again. The
    ``llmb`` group calls it for each command; nothing is imported."""
    global _format, _level, _structlog_ready
    _format, _level, _structlog_ready = fmt, level, False
    _said.clear()


def log_format() -> str:
    """``json`` where asked (the option, else LLMB_LOG_FORMAT), else ``console``."""
    chosen = _format or os.environ.get("LLMB_LOG_FORMAT") or "console"
    return "json" if chosen.strip().lower() == "json" else "console"


def _threshold() -> int:
    name = (_level or os.environ.get("LLMB_LOG_LEVEL") or "info").strip().lower()
    return _LEVELS.get(name, _LEVELS["info"])


def _first_time(level: str, event: str, fields: dict[str, Any]) -> bool:
    """False for a warning (or worse) already said in this command."""
    if _LEVELS.get(level, 0) < _LEVELS["warning"]:
        return True
    key = (level, event, tuple(sorted((k, repr(v)) for k, v in fields.items())))
    if key in _said:
        return False
    _said.add(key)
    return True


def plain_line(level: str, event: str, fields: dict[str, Any]) -> str:
    """``llmb: warning: text (name: value; ...)`` on one line, safe to print on a terminal; on a terminal
    (stderr's, or ``COLUMNS``) that line is wrapped to its width, indented under the first."""
    from llmb.terminal import fit_text, output_width, terminal_safe

    text = str(event)
    if fields:
        text += " (" + "; ".join(f"{k}: {v}" for k, v in fields.items()) + ")"
    return fit_text(
        terminal_safe(f"llmb: {level}: {text}").replace("\n", " "), output_width(sys.stderr)
    )


def warn(message: str, **fields: Any) -> None:
    """Tell the user something went less well than asked; the command goes on.
    One plain line (or a JSON line where asked), once per command."""
    if _threshold() > _LEVELS["warning"]:
        return
    if log_format() == "json":
        get_logger("llmb").warning(message, **fields)
        return
    if _first_time("warning", message, fields):
        print(plain_line("warning", message, fields), file=sys.stderr, flush=True)


def _once(logger, method_name: str, event_dict: dict) -> dict:
    import structlog

    fields = {k: v for k, v in event_dict.items() if k not in ("event", "level", "timestamp")}
    if not _first_time(
        event_dict.get("level", method_name), str(event_dict.get("event", "")), fields
    ):
        raise structlog.DropEvent
    return event_dict


def _render_plain(logger, method_name: str, event_dict: dict) -> str:
    level = event_dict.pop("level", method_name)
    event = event_dict.pop("event", "")
    return plain_line(level, event, event_dict)


def _configure_structlog() -> None:
    global _structlog_ready
    if _structlog_ready:
        return
    _structlog_ready = True
    import structlog

    tail = (
        [structlog.processors.TimeStamper(fmt="iso", utc=True), structlog.processors.JSONRenderer()]
        if log_format() == "json"
        else [_render_plain]
    )
    structlog.configure(
        processors=[structlog.processors.add_log_level, _once, *tail],
        wrapper_class=structlog.make_filtering_bound_logger(_threshold()),
        # sys.stderr is looked up when a logger is made, not when llmb is
        # configured, so redirected streams (tests, embedding) are honoured.
        logger_factory=lambda *args: structlog.PrintLogger(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str = "llmb"):
    """A structlog logger (``structlog.typing.FilteringBoundLogger``) for
    plugins and backends: ``get_logger("llmb.mine").warning("text", key=value)``
    is said as ``warn`` says it."""
    _configure_structlog()
    import structlog

    return structlog.get_logger(name)
