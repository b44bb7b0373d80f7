"""Reading a preflight file back: the nodes ``--exclude-from PREFLIGHT.json`` keeps a job off,
and what the run that used it records (``recipe.json``'s and ``provenance.json``'s ``preflight``).
``llmb preflight`` (``llmb.preflight``) writes the file; a run's options read it."""

from __future__ import annotations

import hashlib
import os

from llmb.errors import UsageError
from llmb.files import read_regular

MAX_BYTES = 16 << 20


def read(path: str) -> dict:
    """{"path", "sha256", "job_id", "verdict", "exclude"} of a preflight file; UsageError when it is not one."""
    try:
        raw = read_regular(path, MAX_BYTES)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--exclude-from {path}: cannot read it ({exc}).") from None
    import json

    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise UsageError(
            f"--exclude-from {path}: not JSON ({exc}); give the preflight.json llmb preflight "
            f"wrote."
        ) from None
    exclude = data.get("exclude") if isinstance(data, dict) else None
    if not isinstance(exclude, list) or not all(isinstance(n, str) and n for n in exclude):
        raise UsageError(
            f"--exclude-from {path}: no list of node names under 'exclude'; give the preflight.json "
            f"llmb preflight wrote."
        )
    if data.get("verdict") == "not_judged":  # llmb.preflight.verdict.NOT_JUDGED
        from llmb.log import warn

        skipped = "; ".join(str(n) for n in data.get("not_applied") or ()) or "none applied"
        warn(
            f"--exclude-from {path}: that preflight applied no thresholds ({skipped}), so it flags no "
            f"node and checked none; the job may land on a slow node."
        )
    return {
        "path": os.path.abspath(path),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "job_id": data.get("job_id"),
        "verdict": data.get("verdict"),
        "exclude": list(exclude),
    }


def merged(exclude: str | None, nodes: list[str]) -> str | None:
    """A Slurm exclude list with ``nodes`` added (each once)."""
    parts = [p for p in (exclude or "").split(",") if p]
    for node in nodes:
        if node not in parts:
            parts.append(node)
    return ",".join(parts) or None
