"""Whether a run's figures are possible on the GPU type it is said to have run on.

Checked before any verdict (``analyze`` calls ``impossible`` for every run it
derives figures for), so no command can pass a run whose numbers cannot be:

* a TFLOP/s per GPU above the GPU type's dense peak for the run's precision, on
  either FLOP count (the one the log prints, and the workload's formula over the
  step time); a precision the GPU type lists no peak for is held against its
  highest peak. MFU above 100% is the same finding in other words;
* tokens/s per GPU more than ``BEYOND_PUBLISHED`` times the best any public
  document publishes for that workload and model size on that GPU type (any
  precision, any GPU count): a figure no tuning explains.

Either almost always means the GPU type is not the one assumed (a B300 log
read with ``--gpu h100``) or the log is not of the configuration its name
says. Every run whose GPU type is known is held against its peak, whatever its
records say (a CPU run and a proxy included: no record turns the check off);
the published tokens/s bound holds for the published model only, so a reduced
model (a proxy, a shallow run) is held against the peak alone.
"""

from __future__ import annotations

from collections.abc import Mapping

from llmb.figures import figure
from llmb.recipes.gpus import catalogue, recipes_of
from llmb.recipes.records import Workload
from llmb.recipes.references import throughput
from llmb.results.records import RunContext

BEYOND_PUBLISHED = (
    2.0  # tokens/s per GPU above this multiple of the best published figure is impossible
)

# How each source of a run's GPU type is named in the advice (``check --gpu``).
_CHECK = {
    "recipe": "the GPU type its recipe.json records",
    "provenance": "the GPU type its provenance.json records",
    "--gpu": "--gpu",
    "cluster file": "the cluster file's gpu",
}


def peak_for(peaks: Mapping[str, float], dtype: str | None) -> tuple[float, str] | None:
    """The dense peak a run of ``dtype`` cannot exceed and its precision's name: the dtype's own, else the
    GPU type's highest (no run beats the fastest precision the GPU has); None without peaks."""
    if not peaks:
        return None
    if dtype in peaks:
        return peaks[dtype], dtype.upper()
    name = max(peaks, key=lambda d: peaks[d])
    return peaks[name], f"highest ({name.upper()})"


def best_published_per_gpu(
    workload: Workload | None, context: RunContext
) -> tuple[float, str] | None:
    """The highest tokens/s per GPU any document publishes for the run's workload, size and GPU type (the
    type whose recipes it runs: an H200's are the H100's), and where; None where none does."""
    if workload is None or context.size is None or context.gpu is None:
        return None
    gpu = recipes_of(context.gpu)
    best = None
    summary = set(map(id, workload.summary))
    for ref in (*workload.references, *workload.summary):
        if ref.size != context.size or ref.gpu != gpu or not ref.gpus:
            continue
        tokens = throughput(workload, ref).tokens_per_s
        if not tokens:
            continue
        per_gpu = tokens / ref.gpus
        if best is None or per_gpu > best[0]:
            # a performance-summary row names its release, section and row in its note
            where = (ref.note if id(ref) in summary else "") or ref.provenance.describe()
            best = (per_gpu, where)
    return best


def impossible(
    context: RunContext,
    *,
    tflops: Mapping[str, float | None],
    tokens_per_s: float | None,
    workload: Workload | None,
) -> str | None:
    """Why the run's figures cannot be right on its GPU type, in one sentence that says what to check;
    None when they can. ``tflops``: TFLOP/s per GPU by FLOP count (``the log``, ``the workload's
    formula``), each None where the run has none."""
    if context.gpu is None:
        return None
    check = _CHECK.get(context.gpu_source or "", "the GPU type")
    gpu = context.gpu
    peaks = catalogue()[gpu].peak_tflops if gpu in catalogue() else {}
    limit = peak_for(peaks, context.dtype)
    if limit is not None:
        peak, name = limit
        over = [(v, count) for count, v in tflops.items() if v is not None and v > peak]
        if over:
            value, count = max(over)
            return (
                f"{figure(value, 1)} TFLOP/s/GPU (on {count}) is above the {gpu}'s {name} dense peak of "
                f"{figure(peak, 0)} (MFU {figure(100.0 * value / peak, 1)}%): the GPU type is probably not "
                f"{gpu}; check {check}"
            )
    reduced = context.proxy or (
        workload is not None
        and context.layers is not None
        and context.size in workload.architectures
        and context.layers < workload.architecture(context.size).layers
    )
    best = None if reduced else best_published_per_gpu(workload, context)
    if best is not None and tokens_per_s and context.gpus:
        per_gpu = tokens_per_s / context.gpus
        if per_gpu > BEYOND_PUBLISHED * best[0]:
            table = recipes_of(gpu)
            on = gpu if table == gpu else f"{table} (whose recipes the {gpu} runs)"
            return (
                f"{figure(per_gpu, 0)} tokens/s per GPU is {per_gpu / best[0]:.1f}x the best any document "
                f"publishes for {context.workload} {context.size} on {on} ({figure(best[0], 0)}, {best[1]}): "
                f"the GPU type is probably not {gpu}, or the log is not of this configuration; check {check}"
            )
    return None
