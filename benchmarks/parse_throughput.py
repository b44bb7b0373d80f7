#!/usr/bin/env python3
"""Log-parsing throughput and memory: generates logs, parses each in a fresh
process with every registered parser, prints MB/s and peak RSS.

    .venv/bin/python benchmarks/parse_throughput.py [--trace-gb 1.0] [--keep DIR]

Logs: a 1 GB (by default) Megatron-Bridge log whose first five steps carry an
NCCL collective trace, a 200 MB log of noise around 50 iterations, a NeMo 2
log and a normal 50-iteration Megatron-Bridge log. Aims: at least 300 MB/s
on one core, under 200 MB peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import loggen  # noqa: E402

CHILD = r"""
import json, resource, sys, time
from llmb.plugins.host import PluginHost
from llmb.results.scan import scan
host = PluginHost()
parsers = host.log_parsers()
start = time.perf_counter()
report = scan(sys.argv[1], parsers)
elapsed = time.perf_counter() - start
nccl = report.findings.get("nccl") or ()
iterations = report.findings.get("megatron_bridge") or report.findings.get("nemo2")
print(json.dumps({
    "seconds": elapsed, "bytes": report.bytes_read,
    "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    "nccl_calls": sum(c.calls for c in nccl),
    "iterations": len(iterations.samples) if iterations else 0,
}))
"""


def make_logs(directory: Path, trace_gb: float) -> dict[str, Path]:
    logs = {}
    logs["NCCL trace + 50 iterations"] = directory / "trace.log"
    loggen.write_large_trace(logs["NCCL trace + 50 iterations"], int(trace_gb * 1e9))
    noise = directory / "noise.log"
    with open(noise, "w") as handle:
        line = "[NeMo W 2026-11-21 10:00:00 nemo_logging:361] a warning that says nothing useful " * 2 + "\n"
        lines = list(loggen.megatron_bridge_lines(range(1, 51)))
        per_gap = int(200e6 / len(line) / len(lines))
        for item in lines:
            handle.write(line * per_gap)
            handle.write(item + "\n")
    logs["200 MB of noise + 50 iterations"] = noise
    logs["NeMo 2, 50 iterations"] = directory / "nemo.log"
    loggen.write_lines(logs["NeMo 2, 50 iterations"], loggen.nemo2_lines(range(0, 50)))
    logs["Megatron-Bridge, 50 iterations"] = directory / "mb.log"
    loggen.write_lines(logs["Megatron-Bridge, 50 iterations"], loggen.megatron_bridge_lines(range(1, 51)))
    return logs


def measure(path: Path) -> dict:
    # One core: the parse is single-threaded; taskset pins it where available.
    command = [sys.executable, "-c", CHILD, str(path)]
    if os.path.exists("/usr/bin/taskset"):
        command = ["/usr/bin/taskset", "-c", "0", *command]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-gb", type=float, default=1.0, help="size of the NCCL-trace log (default 1 GB)")
    parser.add_argument("--keep", type=Path, help="write the logs here and keep them")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        directory = args.keep or Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        logs = make_logs(directory, args.trace_gb)
        print(f"generated {len(logs)} logs in {time.perf_counter() - started:.1f} s\n")
        rows = []
        for name, path in logs.items():
            m = measure(path)
            rate = m["bytes"] / m["seconds"] / 1e6 if m["seconds"] else float("inf")
            rows.append((name, m["bytes"] / 1e6, m["seconds"], rate, m["rss_kb"] / 1024, m["iterations"],
                         m["nccl_calls"]))
        header = ("log", "MB", "seconds", "MB/s", "peak RSS MB", "iterations", "NCCL calls")
        widths = [max(len(str(h)), 34 if i == 0 else 10) for i, h in enumerate(header)]
        print("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths, strict=True))))
        for name, mb, seconds, rate, rss, iterations, calls in rows:
            cells = [name, f"{mb:,.1f}", f"{seconds:.2f}", f"{rate:,.0f}", f"{rss:,.0f}", str(iterations), f"{calls:,}"]
            print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))))
        print("\naims: >= 300 MB/s on one core, < 200 MB peak RSS "
              f"(python {sys.version.split()[0]}, every registered parser reading every log)")


if __name__ == "__main__":
    main()
