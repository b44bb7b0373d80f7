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
