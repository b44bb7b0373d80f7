#!/usr/bin/env python3
"""Wall time of each workload's tiny proxy, end to end through the CLI, optionally beside another source tree.

    .venv/bin/python benchmarks/proxy_wall_time.py [--rows tests|all] [--repeats 1] [--before DIR]

Each row is one ``llmb run ... --gpus 2 --proxy tiny --json`` in a fresh
``LLMB_INSTALL`` (the commands ``tests/test_local_runs.py`` runs, plus, with
``--rows all``, the README's demo and the largest-GA row, Llama 3.1 405B on
H100 at GA 64 per rank), the default 50 steps. Columns: the command's wall
time (from the process start to its summary), the steps, the mean of the
logged step times over all steps, and the time before the first step
(start-up: processes, imports, model build) as wall minus the logged steps.

``--before DIR``: a copy of the sources to compare with (a directory holding
``core/src``, ``plugins/*/src`` and ``backends/*/src``, e.g. a ``git
worktree`` of the commit before a change): each row runs with those sources
first (put ahead of the installed ones on ``PYTHONPATH``), then with this
checkout's, back to back, so both see the same machine load; the table shows
both and the ratio. ``nproc`` and the load average are printed at the start
and after every row. Speed is never asserted by a test; this script only prints.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import llmb_executable

# label, the arguments of `llmb run` before --gpus 2 --proxy tiny
TEST_ROWS = [
    ("llama31 8b b200 fp8", ["llama31", "--size", "8b", "--gpu", "b200", "--dtype", "fp8"]),
    ("llama4 400b gb200 bf16", ["llama4", "--gpu", "gb200", "--dtype", "bf16"]),
    ("nemotron4 340b h100 bf16", ["nemotron4", "--gpu", "h100", "--dtype", "bf16"]),
    ("nemotronh 56b h100 fp8", ["nemotronh"]),
]
EXTRA_ROWS = [
    (
        "llama31 8b h100 bf16 (demo)",
        ["llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16"],
    ),
    ("llama31 405b h100 fp8", ["llama31", "--size", "405b", "--gpu", "h100", "--dtype", "fp8"]),
]
STEP_MS = re.compile(r"elapsed time per iteration \(ms\): ([0-9.]+)")
GA = re.compile(r"MBS (\d+) x GA (\d+)")


def source_path(tree: Path) -> str:
    """PYTHONPATH entries that put ``tree``'s packages ahead of the installed (editable) ones."""
    entries = [
        tree / "core" / "src",
        *sorted(tree.glob("plugins/*/src")),
        *sorted(tree.glob("backends/*/src")),
    ]
    missing = [str(e) for e in entries[:1] if not e.is_dir()]
    if missing:
        sys.exit(f"--before {tree}: no {missing[0]}")
    return os.pathsep.join(str(e) for e in entries)


def load() -> str:
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


def run_row(args: list[str], pythonpath: str | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="llmb-proxy-bench-") as install:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("LLMB_INSTALL", "PYTHONPATH", "OMP_NUM_THREADS")
        }
        env.update(LLMB_INSTALL=install, LLMB_NO_CACHE="1")
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        begin = time.perf_counter()
        proc = subprocess.run(
            [llmb_executable(), "run", *args, "--gpus", "2", "--proxy", "tiny", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=3600,
        )
        wall = time.perf_counter() - begin
        if proc.returncode != 0:
            return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["failed"]}
        summary = json.loads(proc.stdout)
        log = Path(summary["log"]).read_text()
    steps = [float(ms) / 1000 for ms in STEP_MS.findall(log)]
    layout = GA.search(log)
    return {
        "wall": wall,
        "steps": len(steps),
        "step": statistics.mean(steps) if steps else float("nan"),
        "startup": wall - sum(steps),
        "ga": int(layout.group(2)) if layout else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows",
        choices=("tests", "all"),
        default="tests",
        help="the test suite's four commands, or those plus the demo and the largest GA",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="runs of each row (and each source tree)"
    )
    parser.add_argument(
        "--before", type=Path, help="a source tree to run first, for a before/after table"
    )
    parser.add_argument("--only", help="run only the rows whose label contains this")
    args = parser.parse_args()
    before = source_path(args.before.resolve()) if args.before else None
    rows = TEST_ROWS + (EXTRA_ROWS if args.rows == "all" else [])
    rows = [row for row in rows if not args.only or args.only in row[0]]
    print(
        f"nproc {os.cpu_count()} (affinity {len(os.sched_getaffinity(0))}), load average {load()}; "
        f"each row: llmb run ... --gpus 2 --proxy tiny, default steps"
    )
    header = ("row", "GA", "tree", "steps", "wall s", "s/step", "start-up s", "after/before")
    widths = (28, 3, 6, 5, 7, 7, 10, 12)
    print(
        "  ".join(
            f"{h:>{w}}" if i else f"{h:<{w}}"
            for i, (h, w) in enumerate(zip(header, widths, strict=True))
        )
    )
    for label, row_args in rows:
        for _ in range(args.repeats):
            results = {}
            for tree, path in ((("before", before),) if before else ()) + (
                ("after" if before else "this", None),
            ):
                results[tree] = result = run_row(row_args, path)
                if "error" in result:
                    print(f"{label:<28}  {tree}: failed: {result['error'][0]}", flush=True)
                    continue
                ratio = ""
                if tree == "after" and "wall" in results.get("before", {}):
                    ratio = f"{result['wall'] / results['before']['wall']:.2f}x"
                cells = (
                    label,
                    result["ga"] or "-",
                    tree,
                    result["steps"],
                    f"{result['wall']:.1f}",
                    f"{result['step']:.3f}",
                    f"{result['startup']:.1f}",
                    ratio,
                )
                print(
                    "  ".join(
                        f"{c:>{w}}" if i else f"{c:<{w}}"
                        for i, (c, w) in enumerate(zip(cells, widths, strict=True))
                    ),
                    flush=True,
                )
            print(f"{'':28}  load average {load()}", flush=True)


if __name__ == "__main__":
    main()
