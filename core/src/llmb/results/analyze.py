"""From what the parsers found to a ``RunResult``.

Status (the tool being replaced, plus ``failed``, ``unreadable``,
``invalid_step_time``, ``cancelled`` and ``too_short``), first match wins:

* ``no_log``: there is no log;
* ``unreadable``: the log is not a regular file (a FIFO, a device, a
  directory), a symbolic link to it leads nowhere, or reading it failed;
* ``invalid_grad_norm``: some iteration logged ``grad norm: nan``;
* ``invalid_step_time``: an iteration of the window logged a step time that
  is not a finite number (``inf``, ``nan``) or is absurd (over ``MAX_STEP_MS``,
  1e9 ms: eleven days a step, a corrupt number rather than a measurement):
  its statistics would be meaningless;
* ``success``: the final iteration (``i/N`` with i = N) and every iteration
  of the window are in the log;
* ``cancelled``: the llmb job that ran it was cancelled (its record says
  so), or the reason is Slurm's cancel that names no cause (``*** JOB 123 ON
  node01 CANCELLED AT 2025-03-01T10:00:00 ***``, or ``*** STEP 123.0 ...``:
  scancel), the reason naming the job, host and time;
* ``failed``: a failure was found; which one is the reason is said below;
* ``too_short``: the run's final iteration (the ``N`` of ``i/N``) is before
  the window's end (``llmb run --steps 20`` with the window 35-44), whether
  the run reached it or stopped earlier: the window can never be reached;
* ``incomplete``: some iterations, but not the final one or not the whole window;
* ``no_data``: no iteration line at all (where the log has Megatron-Bridge's
  ``Step Time`` lines, which rank 0 prints while the last rank prints the
  iteration lines, the reason counts them and says to read the last rank's log).

A run whose final iteration is in the log finished training, and so did one
whose log has Megatron's ``[after training is done]`` line before its
failure: a failure or a cancel after it (a hang at exit until Slurm's time
limit or a scancel ended the job) is no reason to fail it and never makes
its status depend on the window. Its status is what its iterations say (``success`` for every window
they cover, else ``too_short`` or ``incomplete``), and its reason says that
training finished and how the job then ended (a ``warning:`` for a success:
the measurement is complete). The failure is still recorded.

The reason of a failed run is the first real error in log order, not the
last symptom: each failure the parsers found carries its offset in the log
(``Failure.offset``). A node failure is the reason wherever it is (the
other nodes' errors may reach the log before Slurm's notice, and follow
from it); otherwise the earliest cause: CUDA out of memory, a NaN or Inf
found by Megatron-Core's checks (``nan_loss_or_grad``), an NCCL watchdog
timeout, a Python exception, a Slurm time limit, preemption or cancel. Where
no worker or Slurm said why, torchrun's account of the worker that failed
first is the reason (``worker_failed``: its ``failed (exitcode: -6)
local_rank: 6`` line, in the words of its ``Root Cause (first observed
failure)`` block where there is one: rank, host, exit code, signal). A
symptom (srun's ``task N: Exited with exit code 1``, torchrun's
``ChildFailedError``, the SIGTERMs it sends the other workers and ``Killing
subprocess``) is the reason only of a log that holds neither. So a CUDA OOM
on one rank followed by the others' NCCL timeouts is ``cuda_oom``, an NCCL
timeout that followed a RuntimeError is the RuntimeError, a time limit that
followed an exception is the exception, and a worker killed by SIGABRT is
its root cause, not the SIGTERMs that torchrun logged before its report.

Megatron-Core's NaN checks (``check_for_nan_in_loss_and_grad``; its rerun
state machine's "Unexpected result nan", "found NaN in local grad norm")
stop the run before the iteration's line is printed: such a run is
``failed`` with ``nan_loss_or_grad``, not ``invalid_grad_norm``. That
status stays for NaN the iteration lines themselves logged: divergence the
run showed, which another attempt would repeat; the check's finding may be
a transient GPU fault (NVIDIA's performance launcher retries "found NaN in").

Statistics are over the window's iterations (printed numbers, inclusive):
mean and *sample* standard deviation, step time in ms, TFLOP/s/GPU paired
with its own iteration. torchtitan prints every k-th step (its
``metrics.log_freq``, 10 by default; k is the commonest gap between logged
steps), each standing for the k up to it: its window is whole when those
cover it, and its statistics are over the logged steps whose k overlap it.
Where the workload's logs carry no valid TFLOPS (Nemotron-H) they are
computed per iteration from the workload's FLOPs. The global batch size is
the one the log states, where it states one; one that differs from the
context's (the recipe's or the experiment name's) is noted.

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
from collections.abc import Callable, Mapping
from dataclasses import asdict, replace

from llmb.recipes.gpus import catalogue, peak_source
from llmb.recipes.metrics import days_to_train, mfu_at_bf16_pct, mfu_pcts, tokens_per_second
from llmb.recipes.records import Variant, Workload
from llmb.recipes.references import AUTO, Figure
from llmb.results import identity
from llmb.results.plausibility import impossible
from llmb.results.records import (
    FAILURE_KINDS,
    SYMPTOMS,
    CheckpointTimings,
    Failure,
    IterationLog,
    NcclTransport,
    RunContext,
    RunResult,
    Sample,
    WindowStats,
)
from llmb.results.references import lookup
from llmb.results.scan import ScanReport

DEFAULT_WINDOW = (35, 44)
MAX_STEP_MS = 1e9  # eleven days a step: a larger step time is a corrupt number, not a measurement
ITERATION_FORMATS = ("megatron_bridge", "nemo2", "torchtitan")
ZERO_BASED = ("nemo2",)  # formats whose first iteration is 0 (a 50-step run ends at 49/49)
SAMPLED = ("torchtitan",)  # formats that print every k-th iteration by design
SLURM_ENDS = (
    "time_limit",
    "preempted",
    "cancelled",
)  # Slurm's words on why a job's processes were ended


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
    """Mean and *sample* standard deviation of the finite values (no std for one
    value); None where they overflow (values near 1e308), never an error."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return None, None
    try:
        mean = statistics.fmean(values)
    except OverflowError:
        return None, None
    try:
        std = sample_stdev(values) if len(values) > 1 else None
    except OverflowError:
        std = None
    return mean, std


