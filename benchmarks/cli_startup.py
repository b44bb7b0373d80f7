#!/usr/bin/env python3
"""CLI start-up: median wall time of `llmb list` (and friends) beside the bare
import of llmb's four runtime dependencies, and the ratio between them.

    .venv/bin/python benchmarks/cli_startup.py [--runs 21]

Each command runs as a fresh process, stdout to /dev/null, after two
warm-up rounds (which also write any missing bytecode). Rounds are interleaved (every command once per round) so
that load from other processes affects all commands alike. The target is a
ratio of 1.5 or less for `llmb list`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from _common import llmb_executable


def run_once(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
    return time.perf_counter() - start


def median_seconds(commands: dict[str, list[str]], runs: int) -> dict[str, float]:
    # Bytecode as users have it: pip compiles installed packages, and an
    # editable checkout compiles on first import. PYTHONDONTWRITEBYTECODE
    # (set in some sandboxes) would recompile llmb, and only llmb, every run.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["LLMB_LOG_FORMAT"] = "json"
    times: dict[str, list[float]] = {name: [] for name in commands}
    for round_ in range(runs + 2):
        for name, argv in commands.items():
            elapsed = run_once(argv, env)
            if round_ >= 2:  # two warm-up rounds
                times[name].append(elapsed)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()

    llmb = llmb_executable()
    baseline = [sys.executable, "-c", "import click, pluggy, yaml, structlog"]
    commands = {
        "python -c 'import click, pluggy, yaml, structlog'": baseline,
        "llmb --help": [llmb, "--help"],
        "llmb list": [llmb, "list"],
        "llmb list --json": [llmb, "list", "--json"],
        "llmb plan llama31 ... (design-card example)": [
            llmb,
            "plan",
            "llama31",
            "--size",
            "8b",
            "--gpu",
            "b200",
            "--dtype",
            "nvfp4",
            "--gpus",
            "8",
        ],
    }
    results = median_seconds(commands, args.runs)
    base = results[next(iter(results))]
    width = max(map(len, results))
    print(f"{'command':<{width}}  {'median ms':>9}  {'ratio':>5}")
    print(f"{'-' * width}  {'-' * 9}  {'-' * 5}")
    for name, seconds in results.items():
        print(f"{name:<{width}}  {seconds * 1000:9.1f}  {seconds / base:5.2f}")
    print(
        f"\n{args.runs} runs each, median; python {sys.version.split()[0]}; target: llmb list ratio <= 1.5"
    )


if __name__ == "__main__":
    main()
