"""The published figure a run is judged against (``llmb compare --reference``), or why there is none.

The figures themselves are ``llmb.recipes.references``'; this module adds what
only a run can lack: a proxy model, or a GPU type, size, precision or GPU count
its records and name do not give. Each is a reason in the user's words, so the
run is reported as not compared rather than passed.
"""

from __future__ import annotations

from llmb.recipes.records import Workload
from llmb.recipes.references import AUTO, DEFAULT_SOURCE, Configuration, Figure, Missing, find
from llmb.results.records import RunContext

__all__ = ["AUTO", "DEFAULT_SOURCE", "Figure", "Missing", "lookup", "unknown"]


def unknown(context: RunContext) -> str | None:
    """Why the run's configuration cannot be looked up at all, or None: the one gate before every
    published figure (``lookup``, and the figure a run's analysis stored: ``compare.stored_figure``)."""
    if context.doubts:
        return "not compared: " + "; ".join(context.doubts)
    if context.proxy:
        return "proxy run: a scaled-down model is never compared with published figures"
    if context.device == "cpu":
        return (
            "the run computed on the CPU (its records say device cpu): a CPU's figures are never "
            "compared with a GPU's published ones"
        )
    if context.workload is None:
        return "workload unknown: the log's name matches no installed workload"
    if context.gpu is None:
        where = (
            "the log name does not record it"
            if context.source != "recipe"
            else "the run does not record it"
        )
        return f"GPU type unknown: {where}; pass --gpu (or set gpu in the cluster file)"
    missing = [
        what
        for what, value in (
            ("size", context.size),
            ("precision", context.dtype),
            ("GPU count", context.gpus),
        )
        if value is None
    ]
    if missing:
        return f"{' and '.join(missing)} unknown: the run does not record {'it' if len(missing) == 1 else 'them'}"
    return None


def lookup(workload: Workload | None, context: RunContext, source: str = AUTO) -> Figure | Missing:
    """The figure ``source`` publishes for the run's exact configuration, or why there is none. ``auto``
    (every command's default: ``results``, ``compare``, ``report``, ``certify``): the run's own recipe's
    figure, else another public document's for exactly its configuration, GPU count and global batch."""
    if (reason := unknown(context)) is not None:
        return Missing(source, reason)
    if workload is None:
        return Missing(source, f"workload {context.workload} is not installed")
    return find(workload, configuration_of(context), source)


def configuration_of(context: RunContext) -> Configuration:
    """What a published figure is looked up by, as the run recorded it."""
    return Configuration(
        context.variant,
        context.size,
        context.gpu,
        context.dtype,
        context.gpus,
        context.scaling,
        context.container,
        context.gbs,
        context.seq_len,
        context.layers,
    )
