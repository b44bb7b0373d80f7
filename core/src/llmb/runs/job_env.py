"""A job's environment as llmb writes it down, secrets redacted: the variables
that matter for a run (``provenance.json``) or all of them (``--dump-env``).

A secret is a variable named in ``declared`` (HF_TOKEN, a backend's
credentials, the names given with ``--secret``) or one whose name
``llmb.redaction`` recognises (TOKEN, SECRET, PASSWORD, SSHPASS, *_PAT,
*_AUTH, ...). Its value is written as ``***``; every other value is masked
by ``llmb.redaction.mask``: a secret's value where it reappears, a URL's
password (``HTTPS_PROXY=http://user:pw@proxy``), a SAS signature, a header.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Mapping
from functools import lru_cache

from llmb.paths import packaged_data
from llmb.redaction import MASK, is_secret_name, mask
from llmb.yamlio import load_yaml_file

DUMP_VARIABLE = "LLMB_DUMP_ENV"  # set to 1 in a job's environment by --dump-env
# shorter secret values are not searched for in other values: they would mask innocent text
MIN_MASKED = 6


@lru_cache(maxsize=1)
def _table() -> dict:
    return load_yaml_file(packaged_data("job_environment.yaml"))


def redacted(environ: Mapping[str, str], declared: Iterable[str] = ()) -> dict[str, str]:
    """Every variable of ``environ``, sorted by name, secrets redacted."""
    declared = set(declared)
    secret = {name for name in environ if is_secret_name(name, declared)}
    values = [environ[name] for name in secret if len(environ[name]) >= MIN_MASKED]
    return {
        name: MASK if name in secret else mask(value, values)
        for name, value in sorted(environ.items())
    }


def relevant(
    environ: Mapping[str, str], declared: Iterable[str] = (), llmb_set: Iterable[str] = ()
) -> dict[str, str]:
    """The variables that shape a run, redacted: those llmb set (``llmb_set``), the declared
    secrets (their names only), and the names and prefixes of ``data/job_environment.yaml``."""
    table = _table()
    declared = set(declared)
    wanted = {*llmb_set, *declared, *table["names"]}
    prefixes = tuple(table["prefixes"])
    return {
        name: value
        for name, value in redacted(environ, declared).items()
        if name in wanted or name.startswith(prefixes)
    }


def dump_text(environ: Mapping[str, str], declared: Iterable[str] = (), header: str = "") -> str:
    """``NAME=value`` lines, values shell-quoted (the file can be sourced), secrets redacted."""
    lines = [f"# {line}" for line in header.splitlines()]
    lines += [f"{name}={shlex.quote(value)}" for name, value in redacted(environ, declared).items()]
    return "\n".join(lines) + "\n"


def dump_path(log: str, experiment: str) -> str:
    """``env-<experiment>.txt`` beside the run's log."""
    return os.path.join(os.path.dirname(log), f"env-{experiment}.txt")