# The standard library's correctly rounded square root of a ratio of integers (Python 3.11+), which its
# stdev ends with; None where it has none (there stdev is taken as it is).
_SQRT_OF_RATIO = getattr(statistics, "_float_sqrt_of_frac", None)


def sample_stdev(values: list[float]) -> float:
    """``statistics.stdev`` of two or more finite floats, the same float, in integers: each float is an
    integer over a power of two, so over the largest of those denominators the sum of squared
    deviations is an exact ratio of integers, whose square root is rounded as the library rounds it.
    The library gets there through ``Fraction`` arithmetic, ten times as slow (a tenth of parsing a
    run's log went there). tests/test_results_analysis.py holds the two to the same bits."""
    if _SQRT_OF_RATIO is None:
        return statistics.stdev(values)
    ratios = [value.as_integer_ratio() for value in values]
    common = max(denominator for _, denominator in ratios)
    scaled = [numerator * (common // denominator) for numerator, denominator in ratios]
    count = len(scaled)
    total = sum(scaled)
    numerator = count * sum(n * n for n in scaled) - total * total
    denominator = count * (count - 1) * common * common
    divisor = math.gcd(numerator, denominator)
    return _SQRT_OF_RATIO(numerator // divisor, denominator // divisor)


def delta_pct(step_time_ms: float, published_ms: float) -> float:
    """How far a step time is off the published one, in percent (positive: slower)."""
    return 100.0 * (step_time_ms - published_ms) / published_ms


def choose_iterations(findings: dict) -> tuple[IterationLog | None, list[str]]:
    logs = [f for name in ITERATION_FORMATS if (f := findings.get(name)) is not None]
    if not logs:
        return None, []
    logs.sort(key=lambda log: len(log.samples), reverse=True)
    notes = []
    if len(logs) > 1:
        notes.append(
            "mixed log formats: "
            + ", ".join(f"{len(l.samples)} {l.format} iterations" for l in logs)
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


def find_reference(
    workload: Workload | None, context: RunContext, variant: Variant | None
) -> Figure | None:
    """The published figure the run is judged against, by the one policy every command uses
    (``llmb.results.references.lookup``, source ``auto``): its own recipe's, else another document's for
    exactly its configuration and batch; None for a proxy, an unknown configuration or none published."""
    if workload is None or variant is None:
        return None
    found = lookup(workload, context, AUTO)
    return found if isinstance(found, Figure) else None


def mfu_peaks(context: RunContext) -> Mapping[str, float] | None:
    """The dense peaks MFU is against: the GPU type's, for a run that computed on its GPUs (a CPU run
    has none; plausibility holds every run against them all the same)."""
    if context.gpu in catalogue() and context.device != "cpu":
        return catalogue()[context.gpu].peak_tflops
    return None


def borrowed_peak_note(context: RunContext, at_dtype: bool) -> str | None:
    """Which peak the MFU is against and its source, for a GPU type that takes another's (gpus.yaml
    ``runs_recipes_of``: an H200's MFU is against the H100's peak); None for a type's own peak."""
    dtype = context.dtype if at_dtype and context.dtype else "bf16"
    source = peak_source(context.gpu, dtype) if context.gpu in catalogue() else None
    if source is None or source.of_gpu is None:
        return None
    return f"MFU is against the {dtype.upper()} peak {source.describe()}"


def _tflops_by_count(
    stats: WindowStats | None, gbs: int | None, gpus: int | None, flops: float | None
) -> dict[str, float]:
    """The window's TFLOP/s per GPU on each FLOP count the run has: the log's own figure, and the
    workload's formula over the mean step time."""
    counts: dict[str, float] = {}
    if stats is None or not stats.time_mean_ms:
        return counts
    if stats.tflops_source == "log" and stats.tflops_mean is not None:
        counts["the log"] = stats.tflops_mean
    if flops and gbs and gpus:
        counts["the workload's formula"] = gbs * flops / (stats.time_mean_ms / 1000.0) / gpus / 1e12
    return counts


def analyze(
    report: ScanReport | None,
    context: RunContext,
    *,
    workload: Workload | None = None,
    window: tuple[int, int] | None = None,
    model_flops: Callable[[RunContext], float | None] | None = None,
    missing_log_reason: str = "no log file",
) -> RunResult:
    """``model_flops(context)``: the workload's formula's FLOPs per sample for the run as established
    (its sequence length and layers may be what the log states), or None where unknown."""
    if report is None:
        return _without_log(None, context, "no_log", missing_log_reason, workload, window)

    findings = report.findings
    iterations, notes = choose_iterations(findings)
    variant = variant_for(workload, context, iterations.format if iterations else None)
    if variant is not None and context.variant is None:
        context = replace(context, variant=variant.name)
    window = window or (variant.window if variant else DEFAULT_WINDOW)
    failure = first_cause(findings.get("failures") or [])
    failure = _with_hint(failure, workload, context) if failure else None

    samples = sorted(iterations.samples.values(), key=lambda s: s.iteration) if iterations else []
    every = log_every(samples) if iterations and iterations.format in SAMPLED else 1
    inside = [s for s in samples if _in_window(s, window, every)]
    # What ran, from the log first (DESIGN.md, Results): its statements, then its records and name.
    context = identity.establish(
        context,
        [
            *identity.iteration_statements([s.global_batch_size for s in inside or samples]),
            *(findings.get("statements") or ()),
        ],
    )
    gbs = context.gbs
    flops_per_sample = model_flops(context) if model_flops else None
    compute_tflops = variant is not None and not variant.log_tflops_valid
    stats = _window_stats(inside, window, compute_tflops, gbs, context.gpus, flops_per_sample)

    notes += _scan_notes(report, iterations) + _titan_notes(iterations, inside)
    status, reason = _status(
        iterations, samples, window, failure, report, context.job_state, every, stats
    )
    stopped = samples[-1].iteration if samples else None
    if status in ("failed", "cancelled") and (short := _unreachable(iterations, window, stopped)):
        notes.append(short)

    tokens = days = mfu_pct = mfu_bf16_pct = None
    if stats and stats.time_mean_ms and context.seq_len and gbs:
        tokens = tokens_per_second(context.seq_len, gbs, stats.time_mean_ms / 1000.0)
        # a proxy model's time to train means nothing
        days = None if context.proxy else days_to_train(tokens)
    by_count = _tflops_by_count(stats, gbs, context.gpus, flops_per_sample)
    peaks = mfu_peaks(context)
    if stats and stats.time_mean_ms and peaks:
        use_log = variant is not None and variant.mfu_from == "log" and stats.tflops_source == "log"
        model_tflops = by_count.get("the log") if use_log else None
        if model_tflops is None:
            model_tflops = by_count.get("the workload's formula")
        if model_tflops is not None:
            mfu_pct, mfu_bf16_pct = mfu_pcts(model_tflops, peaks, context.dtype)
            if note := borrowed_peak_note(context, mfu_pct is not None):
                notes.append(note)
    # Before any verdict: figures the GPU type cannot produce make the run implausible, never a pass.
    if impossible_why := impossible(
        context, tflops=by_count, tokens_per_s=tokens, workload=workload
    ):
        if status == "success":
            status, reason = "implausible", impossible_why
        else:
            notes.append(f"implausible figures: {impossible_why}")
    notes += [f"not judged: {doubt}" for doubt in context.doubts]

    transport = findings.get("nccl_transport")
    if transport is not None and transport.over_sockets(context.nodes):
        notes.append(socket_warning(transport))

    reference = find_reference(workload, context, variant)
    ref_ms = delta = ref_mfu_bf16 = None
    if reference is not None:
        ref_ms = reference.step_time_ms
        if stats and stats.time_mean_ms and ref_ms and status != "implausible":
            delta = delta_pct(stats.time_mean_ms, ref_ms)
        if context.gpu in catalogue() and context.dtype:
            ref_mfu_bf16 = mfu_at_bf16_pct(
                reference.mfu_pct, catalogue()[context.gpu].peak_tflops, context.dtype
            )
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
        reference_source=reference.describe() if reference else None,
        reference=asdict(reference) if reference else None,
        notes=tuple(notes),
        bytes_read=report.bytes_read,
        extra={k: v for k, v in findings.items() if k not in _CORE_FINDINGS},
    )


def unreadable(
    log: str,
    context: RunContext,
    reason: str,
    *,
    workload: Workload | None = None,
    window: tuple[int, int] | None = None,
) -> RunResult:
    """The result of a run whose log could not be read (``reason`` says why)."""
    return _without_log(log, context, "unreadable", reason, workload, window)


def _without_log(
    log: str | None,
    context: RunContext,
    status: str,
    reason: str,
    workload: Workload | None,
    window: tuple[int, int] | None,
) -> RunResult:
    variant = variant_for(workload, context, None)
    return RunResult(
        log=log,
        context=context,
        status=status,
        reason=reason,
        format=None,
        window=window or (variant.window if variant else DEFAULT_WINDOW),
        stats=None,
        max_iteration=None,
        last_iteration=None,
    )


_CORE_FINDINGS = {*ITERATION_FORMATS, "checkpoint", "nccl", "nccl_transport", "failures"}


def socket_warning(transport: NcclTransport) -> str:
    """The note of a run whose ranks talked across nodes over TCP sockets."""
    used = (
        ", ".join(f"{name} ({count})" for name, count in transport.channels.items())
        or "no channel lines"
    )
    return (
        f"warning: NCCL connected this run's nodes over TCP sockets (NET/Socket), not InfiniBand/RoCE or a "
        f"network plugin (channels: {used}; network: {', '.join(transport.networks) or '-'}): its step "
        f"times do not represent the cluster. Check that the job sees the HCAs and NCCL's net plugin "
        f"(NCCL_IB_HCA, NCCL_NET_PLUGIN, the container's mounts)."
    )


def _with_hint(failure: Failure, workload: Workload | None, context: RunContext) -> Failure:
    if workload is None:
        return failure
    for hint in workload.failure_hints:
        if hint.failure == failure.kind and (hint.gpu is None or hint.gpu == context.gpu):
            return replace(failure, hint=hint.hint)
    return failure


def first_cause(failures: list[Failure]) -> Failure | None:
    """The failure that is the reason (the module's docstring says how it is chosen)."""
    from llmb.results.records import LAUNCHER_CAUSES

    if not failures:
        return None
    causes = (
        [f for f in failures if f.kind == "node_failure"]
        or [f for f in failures if f.kind not in SYMPTOMS and f.kind not in LAUNCHER_CAUSES]
        or [f for f in failures if f.kind in LAUNCHER_CAUSES]
        or failures
    )
    order = {kind: i for i, kind in enumerate(FAILURE_KINDS)}

    def first(found: list[Failure]) -> Failure:
        return min(
            found,
            key=lambda f: (
                math.inf if f.offset is None else f.offset,
                order.get(f.kind, len(order)),
            ),
        )

    picked = first(causes)
    # torchrun signalled from outside: where Slurm says why (its time limit, a preemption, a cancel), that
    # is the reason, wherever its line is
    slurm = [f for f in failures if f.kind in SLURM_ENDS]
    return first(slurm) if picked.kind == "killed" and slurm else picked


def log_every(samples: list[Sample]) -> int:
    """How many iterations each logged one stands for: the commonest gap between
    consecutive logged iterations (the larger where two are as common)."""
    gaps = Counter(b.iteration - a.iteration for a, b in zip(samples, samples[1:], strict=False))
    if not gaps:
        return 1
    most = max(gaps.values())
    return max(1, max(gap for gap, count in gaps.items() if count == most))


def _in_window(sample: Sample, window: tuple[int, int], every: int) -> bool:
    """Whether the iterations the sample stands for (the ``every`` up to it) overlap the window."""
    return sample.iteration >= window[0] and sample.iteration - every < window[1]


def _titan_notes(iterations: IterationLog | None, inside: list[Sample]) -> list[str]:
    """torchtitan's own figures over the window, which no other column holds."""
    if iterations is None or iterations.format != "torchtitan" or not inside:
        return []
    tps, mfu, memory = (
        mean_std([getattr(s, name) for s in inside])[0]
        for name in ("tokens_per_s_per_gpu", "mfu_pct", "memory_gib")
    )
    parts = [
        f"{tps:,.0f} tokens/s per GPU" if tps is not None else None,
        f"MFU {mfu:.2f}% (of the peak torchtitan assumes)" if mfu is not None else None,
        f"peak reserved memory {memory:.2f} GiB" if memory is not None else None,
    ]
    shown = [p for p in parts if p]
    return (
        [f"torchtitan's own figures over the window (means): {', '.join(shown)}"] if shown else []
    )


def _window_stats(
    inside: list[Sample],
    window: tuple[int, int],
    compute_tflops: bool,
    gbs: int | None,
    gpus: int | None,
    flops: float | None,
) -> WindowStats | None:
    first, last = window
    if not inside:
        return None
    times = [s.step_time_ms for s in inside if _usable(s.step_time_ms)]
    time_mean, time_std = mean_std(times)
    source = None
    tflops: list[float] = []
    if compute_tflops:
        if flops and gbs and gpus:
            tflops = [
                gbs * flops / (s.step_time_ms / 1000.0) / gpus / 1e12
                for s in inside
                if s.step_time_ms and _usable(s.step_time_ms)
            ]
            source = "computed"
    else:
        tflops = [s.tflops_per_gpu for s in inside if s.tflops_per_gpu is not None]
        source = "log" if tflops else None
    tf_mean, tf_std = mean_std(tflops)
    # each figure with the number of values it was computed from: the step times, the TFLOP/s
    return WindowStats(
        first,
        last,
        len(times) if time_mean is not None else 0,
        time_mean,
        time_std,
        tf_mean,
        tf_std,
        source if tflops else None,
        len([t for t in tflops if t is not None and math.isfinite(t)])
        if tf_mean is not None
        else 0,
    )


def _status(
    iterations: IterationLog | None,
    samples: list[Sample],
    window: tuple[int, int],
    failure: Failure | None,
    report: ScanReport,
    job_state: str | None = None,
    every: int = 1,
    stats: WindowStats | None = None,
) -> tuple[str, str | None]:
    if invalid := _invalid(iterations, samples, window, every):
        return invalid
    covered = {
        i
        for s in samples
        for i in range(max(window[0], s.iteration - every + 1), min(window[1], s.iteration) + 1)
    }
    missing = [i for i in range(window[0], window[1] + 1) if i not in covered]
    present = {s.iteration for s in samples}
    final = iterations.last if iterations else None
    reached = bool(samples) and final is not None and final in present
    cancelled = job_state == "CANCELLED" or (failure is not None and failure.kind == "cancelled")
    # Training finished (its final iteration is logged, or Megatron's "[after training is done]" line came
    # before the failure): what ended the job afterwards (a hang at exit, then Slurm's time limit or a
    # cancel) neither fails the run nor depends on the window; it is said.
    done = report.findings.get("training_done")
    done_first = done is not None and (
        failure is None or failure.offset is None or failure.offset > done["offset"]
    )
    after = ""
    if (reached or done_first) and (failure is not None or cancelled):
        ended = {
            "time_limit": "it did not exit before Slurm's time limit ended it (a hang at exit?)",
            "cancelled": "it was still running when it was cancelled (a hang at exit?)",
            "preempted": "it was still running when it was preempted",
        }.get(failure.kind if failure else "cancelled", "it failed at exit")
        said = f" ({failure.kind.replace('_', ' ')}: {failure.message})" if failure else ""
        how = f"iteration {final}/{final}" if reached else f"the log says '{done['line']}'"
        after = f"training finished ({how}), but the job did not end cleanly: {ended}{said}"
    if reached and not missing and stats is not None and stats.count == 0:
        # every iteration is there, but no step time could be read from the window's: nothing was measured
        return "invalid_step_time", (
            f"the window's iterations ({window[0]}-{window[1]}) are logged, but none of them gives a "
            f"step time that can be read" + (f"; {after}" if after else "")
        )
    if reached and not missing:
        return "success", (f"warning: {after}; the measurement is complete" if after else None)
    if not after and cancelled:
        where = f"at iteration {samples[-1].iteration}" if samples else "before its first iteration"
        said = (
            f": {failure.message} (Slurm names no cause: scancel, by a user, an administrator or a tool)"
            if failure is not None and failure.kind == "cancelled"
            else ""
        )
        return "cancelled", f"the job was cancelled {where}{said}"
    if not after and failure is not None:
        reason = f"{failure.kind.replace('_', ' ')}: {failure.message}"
        return "failed", reason + (f" (hint: {failure.hint})" if failure.hint else "")
    also = f"; {after}" if after else ""
    if reached and (steps := _steps_needed(iterations, window)):
        ended = "finished" if after else "ended normally"
        return "too_short", (
            f"the run {ended} at iteration {final}, before the end of the statistics "
            f"window {window[0]}-{window[1]}, which it can never reach; run at least {steps} steps{also}"
        )
    if samples and (short := _unreachable(iterations, window, samples[-1].iteration)):
        return "too_short", short + also
    if samples:
        return "incomplete", _incomplete(final, present, samples[-1].iteration, missing) + also
    if report.binary:
        return "no_data", f"not a text log (binary data), {report.bytes_read} bytes read"
    if step_times := report.findings.get("step_time_lines"):
        count, tflops = step_times["lines"], step_times.get("median_tflops")
        figures = (
            f"{step_times['median_s']:.2f} s"
            if count == 1
            else f"median {step_times['median_s']:.2f} s, mean {step_times['mean_s']:.2f} s"
        ) + (
            "" if tflops is None else f", {'' if count == 1 else 'median '}{tflops:.1f} TFLOP/s/GPU"
        )
        return "incomplete", (
            f"no iteration lines, but {count} Megatron-Bridge 'Step Time' line{'' if count == 1 else 's'} "
            f"({figures}): Megatron-Bridge prints them on rank 0 and the iteration lines on the last rank, "
            "which holds the last pipeline stage, so this is probably the log of a node or pod without the "
            "last rank; read the log of the one that has it (its iterations say which step each time is)"
            + also
        )
    what = (
        "an empty log"
        if report.bytes_read == 0
        else f"no iteration lines in {report.bytes_read} bytes"
    )
    return "no_data", what + also


def _incomplete(final: int | None, present: set[int], last: int, missing: list[int]) -> str:
    parts = []
    if final is None:
        parts.append(
            f"the log does not say which iteration is final (no total steps, no end of training); "
            f"the last logged is {last}"
        )
    elif final not in present:
        parts.append(f"the final iteration ({final}) was not reached; the last logged is {last}")
    if missing:
        parts.append(f"window iterations {_ranges(missing)} are missing")
    return "; ".join(parts)


def _invalid(
    iterations: IterationLog | None,
    samples: list[Sample],
    window: tuple[int, int],
    every: int,
) -> tuple[str, str] | None:
    """``invalid_grad_norm`` or ``invalid_step_time`` with its reason, or None."""
    if iterations and iterations.nan_grad_norm:
        return (
            "invalid_grad_norm",
            f"grad norm is NaN at iteration {_ranges(sorted(iterations.nan_grad_norm))}",
        )

    bad = [
        s
        for s in samples
        if _in_window(s, window, every)
        and s.step_time_ms is not None
        and not _usable(s.step_time_ms)
    ]
    if not bad:
        return None
    values = ", ".join(sorted({repr(s.step_time_ms) for s in bad}))
    what = (
        "not a finite number"
        if not any(math.isfinite(s.step_time_ms) for s in bad)
        else f"not a finite number of ms below {MAX_STEP_MS:.0e}"
    )
    return "invalid_step_time", (
        f"step time is {what} ({values}) at iteration {_ranges([s.iteration for s in bad])}"
        f", inside the window {window[0]}-{window[1]}"
    )


def _usable(step_time_ms: float | None) -> bool:
    return step_time_ms is not None and math.isfinite(step_time_ms) and step_time_ms <= MAX_STEP_MS


def steps_to_reach(window: tuple[int, int], log_format: str | None) -> int:
    """The steps a run needs for its log to reach the window's last iteration: one more where the
    log counts from 0 (NeMo 2: a 45-step run's last iteration is 44). ``llmb run``'s warning and the
    results' reason both say this number."""
    return window[1] + (1 if log_format in ZERO_BASED else 0)


def _steps_needed(iterations: IterationLog | None, window: tuple[int, int]) -> int | None:
    """The steps a run needs to reach the window's end, where its final iteration is before it; else None."""
    if iterations is None or iterations.last is None or iterations.last >= window[1]:
        return None
    return steps_to_reach(window, iterations.format)


def _unreachable(
    iterations: IterationLog | None, window: tuple[int, int], stopped: int | None = None
) -> str | None:
    """What to say of a run whose final iteration (reached or not) is before the window's end."""
    if (steps := _steps_needed(iterations, window)) is None:
        return None
    where = (
        f" (it stopped at {stopped})" if stopped is not None and stopped != iterations.last else ""
    )
    return (
        f"the run's final iteration is {iterations.last}{where}: the statistics window {window[0]}-{window[1]} "
        f"can never be reached; run at least {steps} steps"
    )


def _scan_notes(report: ScanReport, iterations: IterationLog | None) -> list[str]:
    notes = []
    if iterations and iterations.duplicates:
        notes.append(
            f"{iterations.duplicates} repeated iteration lines (the last of each was kept)"
        )
    if iterations and iterations.dropped:
        notes.append(
            f"{iterations.dropped} iteration lines beyond {len(iterations.samples)} distinct ones ignored"
        )
    if report.long_lines:
        notes.append(f"{report.long_lines} lines longer than 1 MiB skipped")
    for name, error in sorted(report.errors.items()):
        notes.append(f"parser {name} failed and was skipped: {error}")
    return notes
