"""Experiment directories in the seeds' layout, for tests."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path


def make_run(
    root: Path,
    experiment: str,
    lines: Iterable[str] | None,
    *,
    stamp: str = "1766132151",
    recipe: dict | None = None,
) -> Path:
    """``root/<exp>/<exp>_<stamp>/<exp>/log-<exp>.out`` (no log when ``lines`` is None);
    ``recipe`` is written as recipe.json in the run directory. Returns the run directory."""
    run_dir = root / experiment / f"{experiment}_{stamp}"
    inner = run_dir / experiment
    inner.mkdir(parents=True)
    if lines is not None:
        (inner / f"log-{experiment}.out").write_text("\n".join(lines) + "\n")
    if recipe is not None:
        (run_dir / "recipe.json").write_text(json.dumps(recipe))
    return run_dir


# Nemotron-H 56B FP8 on 256 GPUs, GBS 768: the NeMo 2 recipe's published configuration (its step time
# 15.892 s on H100s), the run a test gives a published comparison with.
NEMOTRONH_56B_256 = "pretrain_nemotronh_56b_fp8_gpus256_tp8_pp1_cp1_vpNone_mbs1_gbs768"


def nemotronh_56b_run(
    root: Path, step_s: float = 15.892, gpu: str = "h100", stamp: str = "1766132151"
) -> Path:
    """A run of that configuration at ``step_s`` a step (NeMo 2's log format, 50 steps, TFLOP/s left for
    llmb to compute), recorded as run on ``gpu``."""
    import loggen

    return make_run(
        root,
        NEMOTRONH_56B_256,
        loggen.nemo2_lines(
            range(50),
            step_s=dict.fromkeys(range(50), step_s),
            gbs=768,
            tflops=dict.fromkeys(range(50), 0.0),
        ),
        stamp=stamp,
        recipe={
            "workload": "nemotronh",
            "size": "56b",
            "gpu": gpu,
            "dtype": "fp8",
            "gpus": 256,
            "gbs": 768,
            "seq_len": 8192,
        },
    )
