"""From what the parsers found to a ``RunResult``.

Status (the tool being replaced, plus ``failed``, ``unreadable``,
``invalid_step_time``, ``cancelled`` and ``too_short``), first match wins:

* ``no_log``: there is no log;
* ``unreadable``: the log is not a regular file (a FIFO, a device, a
  directory), a symbolic link to it leads nowhere, or reading it failed;
* ``invalid_grad_norm``: some iteration logged ``grad norm: nan``;
* ``invalid_step_time``: an iteration of the window logged a step time that
  is not a finite number (``inf``, ``nan``): its statistics would be
  meaningless;
* ``success``: the final iteration (``i/N`` with i = N) and every iteration
  of the window are in the log;
* ``cancelled``: the llmb job that ran it was cancelled (its record says so);
* ``failed``: a failure was found (node failure, CUDA out of memory, NCCL
  watchdog timeout, Python exception: the first of these is the reason);
* ``too_short``: the run reached its final iteration, but that is before the
  window's end (``llmb run --steps 20`` with the window 35-44);
* ``incomplete``: some iterations, but not the final one or not the whole window;
* ``no_data``: no iteration line at all.

Statistics are over the window's iterations (printed numbers, inclusive):
mean and *sample* standard deviation, step time in ms, TFLOP/s/GPU paired
with its own iteration. Where the workload's logs carry no valid TFLOPS
(Nemotron-H) they are computed per iteration from the workload's FLOPs.

MFU is given twice: against the dense peak of the run's dtype (the seeds'
way) and against the BF16 peak (comparable across dtypes); each only where
the GPU type lists that peak (``data/gpus.yaml``), never against another.
The published MFU is restated against the BF16 peak the same way.

NCCL's transport set-up lines (``NCCL_DEBUG=INFO``) name the transports the
run's communicators used; a run whose ranks talked across nodes over TCP
sockets gets a warning note: its step times do not represent the cluster.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace

from llmb.recipes.gpus import catalogue
from llmb.recipes.metrics import days_to_train, mfu_at_bf16_pct, mfu_pcts, tokens_per_second
from llmb.recipes.records import ReferenceResult, Variant, Workload
from llmb.results.records import (
    CheckpointTimings,
    Failure,
    IterationLog,
    NcclTransport,
    RunContext,
    RunResult,
    Sample,
    WindowStats,
)
from llmb.results.scan import ScanReport

DEFAULT_WINDOW = (35, 44)
FAILURE_ORDER = ("node_failure", "cuda_oom", "nccl_timeout", "python_exception")


def _ranges(numbers: list[int]) -> str:
    """[35, 36, 37, 40] -> '35-37, 40'."""
    parts, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(parts)


def mean_std(values: list[float | None]) -> tuple[float | None, float | None]:
    """Mean and *sample* standard deviation of the finite values (no std for one value)."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def delta_pct(step_time_ms: float, published_ms: float) -> float:
    """How far a step time is off the published one, in percent (positive: slower)."""
    return 100.0 * (step_time_ms - published_ms) / published_ms


def choose_iterations(findings: dict) -> tuple[IterationLog | None, list[str]]:
    logs = [f for name in ("megatron_bridge", "nemo2") if (f := findings.get(name)) is not None]
    if not logs:
        return None, []
    logs.sort(key=lambda log: len(log.samples), reverse=True)
    notes = []
    if len(logs) > 1:
        notes.append(
            "mixed log formats: " + ", ".join(f"{len(l.samples)} {l.format} iterations" for l in logs)
            + f"; using {logs[0].format}"
        )
    return logs[0], notes


def variant_for(workload: Workload | None, context: RunContext, fmt: str | None) -> Variant | None:
    """The context's variant, else the one whose framework wrote this log."""
    if workload is None:
        return None
    if context.variant and (variant := workload.variant(context.variant)):
        return variant
    matching = [v for v in workload.variants if v.framework == fmt]
    return matching[0] if matching else workload.default_variant


def find_reference(workload: Workload | None, context: RunContext, variant: Variant | None) -> ReferenceResult | None:
    if workload is None or variant is None or context.proxy or context.gpus is None:
        return None
    found = workload.published(variant.name, context.size, context.gpu, context.dtype, context.scaling, context.gpus)
    return found[0] if found else None


