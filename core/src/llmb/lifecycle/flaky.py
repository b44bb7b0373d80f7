"""Flaky application failures: the log lines that make a failed run worth a fresh attempt.

A cluster backend that retries (``llmb run --retries N``) asks
``flaky_failure(log, signatures)`` once a job has failed. The signatures are
the core's list (``data/flaky_signatures.yaml``: the retryable failures of
NVIDIA's performance launcher, Megatron-Bridge scripts/performance) plus
what plugins add (``llmb_flaky_signatures``; ``PluginHost.flaky_signatures``
collects them). Only the log's tail is read (``TAIL_BYTES``): a failure's
last words are at the end, however large an NCCL trace made the log.

A run whose own iteration lines logged a NaN grad norm (the results'
``invalid_grad_norm``) diverged: what follows (``found NaN in``, a rank's
exception, the others' NCCL timeouts) is its consequence, and another
attempt would diverge again. Such a failure is not retried unless the run
was given ``LLMB_RETRY_NAN=1`` (``llmb run --env LLMB_RETRY_NAN=1``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from llmb.paths import packaged_data
from llmb.results.scan import read_tail
from llmb.yamlio import load_yaml_file

TAIL_BYTES = 256 * 1024
RETRY_NAN = "LLMB_RETRY_NAN"
DATA_FILE = packaged_data("flaky_signatures.yaml")


@dataclass(frozen=True)
class FlakyFailure:
    """A known flaky signature found in a failed run's log."""

    signature: str
    retry: bool  # False: it follows the run's own NaN grad norm
    why_not: str | None = None  # why it is not retried

    def describe(self) -> str:
        return f"flaky failure: {self.signature!r}"


@lru_cache(maxsize=1)
def builtin_signatures() -> tuple[str, ...]:
    """The core's signatures, from the data file (in its order)."""
    data = load_yaml_file(DATA_FILE)
    return tuple(str(s) for s in data["signatures"])


OWN_LINE = b"[llmb] "  # how every line llmb itself writes into a run's log begins


def without_own_lines(text: bytes) -> bytes:
    """``text`` less the lines llmb wrote itself (``[llmb] retry of attempt 1 (... 'Some NCCL operations
    ...')``, warnings, notes): they quote earlier failures, and must never make a later one look flaky."""
    if OWN_LINE not in text:
        return text
    return b"\n".join(line for line in text.split(b"\n") if not line.lstrip().startswith(OWN_LINE))


def first_signature(text: bytes, signatures: Iterable[str]) -> str | None:
    """The signature that occurs first in ``text`` (the earliest is the cause, the rest its echo); None if none.
    llmb's own lines do not count (``without_own_lines``)."""
    text = without_own_lines(text)
    found = None
    for signature in signatures:
        position = text.find(signature.encode("utf-8"))
        if position >= 0 and (found is None or position < found[0]):
            found = (position, signature)
    return found[1] if found else None


def diverged(log: str) -> bool:
    """Whether the run's iteration lines logged a NaN grad norm (the results' ``invalid_grad_norm``).
    The whole log is read, by the results' own parsers: only once a signature was found."""
    from llmb.results.formats import BUILTIN_PARSERS
    from llmb.results.scan import scan

    parsers = [p for p in BUILTIN_PARSERS if p.name in ("megatron_bridge", "nemo2")]
    try:
        report = scan(log, parsers)
    except OSError:
        return False
    return any(found is not None and found.nan_grad_norm for found in report.findings.values())


def retry_nan_asked(env: Mapping[str, str]) -> bool:
    """Whether the run's environment opts in to retrying a failure that follows its own NaN."""
    return str(env.get(RETRY_NAN, "")).strip().lower() in ("1", "true", "yes", "on")


def flaky_failure(
    log: str, signatures: Iterable[str], *, retry_nan: bool = False
) -> FlakyFailure | None:
    """The flaky signature in the tail of the failed run's ``log``, or None when there is none."""
    signature = first_signature(read_tail(log, TAIL_BYTES), signatures)
    if signature is None:
        return None
    if not retry_nan and diverged(log):
        return FlakyFailure(
            signature,
            retry=False,
            why_not=(
                f"it follows the run's own NaN grad norm (invalid_grad_norm), which another attempt would repeat; "
                f"--env {RETRY_NAN}=1 retries it anyway"
            ),
        )
    return FlakyFailure(signature, retry=True)
