"""Where llmb keeps things.

``LLMB_INSTALL`` is the seeds' top-level directory for all benchmarking
artefacts (images, venvs, workloads, experiments); without it llmb uses
``$XDG_DATA_HOME/llmb`` (``~/.local/share/llmb``). Each workload's runs go
under ``<install>/workloads/<workload>/experiments`` (the seeds'
``$LLMB_WORKLOAD/experiments``), the results database is
``<install>/results.sqlite``, and Hugging Face files are under ``hf_home``.
"""

from __future__ import annotations

import glob
import os

from llmb.errors import UsageError


def install_dir() -> str:
    explicit = os.environ.get("LLMB_INSTALL")
    if explicit:
        path = os.path.abspath(explicit)
        if os.path.exists(path) and not os.path.isdir(path):
            raise UsageError(
                f"LLMB_INSTALL={explicit} is not a directory; point it at llmb's install directory "
                f"(created by llmb install or the first run), or unset it for {_default_install()}."
            )
        return path
    return _default_install()


def _default_install() -> str:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return os.path.join(base, "llmb")


def shown_path(path: str) -> str:
    """``path`` as human output shows it, still one a shell takes: under the install directory as
    ``$LLMB_INSTALL/...`` when that variable is set, else under the home directory as ``~/...``, else
    whole. ``--json`` output keeps paths whole."""
    path = os.path.abspath(path)
    if os.environ.get("LLMB_INSTALL"):
        install = install_dir()
        if path == install or path.startswith(install + os.sep):
            return "$LLMB_INSTALL" + path[len(install) :]
    home = os.path.expanduser("~")
    if home not in ("", os.sep) and (path == home or path.startswith(home + os.sep)):
        return "~" + path[len(home) :]
    return path


def workload_dir(workload: str) -> str:
    return os.path.join(install_dir(), "workloads", workload)


def hf_home(install: str) -> str:
    """``HF_HOME`` of an install: the seeds' ``$LLMB_INSTALL/.cache/huggingface`` (llmb install fills it,
    the production frameworks read it)."""
    return os.path.join(install, ".cache", "huggingface")


def experiments_dirs() -> list[str]:
    """Every workload's experiments directory that exists under the install."""
    return sorted(glob.glob(os.path.join(install_dir(), "workloads", "*", "experiments")))


def packaged_data(name: str) -> str:
    """The path of one of llmb's own data files (``llmb/data/NAME``: GPU peaks, flaky signatures, ...)."""
    return os.path.join(os.path.dirname(__file__), "data", name)