def analyze(
    report: ScanReport | None,
    context: RunContext,
    *,
    workload: Workload | None = None,
    window: tuple[int, int] | None = None,
    flops_per_sample: float | None = None,
    peaks: Mapping[str, float] | None = None,
    missing_log_reason: str = "no log file",
) -> RunResult:
    """``flops_per_sample`` (the workload's formula) and ``peaks`` (the GPU
    type's dense peaks by dtype) are what the derived metrics need; either may
    be None (no peaks: a CPU run, an unknown GPU type)."""
    if report is None:
        return _without_log(None, context, "no_log", missing_log_reason, workload, window)

    findings = report.findings
    iterations, notes = choose_iterations(findings)
    variant = variant_for(workload, context, iterations.format if iterations else None)
    if variant is not None and context.variant is None:
        context = replace(context, variant=variant.name)
    window = window or (variant.window if variant else DEFAULT_WINDOW)
    failures = sorted(findings.get("failures") or [], key=lambda f: FAILURE_ORDER.index(f.kind))
    failure = _with_hint(failures[0], workload, context) if failures else None

    samples = sorted(iterations.samples.values(), key=lambda s: s.iteration) if iterations else []
    gbs = _gbs(samples, context)
    if gbs is not None and context.gbs is None:
        context = replace(context, gbs=gbs)
    compute_tflops = variant is not None and not variant.log_tflops_valid
    stats = _window_stats(samples, window, compute_tflops, gbs, context.gpus, flops_per_sample)

    notes += _scan_notes(report, iterations)
    status, reason = _status(iterations, samples, window, failure, report, context.job_state)

    tokens = days = mfu_pct = mfu_bf16_pct = None
    if stats and stats.time_mean_ms and context.seq_len and gbs:
        tokens = tokens_per_second(context.seq_len, gbs, stats.time_mean_ms / 1000.0)
        days = days_to_train(tokens)
    if stats and stats.time_mean_ms and peaks:
        use_log = variant is not None and variant.mfu_from == "log" and stats.tflops_source == "log"
        model_tflops = None
        if use_log and stats.tflops_mean is not None:
            model_tflops = stats.tflops_mean
        elif flops_per_sample and gbs and context.gpus:
            model_tflops = gbs * flops_per_sample / (stats.time_mean_ms / 1000.0) / context.gpus / 1e12
        if model_tflops is not None:
            mfu_pct, mfu_bf16_pct = mfu_pcts(model_tflops, peaks, context.dtype)

    transport = findings.get("nccl_transport")
    if transport is not None and transport.over_sockets(context.nodes):
        notes.append(socket_warning(transport))

    reference = find_reference(workload, context, variant)
    ref_ms = delta = ref_mfu_bf16 = None
    if reference is not None:
        ref_ms = reference.step_time_s * 1000.0
        if stats and stats.time_mean_ms:
            delta = delta_pct(stats.time_mean_ms, ref_ms)
        if reference.gpu in catalogue():
            ref_mfu_bf16 = mfu_at_bf16_pct(reference.mfu_pct, catalogue()[reference.gpu].peak_tflops, reference.dtype)
    if context.proxy:
        notes.append("proxy run: not compared with the published figures")

    return RunResult(
        log=report.path,
        context=context,
        status=status,
        reason=reason,
        format=iterations.format if iterations else None,
        window=window,
        stats=stats,
        max_iteration=samples[-1].iteration if samples else None,
        last_iteration=iterations.last if iterations else None,
        samples=tuple(samples),
        tokens_per_s=tokens,
        mfu_pct=mfu_pct,
        mfu_bf16_pct=mfu_bf16_pct,
        days_1t=days,
        checkpoint=findings.get("checkpoint") or CheckpointTimings(),
        failure=failure,
        nccl=tuple(findings.get("nccl") or ()),
        nccl_transport=transport,
        reference_step_time_ms=ref_ms,
        reference_tokens_per_s=reference.tokens_per_s if reference else None,
        reference_mfu_pct=reference.mfu_pct if reference else None,
        reference_mfu_bf16_pct=ref_mfu_bf16,
        reference_delta_pct=delta,
        reference_source=reference.provenance.describe() if reference else None,
        notes=tuple(notes),
        bytes_read=report.bytes_read,
        extra={k: v for k, v in findings.items() if k not in _CORE_FINDINGS},
    )


def unreadable(log: str, context: RunContext, reason: str, *, workload: Workload | None = None,
               window: tuple[int, int] | None = None) -> RunResult:
    """The result of a run whose log could not be read (``reason`` says why)."""
    return _without_log(log, context, "unreadable", reason, workload, window)


def _without_log(log: str | None, context: RunContext, status: str, reason: str, workload: Workload | None,
                 window: tuple[int, int] | None) -> RunResult:
    variant = variant_for(workload, context, None)
    return RunResult(log=log, context=context, status=status, reason=reason, format=None,
                     window=window or (variant.window if variant else DEFAULT_WINDOW),
                     stats=None, max_iteration=None, last_iteration=None)


_CORE_FINDINGS = {"megatron_bridge", "nemo2", "checkpoint", "nccl", "nccl_transport", "failures"}


