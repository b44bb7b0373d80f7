"""Container images: the seeds' ``registry#repo:tag`` references and the
squashfs files ``llmb install`` imports them to.

``nvcr.io#nvidia/nemo:26.04.01`` (pyxis/enroot form: ``#`` after the
registry; ``nvcr.io/...`` would be looked up on Docker Hub) is imported with
``enroot import`` to ``<install>/images/nvidia+nemo+26.04.01.sqsh``.
"""

from __future__ import annotations

import os

from llmb.install.value_checks import IMAGE_REFERENCE, image_reference
from llmb.paths import install_dir


def check_reference(reference: str) -> str:
    """``reference`` if it is in ``registry#repo:tag`` form; UsageError otherwise."""
    return image_reference(reference, "container image")


def sqsh_name(reference: str) -> str:
    """The file name enroot's import gets: ``nvidia+nemo+26.04.01.sqsh``."""
    match = IMAGE_REFERENCE.fullmatch(check_reference(reference))
    assert match is not None
    return f"{match['repo'].replace('/', '+')}+{match['tag']}.sqsh"


def image_path(reference: str) -> str:
    return os.path.join(install_dir(), "images", sqsh_name(reference))


def import_command(reference: str, output: str) -> list[str]:
    """The seeds' import of ``reference`` to ``output``: ``enroot import -o OUTPUT docker://REF``."""
    return ["enroot", "import", "-o", output, f"docker://{check_reference(reference)}"]
