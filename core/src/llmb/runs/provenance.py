"""A run's provenance: what produced it, in ``provenance.json`` in its run directory.

Two writers fill the one file, each its own section (the file is read, the
section replaced, and the whole written atomically):

``submission``  ``llmb run``, before the job is submitted (so it never races the
                job): llmb's version, every plugin's distribution and version, the
                backend and engine, the GPU type asked for, the container image
                (its reference, the ``.sqsh`` file ``llmb install`` imported for it,
                and its digest when the reference pins one, else "unknown"), the
                variables llmb set, the secrets' names (never their values), the host.
``job``         rank 0 of the job, before training: llmb's and the plugins' versions
                as the job imports them, the frameworks' versions (package metadata:
                nothing is imported for them; ``FRAMEWORKS``), the scheduler's job id
                and nodes, the GPUs the job sees (name, count, driver) and their check against
                ``--gpu``, the host, and the effective environment, secrets redacted.

A failure to write is a warning in the run's log, never a failed run. See
docs/provenance.md. This module reads and writes the file; what each writer
records (which needs the installed images, the frameworks and the plugins)
is ``llmb.lifecycle.provenance``.
"""

from __future__ import annotations

import os

from llmb.runs import experiment
from llmb.runs.jobs import describe_os_error

FILE = "provenance.json"


def path_of(run_dir: str) -> str:
    return os.path.join(run_dir, FILE)


def read(run_dir: str) -> dict | None:
    return experiment.read_json(path_of(run_dir))


def of_log(log: str | None) -> dict | None:
    """The provenance of the run whose log is ``log`` (``<run dir>/<name>/log-<name>.out``), if recorded."""
    inner = os.path.dirname(os.path.abspath(log or "."))
    if not log or os.path.basename(log) != f"log-{os.path.basename(inner)}.out":
        return None  # not the seeds' layout: there is no run directory to look in
    # a NaN or an Infinity is not llmb's writing, and not valid JSON to pass on: None
    return experiment.read_json(path_of(os.path.dirname(inner)), finite=True)


def write_section(run_dir: str, section: str, data: dict) -> str | None:
    """Merge ``data`` into the file as ``section``; what went wrong (a sentence), or None."""
    path = path_of(run_dir)
    merged = read(run_dir) or {}
    merged[section] = data
    try:
        experiment.write_json(path, merged)
    except OSError as exc:
        return f"could not write the run's provenance ({path}): {describe_os_error(exc)}"
    return None