def socket_warning(transport: NcclTransport) -> str:
    """The note of a run whose ranks talked across nodes over TCP sockets."""
    used = ", ".join(f"{name} ({count})" for name, count in transport.channels.items()) or "no channel lines"
    return (f"warning: NCCL connected this run's nodes over TCP sockets (NET/Socket), not InfiniBand/RoCE or a "
            f"network plugin (channels: {used}; network: {', '.join(transport.networks) or '-'}): its step "
            f"times do not represent the cluster. Check that the job sees the HCAs and NCCL's net plugin "
            f"(NCCL_IB_HCA, NCCL_NET_PLUGIN, the container's mounts).")


def _with_hint(failure: Failure, workload: Workload | None, context: RunContext) -> Failure:
    if workload is None:
        return failure
    for hint in workload.failure_hints:
        if hint.failure == failure.kind and (hint.gpu is None or hint.gpu == context.gpu):
            return replace(failure, hint=hint.hint)
    return failure


def _gbs(samples: list[Sample], context: RunContext) -> int | None:
    logged = Counter(s.global_batch_size for s in samples if s.global_batch_size)
    return logged.most_common(1)[0][0] if logged else context.gbs


def _window_stats(
    samples: list[Sample], window: tuple[int, int], compute_tflops: bool,
    gbs: int | None, gpus: int | None, flops: float | None,
) -> WindowStats | None:
    first, last = window
    inside = [s for s in samples if first <= s.iteration <= last]
    if not inside:
        return None
    time_mean, time_std = mean_std([s.step_time_ms for s in inside])
    source = None
    tflops: list[float] = []
    if compute_tflops:
        if flops and gbs and gpus:
            tflops = [gbs * flops / (s.step_time_ms / 1000.0) / gpus / 1e12 for s in inside
                      if s.step_time_ms and math.isfinite(s.step_time_ms)]
            source = "computed"
    else:
        tflops = [s.tflops_per_gpu for s in inside if s.tflops_per_gpu is not None]
        source = "log" if tflops else None
    tf_mean, tf_std = mean_std(tflops)
    return WindowStats(first, last, len(inside), time_mean, time_std, tf_mean, tf_std, source if tflops else None)


def _status(
    iterations: IterationLog | None, samples: list[Sample], window: tuple[int, int],
    failure: Failure | None, report: ScanReport, job_state: str | None = None,
) -> tuple[str, str | None]:
    if iterations and iterations.nan_grad_norm:
        return "invalid_grad_norm", f"grad norm is NaN at iteration {_ranges(sorted(iterations.nan_grad_norm))}"
    if bad := _non_finite_step_times(samples, window):
        values = ", ".join(sorted({repr(s.step_time_ms) for s in bad}))
        return "invalid_step_time", (f"step time is not a finite number ({values}) at iteration "
                                     f"{_ranges([s.iteration for s in bad])}, inside the window "
                                     f"{window[0]}-{window[1]}")
    present = {s.iteration for s in samples}
    missing = [i for i in range(window[0], window[1] + 1) if i not in present]
    final = iterations.last if iterations else None
    if samples and final is not None and final in present and not missing:
        return "success", None
    if job_state == "CANCELLED":
        where = f"at iteration {samples[-1].iteration}" if samples else "before its first iteration"
        return "cancelled", f"the job was cancelled {where}"
    if failure is not None:
        reason = f"{failure.kind.replace('_', ' ')}: {failure.message}"
        return "failed", reason + (f" (hint: {failure.hint})" if failure.hint else "")
    if samples and final is not None and final in present and final < window[1]:
        return "too_short", (f"the run ended normally at iteration {final}, before the end of the statistics "
                             f"window {window[0]}-{window[1]}; run at least {window[1]} steps")
    if samples:
        last = samples[-1].iteration
        parts = []
        if final is None or final not in present:
            parts.append(f"the final iteration ({final}) was not reached; the last logged is {last}")
        if missing:
            parts.append(f"window iterations {_ranges(missing)} are missing")
        return "incomplete", "; ".join(parts)
    if report.binary:
        return "no_data", f"not a text log (binary data), {report.bytes_read} bytes read"
    what = "an empty log" if report.bytes_read == 0 else f"no iteration lines in {report.bytes_read} bytes"
    return "no_data", what


def _non_finite_step_times(samples: list[Sample], window: tuple[int, int]) -> list[Sample]:
    return [s for s in samples if window[0] <= s.iteration <= window[1]
            and s.step_time_ms is not None and not math.isfinite(s.step_time_ms)]


def _scan_notes(report: ScanReport, iterations: IterationLog | None) -> list[str]:
    notes = []
    if iterations and iterations.duplicates:
        notes.append(f"{iterations.duplicates} repeated iteration lines (the last of each was kept)")
    if iterations and iterations.dropped:
        notes.append(f"{iterations.dropped} iteration lines beyond {len(iterations.samples)} distinct ones ignored")
    if report.long_lines:
        notes.append(f"{report.long_lines} lines longer than 1 MiB skipped")
    for name, error in sorted(report.errors.items()):
        notes.append(f"parser {name} failed and was skipped: {error}")
    return notes
