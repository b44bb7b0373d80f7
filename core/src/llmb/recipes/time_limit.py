"""The time limit a cluster job gets when none is asked for: derived from the run, so that a hung job
gives its nodes back instead of holding them until the partition's limit.

    limit = start-up + MARGIN x steps x expected step time, rounded up to 5 minutes, at least FLOOR

The expected step time is the published one for the configuration (the recipe's, else another public
document's for the same configuration); where none is published (another GPU count, an overridden
layout), an estimate: the model FLOPs of a step over the GPUs' dense peak at ASSUMED_MFU_PCT, below the
published MFUs (35-60%) so that the estimate errs long. The start-up
allows for the container, the framework's imports, NCCL's set-up and the model's build and first
steps, which grow with the model: STARTUP_MINUTES plus a minute per PARAMS_PER_MINUTE parameters.

The anchors: Megatron-Bridge's performance launcher defaults to 30 minutes (``--time_limit 00:30:00``,
``scripts/performance``), and NVIDIA's LLM Benchmarking Collection's Llama 3.1 ``launch.sh`` gives 8B
and 70B 30 minutes and 405B two hours; this rule gives 8B and 70B 30-60 minutes and 405B 85-115.
``--time-limit``, ``SBATCH_TIMELIMIT`` and the cluster file's ``slurm.time`` replace it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FLOOR_MINUTES = 30
MARGIN = 2.0
STARTUP_MINUTES = 10
PARAMS_PER_MINUTE = 10e9
ASSUMED_MFU_PCT = 30.0
ROUND_MINUTES = 5


@dataclass(frozen=True)
class TimeLimit:
    """A derived time limit and how it was derived, in words a plan shows."""

    minutes: int
    steps: int
    step_s: float | None  # the expected step time, None when neither published nor estimable
    step_source: str  # "published" | "estimate" | "none"
    startup_minutes: float

    @property
    def slurm(self) -> str:
        """Slurm's ``HH:MM:SS`` (days as hours: 1-00:00:00 is 24:00:00)."""
        return f"{self.minutes // 60:02d}:{self.minutes % 60:02d}:00"

    def describe(self) -> str:
        if self.step_s is None:
            how = f"no step time is published or estimable: {FLOOR_MINUTES} min, the least"
        else:
            what = (
                self.step_source
                if self.step_source != "estimate"
                else f"estimated at {ASSUMED_MFU_PCT:g}% MFU"
            )
            how = (
                f"{self.startup_minutes:.0f} min start-up (container, imports, NCCL, the model's build; "
                f"larger for larger models) + {self.steps} steps x {self.step_s:.3g} s ({what}), "
                f"x {MARGIN:g} for steps slower than that, at least {FLOOR_MINUTES} min"
            )
        return f"{self.slurm} on a cluster ({how}; --time-limit or slurm.time replaces it)"

    def as_dict(self) -> dict:
        return {
            "slurm": self.slurm,
            "minutes": self.minutes,
            "steps": self.steps,
            "step_s": self.step_s,
            "step_source": self.step_source,
            "startup_minutes": round(self.startup_minutes, 1),
            "margin": MARGIN,
            "floor_minutes": FLOOR_MINUTES,
        }


def estimated_step_s(
    flops_per_sample: float | None, gbs: int, gpus: int, peak_tflops: float | None
) -> float | None:
    """A step's time at ASSUMED_MFU_PCT of the GPUs' dense peak; None without FLOPs or a peak."""
    if not flops_per_sample or not peak_tflops or gpus <= 0:
        return None
    return flops_per_sample * gbs / (gpus * peak_tflops * 1e12 * ASSUMED_MFU_PCT / 100.0)


def derive(steps: int, step_s: float | None, step_source: str, params: float | None) -> TimeLimit:
    """The limit for ``steps`` steps of ``step_s`` seconds by a model of ``params`` parameters."""
    startup = STARTUP_MINUTES + (params or 0) / PARAMS_PER_MINUTE
    if step_s is None:
        return TimeLimit(FLOOR_MINUTES, steps, None, "none", startup)
    minutes = startup + MARGIN * steps * step_s / 60.0
    minutes = max(FLOOR_MINUTES, ROUND_MINUTES * math.ceil(minutes / ROUND_MINUTES))
    return TimeLimit(int(minutes), steps, step_s, step_source, startup)


def slurm_minutes(text: str | None) -> int | None:
    """Slurm's time forms (``30``, ``30:00``, ``2:00:00``, ``1-12``, ``1-12:30``, ``1-12:30:00``) in whole
    minutes, seconds rounded up; None for no limit (``UNLIMITED``, ``INFINITE``, none) or a form Slurm
    does not take."""
    if not text or not isinstance(text, str):
        return None
    days, dash, rest = text.strip().partition("-")
    if not dash:
        days, rest = "0", days
    parts = rest.split(":")
    if not days.isdigit() or not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3:
        return None
    numbers = [int(p) for p in parts]
    if dash:  # days-hours[:minutes[:seconds]]
        hours, minutes, seconds = (numbers + [0, 0])[:3]
    elif len(numbers) == 3:  # hours:minutes:seconds
        hours, minutes, seconds = numbers
    else:  # minutes[:seconds]
        hours, minutes, seconds = 0, numbers[0], numbers[1] if len(numbers) == 2 else 0
    return int(days) * 24 * 60 + hours * 60 + minutes + math.ceil(seconds / 60)
