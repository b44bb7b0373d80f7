#!/usr/bin/env python3
"""llmb results, report and archive over an install of many runs: wall time and peak memory.

    .venv/bin/python benchmarks/results_at_scale.py [--runs 10000] [--source RUN_DIR] [--keep DIR]

Builds an install as users' installs grow: one real run (a tiny-proxy
``llmb run llama31 --size 8b --gpu h100 --dtype bf16 --gpus 1 --proxy tiny``,
about 20 s here, or the run directory --source names) and --runs - 1 more run
directories beside it whose files are hard links of its files. Then times,
each as its own process, with its peak resident memory (the kernel's
ru_maxrss of that process):

    first scan     llmb results --format json      (no results database yet)
    cached scan    llmb results --format json      (every log's row in the database)
    --from-db      llmb results --from-db --format json
    report         llmb report --out DIR
    archive        llmb archive --output FILE

The goals (issue 42): the first scan under 10 s and 200 MB at 10,000 runs, the
cached one under 2 s. Timings are of this machine at this moment: a loaded
2-core box runs many times slower, so rerun before drawing a conclusion.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import llmb_executable  # noqa: E402

TRAIN = ["run", "llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "1"]
GOALS = {"first scan": (10.0, 200.0), "cached scan": (2.0, None)}


def measure(argv: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """Wall seconds, peak RSS in MB, exit status and the tail of stderr of one process."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        err.seek(0)
        tail = err.read()[-2000:].decode(errors="replace")
    return wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status), tail


def one_real_run(install: Path, env: dict[str, str]) -> Path:
    done = subprocess.run(
        [llmb_executable(), *TRAIN, "--proxy", "tiny", "--json"],
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        sys.exit(f"the proxy run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    run_dirs = [p.parent for p in (install / "workloads").rglob("recipe.json")]
    if len(run_dirs) != 1:
        sys.exit(f"expected one run directory under {install}, found {len(run_dirs)}")
    return run_dirs[0]


def grow(source: Path, experiment_dir: Path, runs: int) -> None:
    """``runs`` run directories in ``experiment_dir``: ``source`` (copied there) and hard links of it."""
    files = [p.relative_to(source) for p in source.rglob("*") if p.is_file()]
    stem = source.name.rsplit("_", 1)[0]
    first = experiment_dir / source.name
    if not first.exists():
        shutil.copytree(source, first)
    made = sum(1 for p in experiment_dir.iterdir() if p.is_dir())
    for index in range(made, runs):
        target = experiment_dir / f"{stem}_{1_700_000_000 + index}"
        for name in files:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            os.link(first / name, target / name)
        if index % 1000 == 0:
            print(f"  {index:,}/{runs:,} run directories", file=sys.stderr, end="\r", flush=True)
    print(" " * 40, file=sys.stderr, end="\r")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--source", type=Path, help="a run directory to copy (default: train one)")
    parser.add_argument("--keep", type=Path, help="build (or reuse) the install here and keep it")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    base = args.keep or Path(tempfile.mkdtemp(prefix="llmb-results-at-scale-"))
    install = base / "install"
    env = {**os.environ, "LLMB_INSTALL": str(install)}
    env.pop("LLMB_NO_CACHE", None)
    try:
        started = time.perf_counter()
        existing = [p.parent for p in (install / "workloads").rglob("recipe.json")][:1]
        if existing:
            source = existing[0]
        elif args.source:
            source = args.source.resolve()
        else:
            print("training one tiny proxy run (about 20 s) ...", file=sys.stderr)
            source = one_real_run(install, env)
        experiment_dir = install / "workloads" / "llama31" / "experiments" / source.parent.name
        experiment_dir.mkdir(parents=True, exist_ok=True)
        grow(source, experiment_dir, args.runs)
        print(
            f"install of {args.runs:,} runs ready in {time.perf_counter() - started:.0f} s: {install}"
        )

        (install / "results.sqlite").unlink(missing_ok=True)
        llmb = llmb_executable()
        steps = [
            ("first scan", [llmb, "results", "--format", "json"]),
            ("cached scan", [llmb, "results", "--format", "json"]),
            ("--from-db", [llmb, "results", "--from-db", "--format", "json"]),
            ("report", [llmb, "report", "--out", str(base / "report"), "--json"]),
            ("archive", [llmb, "archive", "--output", str(base / "runs.tar.gz"), "--json"]),
        ]
        rows = []
        for name, argv in steps:
            wall, rss, code, tail = measure(argv, env)
            if code:
                print(f"{name}: exit {code}\n{tail}", file=sys.stderr)
            goal_s, goal_mb = GOALS.get(name, (None, None))
            met = (goal_s is None or wall < goal_s) and (goal_mb is None or rss < goal_mb)
            goal = " and ".join(
                g for g in (goal_s and f"< {goal_s:g} s", goal_mb and f"< {goal_mb:g} MB") if g
            )
            rows.append((name, wall, rss, code, goal and f"{goal}: {'met' if met else 'MISSED'}"))
        print(f"\n{args.runs:,} runs, {os.cpu_count()} CPUs")
        print(f"{'step':<12} {'wall s':>8} {'peak MB':>8} {'exit':>4}  goal")
        for name, wall, rss, code, goal in rows:
            print(f"{name:<12} {wall:>8.2f} {rss:>8.0f} {code:>4}  {goal}")
        print(json.dumps({name: {"s": round(w, 2), "mb": round(r)} for name, w, r, *_ in rows}))
        return 0 if all(code == 0 for *_, code, _ in rows) else 1
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
