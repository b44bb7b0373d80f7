"""Profiling a run: what each profiler contributes (``llmb_profile``).

* nsys, when it is installed and the run is on GPUs: every rank runs under
  ``nsys profile --capture-range=cudaProfilerApi``, and the training loop
  opens and closes the capture at the window's steps; ``--gpu-metrics``
  adds GPU metrics. Reports land in ``nsys_profile/`` as the seeds' do.
* torch.profiler otherwise: a Chrome trace per rank in ``torch_profile/``.
* NCCL trace: ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL`` and, as the seeds
  do, only the first five steps (the log grows past a gigabyte).

The window defaults to the seeds' steps 45-50; ``PROFILE_START_STEP`` /
``PROFILE_STOP_STEP`` (what the launch scripts read) and the
``RUN_CONF_PROFILE_*`` spellings (what the replaced tool's README documents)
are honoured, flags first. A run whose steps are asked for (``--steps``,
``--set steps``) runs them on either engine, and its window lies within
them (``fit_window``): the default window moves to the run's last steps,
with a warning; an asked window that ends after the last step is refused.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

from llmb import hookimpl
from llmb.errors import UsageError
from llmb.recipes.records import PROFILE_WINDOW as DEFAULT_WINDOW  # the seeds' steps 45-50


@dataclass(frozen=True)
class ProfileRequest:
    profile: bool
    gpu_metrics: bool
    nccl_trace: bool
    start: int
    stop: int
    device: str
    job_id: str
    inner_dir: str


@dataclass(frozen=True)
class ProfileContribution:
    name: str
    wrapper: tuple[str, ...] = ()  # "{rank}" is replaced per rank
    env: dict = field(default_factory=dict)
    max_steps: int | None = None
    engine: dict | None = None  # {"kind": "nsys"|"torch", "start", "stop", "dir"?}
    note: str | None = None


def asked_window(
    start: int | None, stop: int | None, environ: dict | None = None
) -> tuple[int, int] | None:
    """The window the user asked for (flags, then variables), or None when nothing was
    asked: each workload then profiles its seed's default window."""
    env = os.environ if environ is None else environ
    names = (
        "PROFILE_START_STEP",
        "RUN_CONF_PROFILE_START_STEP",
        "PROFILE_STOP_STEP",
        "RUN_CONF_PROFILE_STOP_STEP",
    )
    if start is None and stop is None and not any(env.get(n) for n in names):
        return None
    return profile_window(start, stop, env)


def profile_window(
    start: int | None, stop: int | None, environ: dict | None = None
) -> tuple[int, int]:
    env = os.environ if environ is None else environ

    def pick(flag: int | None, *names: str, default: int) -> int:
        if flag is not None:
            return flag
        for name in names:
            if env.get(name):
                try:
                    return int(env[name])
                except ValueError:
                    raise UsageError(f"{name}={env[name]!r} is not a step number.") from None
        return default

    first = pick(
        start, "PROFILE_START_STEP", "RUN_CONF_PROFILE_START_STEP", default=DEFAULT_WINDOW[0]
    )
    last = pick(stop, "PROFILE_STOP_STEP", "RUN_CONF_PROFILE_STOP_STEP", default=DEFAULT_WINDOW[1])
    if not 1 <= first <= last:
        raise UsageError(f"profile window {first}-{last}: expected 1 <= start <= stop.")
    return first, last


def fit_window(
    window: tuple[int, int], asked: bool, steps: int | None
) -> tuple[tuple[int, int], str | None]:
    """The profile window of a run of ``steps`` steps asked for (``--steps``, ``--set steps``;
    None: not asked, the run's steps follow its window, as the published recipes' profiled runs
    do), and a note when it moved. The window must end by the run's last step: one asked for
    (``--profile-start``/``--profile-stop`` or their variables) that does not is refused, saying
    why; the default one (the seed's, e.g. 45-50) moves to the run's last steps, keeping its length.
    Both engines take their window from here, before anything is submitted."""
    first, last = window
    if steps is None or last <= steps:
        return window, None
    moved = (max(1, steps - (last - first)), steps)
    if asked:
        start = first if first <= steps else moved[0]
        raise UsageError(
            f"the profile window {first}-{last} (--profile-start/--profile-stop, or "
            f"PROFILE_START_STEP/PROFILE_STOP_STEP) ends after the run's last step: the run asked "
            f"for (--steps or --set steps) has steps 1-{steps}. Profile steps within them (e.g. "
            f"--profile-start {start} --profile-stop {steps}), or run at least {last} steps."
        )
    return moved, (
        f"--profile on a run of {steps} steps: the profile window moves from the published recipe's "
        f"steps {first}-{last}, past the run's end, to steps {moved[0]}-{moved[1]} (its last "
        f"{moved[1] - moved[0] + 1}); --profile-start/--profile-stop choose others."
    )


@hookimpl
def llmb_profile(request: ProfileRequest) -> ProfileContribution | None:
    if not request.profile:
        return None
    nsys = shutil.which("nsys") if request.device == "cuda" else None
    if nsys:
        output = os.path.join(
            request.inner_dir, "nsys_profile", f"profile_{request.job_id}_0_{{rank}}"
        )
        wrapper = (
            nsys,
            "profile",
            "--capture-range=cudaProfilerApi",
            "--capture-range-end=stop",
            "--trace=cuda,nvtx,osrt",
            "--force-overwrite=true",
            "-o",
            output,
        )
        if request.gpu_metrics:
            wrapper += ("--gpu-metrics-devices=all",)
        return ProfileContribution(
            name="nsys",
            wrapper=wrapper,
            engine={"kind": "nsys", "start": request.start, "stop": request.stop},
        )
    reason = "nsys is not installed" if request.device == "cuda" else "the run is on CPU"
    note = f"{reason}: a torch.profiler trace per rank goes to torch_profile/"
    if request.gpu_metrics:
        note += " (--gpu-metrics needs nsys; ignored)"
    return ProfileContribution(
        name="torch_profiler",
        note=note,
        engine={
            "kind": "torch",
            "start": request.start,
            "stop": request.stop,
            "dir": os.path.join(request.inner_dir, "torch_profile"),
        },
    )


@hookimpl(specname="llmb_profile")
def nccl_trace(request: ProfileRequest) -> ProfileContribution | None:
    if not request.nccl_trace:
        return None
    return ProfileContribution(
        name="nccl_trace",
        env={"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "COLL"},
        max_steps=5,
        note=None
        if request.device == "cuda"
        else "NCCL trace variables are set, but a CPU run uses gloo, not NCCL",
    )
