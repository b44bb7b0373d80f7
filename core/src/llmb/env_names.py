"""The one check every environment variable name passes before llmb uses it.

Names reach the sbatch script (``export NAME=...``), the container's
``--container-env`` list, Run:ai's request and the ranks' environment. Values
are always quoted; a name cannot be, so it must be a plain shell identifier:
a letter or underscore, then letters, digits and underscores. A base module:
workload files (``llmb.recipes``), run options and the cluster file's checks
(``llmb.install.value_checks``) all use it."""

from __future__ import annotations

import re

from llmb.errors import UsageError

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_name(value: object, where: str) -> str:
    """An environment variable's name: a shell identifier such as ``NCCL_DEBUG``."""
    if isinstance(value, str) and ENV_NAME.fullmatch(value):
        return value
    raise UsageError(
        f"{where} {value!r} is not a valid environment variable name: use letters, digits and "
        f"underscores, starting with a letter or underscore (e.g. NCCL_DEBUG)."
    )


def is_env_name(name: object) -> bool:
    return env_name_problem(name, "") is None


def env_name_problem(name: object, where: str) -> str | None:
    """Why ``name`` cannot be an environment variable name (None when it can);
    ``where`` says where it was given, e.g. ``--env``."""
    try:
        env_name(name, where)
    except UsageError as exc:
        return str(exc)
    return None
