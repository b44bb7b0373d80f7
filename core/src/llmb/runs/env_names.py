"""The one check every environment variable name passes before llmb uses it.

Names reach the sbatch script (``export NAME=...``), the container's
``--container-env`` list, Run:ai's request and the ranks' environment. Values
are always quoted; a name cannot be, so it must be a plain shell identifier:
a letter or underscore, then letters, digits and underscores."""

from __future__ import annotations

from llmb.errors import UsageError
from llmb.install.value_checks import env_name  # the one check of a name, wherever it is given


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
