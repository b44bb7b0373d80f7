"""A test plugin that injects faults into the torch engine's steps (``llmb_before_step``).

Tests load it in a run's ranks by naming it in ``LLMB_PLUGINS`` with this
directory on ``PYTHONPATH`` (``ENV``: give it to the ``llmb`` command, whose
jobs inherit its environment), then say which fault in the run's
environment (``llmb run --env ...``, or the command's own):

- ``LLMB_FAIL_AT_STEP``: ``STEP`` or ``STEP:RANK`` makes that rank (default:
  every rank) raise a RuntimeError at that step;
- ``LLMB_FAIL_MESSAGE``: the message it raises (e.g. a flaky signature;
  default: ``injected failure at step S on rank R (LLMB_FAIL_AT_STEP)``);
- ``LLMB_FAIL_ONCE=PATH``: raise only while PATH does not exist, and create
  it (a retry then succeeds; give it with STEP:RANK, since one rank creates it);
- ``LLMB_NAN_FROM_STEP=STEP``: the loss is NaN from that step on (a diverging
  run: it logs grad norm nan).
"""

from __future__ import annotations

import os
from pathlib import Path

from llmb import hookimpl

FAIL_AT_STEP = "LLMB_FAIL_AT_STEP"
FAIL_MESSAGE = "LLMB_FAIL_MESSAGE"
FAIL_ONCE = "LLMB_FAIL_ONCE"
NAN_FROM_STEP = "LLMB_NAN_FROM_STEP"

# The environment that loads this plugin in the processes of an ``llmb`` command (its jobs' ranks too).
ENV = {
    "LLMB_PLUGINS": "fault_plugin",
    "PYTHONPATH": os.pathsep.join(
        filter(None, (str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH")))
    ),
}


def injected_failure(step: int, rank: int) -> str | None:
    """The message this rank raises at ``step`` (LLMB_FAIL_AT_STEP), or None."""
    value = os.environ.get(FAIL_AT_STEP)
    if not value:
        return None
    at, _, who = value.partition(":")
    if int(at) != step or (who and int(who) != rank):
        return None
    once = os.environ.get(FAIL_ONCE)
    if once:
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            return None  # an earlier attempt failed here already
    return (
        os.environ.get(FAIL_MESSAGE)
        or f"injected failure at step {step} on rank {rank} ({FAIL_AT_STEP})"
    )


@hookimpl
def llmb_before_step(step: int, rank: int) -> float | None:
    if (message := injected_failure(step, rank)) is not None:
        raise RuntimeError(message)
    value = os.environ.get(NAN_FROM_STEP)
    return float("nan") if value and step >= int(value) else None
