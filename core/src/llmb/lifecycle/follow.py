"""Following a job: live progress from its log, then its summary.

The log is read incrementally with the same iteration parsers ``llmb
results`` uses; progress is one updating line on a terminal, and at most one
line a second otherwise (CI logs stay readable).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from llmb.figures import figure
from llmb.results.formats import MegatronReader, NeMo2Reader
from llmb.results.records import tflops_source_words
from llmb.runs.jobs import TERMINAL, Job, JobStatus, state_text


class Progress:
    """The latest iteration and step times of a growing log."""

    def __init__(self, log: str):
        self.log = log
        self.offset = 0
        self.carry = b""
        self.readers = (MegatronReader(), NeMo2Reader())

    def poll(self) -> None:
        try:
            with open(self.log, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError:
            return
        self.offset += len(data)
        data = self.carry + data
        cut = data.rfind(b"\n") + 1
        self.carry = data[cut:]
        if cut:
            for reader in self.readers:
                reader.feed(data[:cut])

    def latest(self) -> tuple[int, int, list[float]] | None:
        """(iteration, last, recent step times in ms) of the richer format."""
        logs = [r.log for r in self.readers if r.log.samples]
        if not logs:
            return None
        log = max(logs, key=lambda l: len(l.samples))
        iterations = sorted(log.samples)
        recent = [
            log.samples[i].step_time_ms for i in iterations[-5:] if log.samples[i].step_time_ms
        ]
        return iterations[-1], log.last or iterations[-1], recent

    def describe(self) -> str | None:
        found = self.latest()
        if found is None:
            return None
        iteration, last, recent = found
        if not recent:
            return f"step {iteration}/{last}"
        step_s = recent[-1] / 1000
        mean_s = sum(recent) / len(recent) / 1000
        remaining = max(0, last - iteration) * mean_s
        eta = f"{int(remaining // 60)}:{int(remaining % 60):02d}"
        return f"step {iteration}/{last}  last step {step_s:.2f} s  ETA {eta}"


# how long a job may stay UNKNOWN (its records unreadable) before following stops
UNKNOWN_LIMIT_S = 300.0


def follow(
    job: Job,
    status: Callable[[], JobStatus],
    echo: Callable[[str], None],
    interval: float = 0.5,
    stream=None,
    unknown_limit: float = UNKNOWN_LIMIT_S,
) -> JobStatus:
    """Show progress until the job ends (or has been UNKNOWN for
    ``unknown_limit`` seconds: its state cannot be read); return its final status.
    A job that waits its turn (QUEUED, ``waiting for ...``) says so once, in one line."""
    stream = stream or sys.stderr
    tty = stream.isatty()
    progress = Progress(job.log)
    shown, last_print, unknown_since, said_waiting = None, 0.0, None, False
    while True:
        progress.poll()
        current = status()
        if (
            current.state == "QUEUED"
            and (current.reason or "").startswith("waiting for")
            and not said_waiting
        ):
            echo(f"{job.id}: {current.reason}")
            said_waiting = True
        unknown_since = (unknown_since or time.monotonic()) if current.state == "UNKNOWN" else None
        if unknown_since is not None and time.monotonic() - unknown_since >= unknown_limit:
            if tty and shown:
                stream.write("\n")
            return JobStatus(
                current.job,
                current.state,
                f"{current.reason or 'its state cannot be read'} "
                f"(still so after {unknown_limit:.0f} s; llmb status {job.id} tells more later)",
                current.progress,
                current.exit,
            )
        if current.job.log != progress.log:  # a retry writes to a fresh run directory
            progress = Progress(current.job.log)
            progress.poll()
        line = progress.describe()
        if line and line != shown:
            if tty:
                stream.write(f"\r{job.id}: {line}\x1b[K")
                stream.flush()
                shown = line
            elif time.monotonic() - last_print >= 1.0:
                echo(f"{job.id}: {line}")
                shown, last_print = line, time.monotonic()
        if current.state in TERMINAL:
            progress.poll()
            if tty and shown:
                stream.write("\n")
            return current
        time.sleep(interval)


def borrowed_peak(result: dict) -> str | None:
    """For a run on a GPU type that takes another's peaks (gpus.yaml ``runs_recipes_of``: an H200 the
    H100's), which peak its MFU is against and where that figure is from; None otherwise."""
    from llmb.recipes.gpus import catalogue, peak_source

    gpu, dtype = result.get("gpu"), result.get("dtype") or "bf16"
    if result.get("mfu_pct") is None or gpu not in catalogue():
        return None
    source = peak_source(gpu, dtype)
    if source is None or source.of_gpu is None:
        return None
    return f"against the {dtype.upper()} peak {source.describe()}"


