"""The one check every environment variable name passes before llmb uses it.

Names reach the sbatch script (``export NAME=...``), the container's
``--container-env`` list, Run:ai's request and the ranks' environment. Values
are always quoted; a name cannot be, so it must be a plain shell identifier:
a letter or underscore, then letters, digits and underscores."""

from __future__ import annotations

import re

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_env_name(name: object) -> bool:
    return isinstance(name, str) and _IDENTIFIER.fullmatch(name) is not None


def env_name_problem(name: object, where: str) -> str | None:
    """Why ``name`` cannot be an environment variable name (None when it can);
    ``where`` says where it was given, e.g. ``--env``."""
    if is_env_name(name):
        return None
    return (f"{where} {name!r} is not a valid environment variable name: use letters, digits and underscores, "
            f"starting with a letter or underscore (e.g. NCCL_DEBUG).")
