"""``ADDITIONAL_SLURM_PARAMS``: the seeds' extra sbatch parameters.

Semicolon-separated items, each ``key=value`` or a bare flag; values may
hold commas (``nodelist=node001,node002;constraint=gpu&memory;exclusive``),
which is why the separator is a semicolon. Each item becomes one
``#SBATCH --key=value`` (or ``#SBATCH --flag``) line.
"""

from __future__ import annotations

import re

from llmb.errors import UsageError

_KEY = re.compile(r"^[a-z][a-z0-9-]*$")
# sbatch options llmb sets itself: giving them here would contradict the recipe or the job's bookkeeping.
OWNED = frozenset({"job-name", "J", "output", "o", "error", "e", "nodes", "N", "ntasks", "n", "ntasks-per-node",
                   "parsable", "wrap", "chdir", "D", "export"})


def parse(text: str | None) -> list[tuple[str, str | None]]:
    """``[(key, value or None), ...]``; UsageError naming the bad item."""
    if not text or not text.strip():
        return []
    items = []
    for raw in text.split(";"):
        item = raw.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip().lstrip("-")
        if not _KEY.match(key):
            raise UsageError(f"ADDITIONAL_SLURM_PARAMS item {item!r}: expected key=value or a flag name, "
                             f"e.g. \"nodelist=node001,node002;constraint=gpu;exclusive\".")
        if key in OWNED:
            raise UsageError(f"ADDITIONAL_SLURM_PARAMS sets {key!r}, which llmb derives from the recipe and the "
                             f"experiment; change the recipe (--gpus, --gpus-per-node) instead.")
        if sep and any(c in value for c in "\n\r\0"):
            raise UsageError(f"ADDITIONAL_SLURM_PARAMS item {key!r}: a value cannot contain a line break.")
        items.append((key, value.strip() if sep else None))
    return items
