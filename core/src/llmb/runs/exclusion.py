"""Reading a preflight file back: the nodes ``--exclude-from PREFLIGHT.json`` keeps a job off,
and what the run that used it records (``recipe.json``'s and ``provenance.json``'s ``preflight``).
``llmb preflight`` (``llmb.preflight``) writes the file; a run's options read it.

The file may come from anywhere, so it is held to bounds: its size, how deeply its JSON nests,
how many nodes it names (``MAX_NODES``) and what a node name and a job id may be. A run records
only what identifies the file and what it chose (path, digest, job id, verdict, the nodes), never
the rest of it. A preflight that measured another GPU type, on another Slurm cluster, or long ago
(``STALE_DAYS``) is still used, with one warning each: its flags may not fit this run."""

from __future__ import annotations

import hashlib
import os
import re
from datetime import datetime, timezone

from llmb.errors import UsageError
from llmb.files import read_regular

MAX_BYTES = 16 << 20
# A bound far above any cluster a preflight pairs (each node's figures fill a row of the file), and
# far below what makes an exclude list a burden to every sbatch script and record that carries it.
MAX_NODES = 10_000
# A node name as Slurm (SLURMD_NODENAME) or a host name gives it; a job id as llmb writes one.
NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", re.ASCII)
JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}", re.ASCII)
VERDICTS = ("pass", "flagged", "not_judged")  # llmb.preflight.verdict's
# A preflight older than this may no longer describe the nodes (repaired, replaced, degraded since).
STALE_DAYS = 7
SLURM_CONF = "/etc/slurm/slurm.conf"  # Slurm's default; SLURM_CONF names another
_CLUSTER_NAME = re.compile(rb"^[ \t]*ClusterName[ \t]*=[ \t]*([^\s#]+)", re.I | re.M)


def _shown(value: object, limit: int = 40) -> str:
    """A value from the file, short enough for one line."""
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[:limit] + "..."


def read(path: str, gpu: str | None = None, backend: str | None = None) -> dict:
    """{"path", "sha256", "job_id", "verdict", "exclude"} of a preflight file; UsageError when it is not
    one. With the run's ``gpu`` and ``backend``, a warning each when the preflight measured another
    GPU type, is older than ``STALE_DAYS`` or ran on another Slurm cluster."""
    from llmb.log import warn

    try:
        raw = read_regular(path, MAX_BYTES + 1)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--exclude-from {path}: cannot read it ({exc}).") from None
    if len(raw) > MAX_BYTES:
        raise UsageError(
            f"--exclude-from {path}: larger than {MAX_BYTES >> 20} MiB; give the preflight.json llmb "
            f"preflight wrote."
        )
    import json

    try:
        data = json.loads(raw)
    except RecursionError:
        raise UsageError(
            f"--exclude-from {path}: its JSON nests too deeply to read; give the preflight.json llmb "
            f"preflight wrote."
        ) from None
    except ValueError as exc:
        raise UsageError(
            f"--exclude-from {path}: not JSON ({_shown(str(exc), 200)}); give the preflight.json llmb "
            f"preflight wrote."
        ) from None
    exclude = data.get("exclude") if isinstance(data, dict) else None
    if not isinstance(exclude, list) or not all(isinstance(n, str) and n for n in exclude):
        raise UsageError(
            f"--exclude-from {path}: no list of node names under 'exclude'; give the preflight.json "
            f"llmb preflight wrote."
        )
    if len(exclude) > MAX_NODES:
        raise UsageError(
            f"--exclude-from {path}: {len(exclude):,} names under 'exclude', more than the {MAX_NODES:,} "
            f"nodes llmb keeps a job off; give the preflight.json llmb preflight wrote, or list the "
            f"nodes with --exclude as a Slurm host list (node[001-400])."
        )
    if bad := next((n for n in exclude if not NODE.fullmatch(n)), None):
        raise UsageError(
            f"--exclude-from {path}: {_shown(bad)!r} under 'exclude' is no node name (letters, digits, "
            f"'_', '.', '-', at most 128 characters); give the preflight.json llmb preflight wrote."
        )
    job_id = data.get("job_id")
    if job_id is not None and not (isinstance(job_id, str) and JOB_ID.fullmatch(job_id)):
        warn(
            f"--exclude-from {path}: its job_id {_shown(job_id)!r} is no job id llmb writes; the run "
            f"records the file without it."
        )
        job_id = None
    verdict = data.get("verdict")
    if verdict is not None and verdict not in VERDICTS:
        warn(
            f"--exclude-from {path}: its verdict {_shown(verdict)!r} is none of {', '.join(VERDICTS)}; "
            f"the run records the file without it."
        )
        verdict = None
    if verdict == "not_judged":  # llmb.preflight.verdict.NOT_JUDGED
        reasons = data.get("not_applied")
        reasons = reasons[:10] if isinstance(reasons, list) else []
        skipped = "; ".join(_shown(str(n), 200) for n in reasons) or "none applied"
        warn(
            f"--exclude-from {path}: that preflight applied no thresholds ({skipped}), so it flags no "
            f"node and checked none; the job may land on a slow node."
        )
    for problem in fit_problems(data, gpu, backend):
        warn(
            f"--exclude-from {path}: {problem}; its flagged nodes may not be this run's slow ones."
        )
    return {
        "path": os.path.abspath(path),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "job_id": job_id,
        "verdict": verdict,
        "exclude": list(dict.fromkeys(exclude)),
    }


def fit_problems(
    data: dict, gpu: str | None, backend: str | None, now: datetime | None = None
) -> list[str]:
    """What tells the preflight ``data`` apart from the run it would steer: another GPU type, its
    age beyond ``STALE_DAYS``, another Slurm cluster. Only what both sides say is compared."""
    problems = []
    measured = data.get("gpu")
    if gpu and isinstance(measured, str) and measured.strip().lower() != gpu.strip().lower():
        problems.append(f"that preflight measured {_shown(measured)} GPUs, this run asks for {gpu}")
    written = _when(data.get("written_at"))
    if written is not None:
        age = (now or datetime.now(timezone.utc)) - written
        if age.days >= STALE_DAYS:
            problems.append(
                f"that preflight is {age.days} days old (written {written.date().isoformat()}); nodes "
                f"change"
            )
    theirs = data.get("cluster")
    if backend == "slurm" and isinstance(theirs, str) and theirs:
        ours = slurm_cluster_name()
        if ours is not None and ours.lower() != theirs.lower():
            problems.append(
                f"that preflight ran on the Slurm cluster {_shown(theirs)}, this run is submitted to "
                f"{ours}"
            )
    return problems


def _when(value: object) -> datetime | None:
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def slurm_cluster_name() -> str | None:
    """The ``ClusterName`` of this machine's Slurm configuration (``$SLURM_CONF``, else Slurm's default
    file); None when it cannot be read. A preflight job records the name its job saw
    (``SLURM_CLUSTER_NAME``)."""
    try:
        text = read_regular(os.environ.get("SLURM_CONF") or SLURM_CONF, 1 << 20)
    except OSError:
        return None
    found = _CLUSTER_NAME.search(text)
    return found.group(1).decode("ascii", "replace")[:128] if found else None


def merged(exclude: str | None, nodes: list[str]) -> str | None:
    """A Slurm exclude list with ``nodes`` added (each once), in linear time."""
    parts = dict.fromkeys(p for p in (exclude or "").split(",") if p)
    parts.update(dict.fromkeys(nodes))
    return ",".join(parts) or None