def figure_of(result: dict) -> str:
    """``; the h100's figure`` for a run on a GPU type that runs another's recipes (an H200), else ''."""
    from llmb.recipes.gpus import recipes_of

    gpu = result.get("gpu")
    table = recipes_of(gpu)
    return f"; the {table}'s figure" if gpu and table != gpu else ""


def _window_steps(window: str | None) -> int | None:
    """How many iterations a window (``35-44``) holds; None where it names none."""
    first, _, last = (window or "").partition("-")
    if not (first.isdigit() and last.isdigit()) or int(last) < int(first):
        return None
    return int(last) - int(first) + 1


def summary(status: JobStatus) -> str:
    """The run summary: window statistics, tokens/s, TFLOPS/GPU, MFU where a peak applies."""
    job = status.job
    lines = [f"{job.id}: {state_text(status.state, status.reason)}"]
    result = (status.exit or {}).get("result")
    preflight = (status.exit or {}).get("preflight")
    # llmb preflight's job: its verdict and report (llmb.preflight.job.finish_summary)
    if preflight:
        if preflight.get("error"):
            lines.append(f"  preflight   {preflight['error']}")
        else:
            flagged = ", ".join(preflight.get("exclude") or ()) or "none"
            verdict = str(preflight.get("verdict")).replace("_", " ")
            skipped = "; ".join(str(n) for n in preflight.get("not_applied") or ())
            lines.append(
                f"  preflight   {verdict}; flagged nodes: {flagged}"
                + (f"; no threshold applied for: {skipped}" if skipped else "")
            )
            lines.append(f"  report      {preflight.get('report')}")
    elif result:

        def f(key: str, digits: int, suffix: str = "") -> str:
            value = result.get(key)
            return "-" if value is None else figure(value, digits, suffix)

        proxy = f" ({job.proxy} proxy: not compared with published numbers)" if job.proxy else ""
        lines.append(
            f"  result      {result['status']}{proxy}"
            + (f": {result['failure_reason']}" if result.get("failure_reason") else "")
        )
        if result.get("samples_in_window"):
            count, held = result["samples_in_window"], _window_steps(result["window"])
            # a mean over part of the window is said to be one, with its count beside it
            partial = (
                f" of only {count} of the window's {held} steps"
                if held is not None and count < held
                else ""
            )
            lines += [
                f"  window      iterations {result['window']} ({count} samples)",
                f"  step time   {f('time_mean_ms', 1)} ms mean{partial}, "
                f"{f('time_std_dev_ms', 1)} ms std",
                f"  throughput  {f('tokens_per_s', 0)} tokens/s, {f('tflops_per_gpu_mean', 2)} TFLOP/s/GPU "
                f"({tflops_source_words(result.get('tflops_source'))})",
                "  MFU         "
                + (
                    f("mfu_pct", 2, "%")
                    if result.get("mfu_pct") is not None
                    else "- (no GPU peak applies)"
                )
                + (
                    f" ({f('mfu_bf16_pct', 2, '%')} of the BF16 peak)"
                    if result.get("dtype") != "bf16" and result.get("mfu_bf16_pct") is not None
                    else ""
                ),
            ]
            if (whose := borrowed_peak(result)) is not None:  # an H200's MFU: the H100's peak
                lines.append(f"              {whose}")
            if not job.proxy:  # the time a scaled-down model would take to train means nothing
                lines.append(f"  1T tokens   {f('days_to_train_1t', 2)} days")
        else:
            lines.append(f"  window      iterations {result['window']}: no samples")
        if result.get("reference_step_time_ms") is not None:
            lines.append(
                f"  published   {f('reference_step_time_ms', 1)} ms per step "
                f"({f('reference_delta_pct', 1, '%')} difference{figure_of(result)})"
            )
        if (
            result.get("checkpoint_save_s") is not None
            or result.get("checkpoint_load_s") is not None
        ):
            lines.append(
                f"  checkpoint  save {f('checkpoint_save_s', 3)} s, load {f('checkpoint_load_s', 3)} s"
            )
    elif status.state in TERMINAL:
        lines.append("  (no parsed result: see the log)")
    from llmb.terminal import fit_text

    return fit_text("\n".join(lines) + "\n" + where_lines(job))


def where_lines(job: Job) -> str:
    """Where a job's files are, for a person: its run directory once, from $LLMB_INSTALL or ~ (whole: on a
    narrow terminal ``fit_text`` wraps it after a ``/``, so it can still be copied), and the command that
    prints its log (``--json`` has both paths)."""
    from llmb.paths import shown_path

    return f"  run dir     {shown_path(job.run_dir)}\n  log         llmb logs {job.id}"
