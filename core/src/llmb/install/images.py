"""Container images: the seeds' ``registry#repo:tag`` references and the
squashfs files ``llmb install`` imports them to.

``nvcr.io#nvidia/nemo:26.04.01`` (pyxis/enroot form: ``#`` after the
registry; ``nvcr.io/...`` would be looked up on Docker Hub) is imported with
``enroot import`` to ``<install>/images/nvidia+nemo+26.04.01.sqsh``.
"""

from __future__ import annotations

import os
import re

from llmb.errors import UsageError
from llmb.paths import install_dir

_REFERENCE = re.compile(r"^(?P<registry>[A-Za-z0-9.-]+(?::\d+)?)#(?P<repo>[a-z0-9._/-]+):(?P<tag>[A-Za-z0-9._-]+)$")


def check_reference(reference: str) -> str:
    """``reference`` if it is in ``registry#repo:tag`` form; UsageError otherwise."""
    if _REFERENCE.match(reference):
        return reference
    hint = ""
    if "#" not in reference and "/" in reference:
        registry, _, rest = reference.partition("/")
        hint = f" (did you mean {registry}#{rest}? pyxis looks a '/' reference up on Docker Hub)"
    raise UsageError(f"container image {reference!r} is not in registry#repo:tag form, "
                     f"e.g. nvcr.io#nvidia/nemo:26.04.01{hint}.")


def sqsh_name(reference: str) -> str:
    """The file name enroot's import gets: ``nvidia+nemo+26.04.01.sqsh``."""
    match = _REFERENCE.match(check_reference(reference))
    assert match is not None
    return f"{match['repo'].replace('/', '+')}+{match['tag']}.sqsh"


def image_path(reference: str) -> str:
    return os.path.join(install_dir(), "images", sqsh_name(reference))


def import_command(reference: str, output: str) -> list[str]:
    """The seeds' import of ``reference`` to ``output``: ``enroot import -o OUTPUT docker://REF``."""
    return ["enroot", "import", "-o", output, f"docker://{check_reference(reference)}"]
