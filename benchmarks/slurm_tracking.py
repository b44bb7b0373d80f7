#!/usr/bin/env python3
"""Slurm tracking cost: Slurm calls per ``llmb status`` poll, and submit rate.

    .venv/bin/python benchmarks/slurm_tracking.py [--jobs 1 8 64] [--polls 5]

Starts the test suite's private Slurm (tests/private_slurm.py: two emulated
nodes on this host, no accounting; needs slurm-wlm and munge) unless
SLURM_CONF names a cluster already. Jobs are real ``llmb run --backend slurm
--bare --detach`` submissions of the Llama 3.1 tiny proxy, held
(``ADDITIONAL_SLURM_PARAMS=hold``) so they cost the machine nothing while
tracked; every Slurm command goes through a counting wrapper on PATH. For
each job count: submit time and rate, then the Slurm calls and the wall time
of one ``llmb status --all`` over all of them (median of --polls), then the
same once they are cancelled (ended jobs are finished once and then cost
nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from private_slurm import PrivateSlurm, counting_shims  # noqa: E402

RUN = [
    "run",
    "llama31",
    "--size",
    "8b",
    "--gpu",
    "h100",
    "--dtype",
    "bf16",
    "--proxy",
    "tiny",
    "--gpus",
    "1",
    "--backend",
    "slurm",
    "--bare",
    "--detach",
    "--json",
]


def llmb(*args: str, env: dict[str, str]) -> str:
    exe = Path(sys.executable).with_name("llmb")
    result = subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"llmb {' '.join(args)} failed: {result.stderr[-2000:]}")
    return result.stdout


def poll(env: dict[str, str], log: Path, polls: int) -> tuple[Counter, float]:
    times, counts = [], Counter()
    for _ in range(polls):
        log.write_text("")
        start = time.perf_counter()
        llmb("status", "--all", "--json", env=env)
        times.append(time.perf_counter() - start)
        counts = Counter(log.read_text().split())  # the same every poll; keep the last
    return counts, statistics.median(times)


def measure(jobs: int, polls: int, base_env: dict[str, str], work: Path) -> dict:
    install = work / f"install-{jobs}"
    log = counting_shims(work / f"shims-{jobs}")
    env = {
        **base_env,
        "LLMB_INSTALL": str(install),
        "PATH": f"{log.parent}:{base_env['PATH']}",
        "ADDITIONAL_SLURM_PARAMS": "hold",
        "LLMB_LOG_FORMAT": "json",
    }
    start = time.perf_counter()
    ids = [json.loads(llmb(*RUN, env=env))["job_id"] for _ in range(jobs)]
    submit_s = time.perf_counter() - start
    live_calls, live_s = poll(env, log, polls)
    slurm_ids = [
        json.loads((install / "jobs" / i / "job.json").read_text())["details"]["attempts"][-1][
            "slurm_id"
        ]
        for i in ids
    ]
    subprocess.run(["scancel", *slurm_ids], check=True, env=env)
    log.write_text("")
    llmb("status", "--all", "--json", env=env)  # finishes the cancelled jobs (one squeue for all)
    finishing = Counter(log.read_text().split())
    ended_calls, ended_s = poll(env, log, polls)
    return {
        "jobs": jobs,
        "submit_s": submit_s,
        "live": live_calls,
        "live_s": live_s,
        "finishing": finishing,
        "ended": ended_calls,
        "ended_s": ended_s,
    }


def calls(counter: Counter) -> str:
    return " ".join(f"{k} {v}" for k, v in sorted(counter.items())) or "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--polls", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="llmb-slurm-bench-"))
    cluster = None
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("SBATCH_") and k != "LLMB_BACKEND"
    }
    if "SLURM_CONF" not in env:
        cluster = PrivateSlurm(work / "slurm").up()
        env.update(cluster.env())
    try:
        rows = [measure(n, args.polls, env, work) for n in args.jobs]
    finally:
        if cluster:
            cluster.down()
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"llmb status --all over N held Slurm jobs ({'private two-node Slurm' if cluster else env['SLURM_CONF']}), "
        f"median of {args.polls} polls"
    )
    header = (
        f"{'N':>4}  {'submit s':>9}  {'jobs/s':>7}  {'calls per poll (live)':<24}  {'poll s':>7}  "
        f"{'finishing poll':<22}  {'calls per poll (ended)':<22}  {'poll s':>7}"
    )
    print(header)
    for r in rows:
        print(
            f"{r['jobs']:>4}  {r['submit_s']:9.2f}  {r['jobs'] / r['submit_s']:7.2f}  {calls(r['live']):<24}  "
            f"{r['live_s']:7.3f}  {calls(r['finishing']):<22}  {calls(r['ended']):<22}  {r['ended_s']:7.3f}"
        )
    print(f"\npython {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
