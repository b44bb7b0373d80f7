"""Waiting in tests for something another process does."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float = 120, interval: float = 0.2, what: str = "the condition"):
    """``predicate()``'s first true value; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
