#!/usr/bin/env python3
"""Log-parsing speed and memory, in two modes.

``logs`` (the default): generates logs, parses each in a fresh process with
every registered parser, prints MB/s and peak RSS.

    .venv/bin/python benchmarks/parse_throughput.py [logs] [--trace-gb 1.0] [--repeat 3] [--keep DIR]

Logs: a 1 GB (by default) Megatron-Bridge log whose first five steps carry an
NCCL collective trace, a 200 MB log of noise around 50 iterations, a NeMo 2
log and a normal 50-iteration Megatron-Bridge log. Each is parsed in one
process pinned to one core, and each of those large enough to be read in
segments (``scan``'s ``SEGMENTED_MIN``) again with as many processes as
``llmb results`` would use (``parallel_jobs()``: every CPU, at most 4), not
pinned: the row says how many, and which way it was read (a log whose
leading parsers take little of it, noise, is read whole all the same). The
best of ``--repeat`` runs is shown, with its CPU seconds (all processes).
Aims: at least 300 MB/s on one core, at least 500 MB/s for the NCCL trace
with two CPUs, under 200 MB peak RSS.

``tree``: llmb against the tool it replaces, NVIDIA's
``parse_train_timing_mbridge.sh``, on the same experiments tree in the same
run. The script is not part of llmb; take it from the public collection
(https://github.com/NVIDIA/dgxc-benchmarking, tag v26.05, commit
ef2f6c27bb281fcd1251474841a121885f289120, ``common/parse_train_timing_mbridge.sh``):

    git clone https://github.com/NVIDIA/dgxc-benchmarking /tmp/dgxc
    git -C /tmp/dgxc show v26.05:common/parse_train_timing_mbridge.sh > /tmp/parse_train_timing_mbridge.sh
    .venv/bin/python benchmarks/parse_throughput.py tree --bash-parser /tmp/parse_train_timing_mbridge.sh \
        [--tree-gb 1.0] [--small-runs 200] [--repeat 3] [--keep DIR]

(or set ``LLMB_BENCH_BASH_PARSER``). It needs bash, GNU awk (``match()``
with an array: mawk and busybox awk fail), grep, sed and find.

The tree (``loggen.write_experiments_tree``) is ``experiments/<exp>/
<exp>_<timestamp>/<exp>/log-<exp>_<jobid>_0.out``, about ``--tree-gb``:
60 % in six runs whose first steps carry an NCCL collective trace, 20 % in
two runs of noise around their iterations, 20 % in ``--small-runs`` runs of
warnings around their iterations (one in ten incomplete, one in ten with a
nan grad norm, one in ten dead of CUDA out of memory before its first step).

Timed: the bash script (``--format=csv``), and a cold ``llmb results
--rescan TREE --format csv --full-names``: a fresh process and a fresh
results database (a new temporary ``LLMB_INSTALL``) each time. The page cache
is the same for both: each runs once to warm it (those outputs are the ones
checked for agreement), then each runs ``--repeat`` times, alternating. The
table gives the best and the median wall time, MB/s at the best, the CPU
time (user and system, children included) of the fastest run, the peak RSS
of the largest single process (``wait4``'s ``ru_maxrss``, over all runs), the
peak of the summed RSS of all the tool's processes (sampled every 20 ms from
/proc in the warm-up run: sampling would take CPU from a timed one), and the
speed-up of llmb over bash. Aims: llmb at least 10x faster, under 200 MB.
``--llmb PATH`` times another llmb (a script that runs another checkout's),
to compare versions against the same bash parser. Measured numbers, the
command and the machine: docs/results.md, "Speed".
The agreement check compares each run's status (Success / Invalid / Failed
against llmb's success / invalid_grad_norm / anything else), time mean and
standard deviation, TFLOPS mean and standard deviation and, for a Failed
run, the last iteration, and prints every difference.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import loggen  # noqa: E402
from cli_startup import llmb_executable  # noqa: E402

CHILD = r"""
import json, resource, sys, time
from llmb.plugins.host import PluginHost
from llmb.results import scan as scanning
host = PluginHost()
parsers = host.log_parsers()
jobs = int(sys.argv[2])
segmented = []
real = scanning._scan_in_segments
def spy(*args):
    report = real(*args)
    segmented.append(report is not None)
    return report
scanning._scan_in_segments = spy
def cpu():
    return sum(getattr(resource.getrusage(who), field) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for field in ("ru_utime", "ru_stime"))
cpu_before = cpu()
start = time.perf_counter()
report = scanning.scan(sys.argv[1], parsers, jobs=jobs)
elapsed = time.perf_counter() - start
nccl = report.findings.get("nccl") or ()
iterations = report.findings.get("megatron_bridge") or report.findings.get("nemo2")
print(json.dumps({
    "seconds": elapsed, "bytes": report.bytes_read, "cpu": cpu() - cpu_before,
    "segmented": any(segmented),
    "rss_kb": max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss),
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
        line = (
            "[NeMo W 2026-11-21 10:00:00 nemo_logging:361] a warning that says nothing useful " * 2
            + "\n"
        )
        lines = list(loggen.megatron_bridge_lines(range(1, 51)))
        per_gap = int(200e6 / len(line) / len(lines))
        for item in lines:
            handle.write(line * per_gap)
            handle.write(item + "\n")
    logs["200 MB of noise + 50 iterations"] = noise
    logs["NeMo 2, 50 iterations"] = directory / "nemo.log"
    loggen.write_lines(logs["NeMo 2, 50 iterations"], loggen.nemo2_lines(range(0, 50)))
    logs["Megatron-Bridge, 50 iterations"] = directory / "mb.log"
    loggen.write_lines(
        logs["Megatron-Bridge, 50 iterations"], loggen.megatron_bridge_lines(range(1, 51))
    )
    return logs


def measure(path: Path, jobs: int = 1) -> dict:
    """One parse of ``path`` in a fresh process; with ``jobs`` 1 pinned to one
    core (taskset, where there is one), else on every CPU with ``jobs``
    processes that may read it in segments."""
    command = [sys.executable, "-c", CHILD, str(path), str(jobs)]
    if jobs == 1 and os.path.exists("/usr/bin/taskset"):
        command = ["/usr/bin/taskset", "-c", "0", *command]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def logs_mode(args) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        directory = args.keep or Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        logs = make_logs(directory, args.trace_gb)
        print(f"generated {len(logs)} logs in {time.perf_counter() - started:.1f} s\n")
        from llmb.results.collect import parallel_jobs
        from llmb.results.scan import SEGMENTED_MIN

        jobs = parallel_jobs()
        rows = []
        for name, path in logs.items():
            ways = [1] + ([jobs] if jobs > 1 and path.stat().st_size >= SEGMENTED_MIN else [])
            for way in ways:
                runs = [measure(path, way) for _ in range(max(1, args.repeat))]
                m = min(runs, key=lambda run: run["seconds"])
                rate = m["bytes"] / m["seconds"] / 1e6 if m["seconds"] else float("inf")
                how = (
                    "1 core"
                    if way == 1
                    else f"{way} processes, " + ("in segments" if m["segmented"] else "whole")
                )
                rows.append(
                    (
                        f"{name} ({how})",
                        m["bytes"] / 1e6,
                        m["seconds"],
                        rate,
                        m["cpu"],
                        max(run["rss_kb"] for run in runs) / 1024,
                        m["iterations"],
                        m["nccl_calls"],
                    )
                )
        header = (
            "log",
            "MB",
            "seconds",
            "MB/s",
            "CPU s",
            "peak RSS MB",
            "iterations",
            "NCCL calls",
        )
        widths = [max(len(str(h)), 62 if i == 0 else 8) for i, h in enumerate(header)]
        print(
            "  ".join(
                h.ljust(w) if i == 0 else h.rjust(w)
                for i, (h, w) in enumerate(zip(header, widths, strict=True))
            )
        )
        for name, mb, seconds, rate, cpu, rss, iterations, calls in rows:
            cells = [
                name,
                f"{mb:,.1f}",
                f"{seconds:.2f}",
                f"{rate:,.0f}",
                f"{cpu:.2f}",
                f"{rss:,.0f}",
                str(iterations),
                f"{calls:,}",
            ]
            print(
                "  ".join(
                    c.ljust(w) if i == 0 else c.rjust(w)
                    for i, (c, w) in enumerate(zip(cells, widths, strict=True))
                )
            )
        print(
            f"\nbest of {max(1, args.repeat)} runs each; CPU s: user and system time of all its processes; "
            "peak RSS: the largest process's, over all runs"
        )
        print(
            "aims: >= 300 MB/s on one core, >= 500 MB/s for the NCCL trace with 2 CPUs, < 200 MB peak RSS "
            f"(python {sys.version.split()[0]}, {os.cpu_count()} CPUs, every registered parser reading every log)"
        )


# ---------------------------------------------------------------- tree mode: llmb against the bash parser

BASH_PARSER_VARIABLE = "LLMB_BENCH_BASH_PARSER"
HOW_TO_GET = (
    "the bash parser is NVIDIA's, not llmb's: git clone https://github.com/NVIDIA/dgxc-benchmarking /tmp/dgxc && "
    "git -C /tmp/dgxc show v26.05:common/parse_train_timing_mbridge.sh > /tmp/parse_train_timing_mbridge.sh, "
    f"then give --bash-parser /tmp/parse_train_timing_mbridge.sh (or set {BASH_PARSER_VARIABLE})"
)


def check_bash_parser(path: str | None) -> str:
    if not path:
        sys.exit(f"no bash parser given; {HOW_TO_GET}")
    if not os.path.isfile(path):
        sys.exit(f"{path} is not a file; {HOW_TO_GET}")
    awk = subprocess.run(["awk", "--version"], capture_output=True, text=True)
    if awk.returncode != 0 or "GNU Awk" not in awk.stdout:
        sys.exit("the bash parser needs GNU awk as `awk` (match() with an array): install gawk")
    return os.path.abspath(path)


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as handle:
                    todo += [int(child) for child in handle.read().split()]
        except OSError:
            continue
    return found


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def timed(command: list[str], env: dict[str, str], stdout_path: Path, sample: bool) -> dict:
    """Wall seconds, CPU seconds (user and system, the process and the
    descendants it waited for) and the largest single process's peak RSS
    (both from wait4); with ``sample``, also the peak of the summed RSS of the
    whole process tree, sampled every 20 ms from /proc (on a run that is not
    timed: the sampling takes CPU from what it measures)."""
    peak_sum = [0]
    done = threading.Event()

    with open(stdout_path, "wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.PIPE, env=env)

        def sampler() -> None:
            while not done.wait(0.02):
                peak_sum[0] = max(peak_sum[0], sum(_rss_kb(p) for p in _descendants(proc.pid)))

        thread = threading.Thread(target=sampler, daemon=True)
        if sample:
            thread.start()
        stderr = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        done.set()
        if sample:
            thread.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stderr.close()
    return {
        "seconds": seconds,
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss_mb": usage.ru_maxrss / 1024,
        "tree_rss_mb": peak_sum[0] / 1024,
        "rc": proc.returncode,
        "stderr": stderr.decode(errors="replace"),
    }


def read_bash_csv(path: Path) -> dict[str, dict]:
    rows = {}
    for line in path.read_text().splitlines():
        if not line or line.startswith("#") or line.startswith("filename,"):
            continue
        name, status, mean, std, tf_mean, tf_std, extra = (line.split(",") + [""] * 7)[:7]
        rows[name] = {
            "status": status,
            "time_mean_ms": mean,
            "time_std_dev_ms": std,
            "tflops_per_gpu_mean": tf_mean,
            "tflops_per_gpu_std_dev": tf_std,
            "extra": extra,
        }
    return rows


def read_llmb_csv(path: Path) -> dict[str, dict]:
    with open(path, newline="") as handle:
        return {os.path.basename(r["filename"]): r for r in csv.DictReader(handle)}


_STATUS = {"Success": "success", "Invalid": "invalid_grad_norm"}


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def disagreements(bash: dict[str, dict], llmb: dict[str, dict]) -> list[str]:
    """Each way the two tools' results differ, one line each."""
    out = []
    for name in sorted(set(bash) | set(llmb)):
        b, m = bash.get(name), llmb.get(name)
        if b is None or m is None:
            out.append(
                f"{name}: only {'llmb' if b is None else 'bash'} has it ({(m or b)['status']})"
            )
            continue
        expected = _STATUS.get(b["status"])
        if (expected or "") != m["status"] and not (
            b["status"] == "Failed" and m["status"] not in _STATUS.values()
        ):
            out.append(f"{name}: status bash {b['status']}, llmb {m['status']}")
            continue
        if b["status"] == "Failed" and b["extra"] and b["extra"] != m["max_iteration"]:
            out.append(
                f"{name}: last iteration bash {b['extra']}, llmb {m['max_iteration'] or '-'}"
            )
        if b["status"] != "Success":
            continue
        for column, tolerance in (
            ("time_mean_ms", 0.0015),
            ("time_std_dev_ms", 0.0015),
            ("tflops_per_gpu_mean", 0.015),
            ("tflops_per_gpu_std_dev", 0.015),
        ):
            x, y = _number(b[column]), _number(m[column])
            if (x is None) != (y is None) or (x is not None and abs(x - y) > tolerance):
                out.append(f"{name}: {column} bash {b[column] or '-'}, llmb {m[column] or '-'}")
    return out


def tree_mode(args) -> None:
    bash_parser = check_bash_parser(args.bash_parser or os.environ.get(BASH_PARSER_VARIABLE))
    llmb = args.llmb or llmb_executable()
    with tempfile.TemporaryDirectory() as scratch:
        directory = args.keep or Path(scratch)
        tree = directory / "experiments"
        if tree.exists():
            shutil.rmtree(tree)
        started = time.perf_counter()
        kinds = loggen.write_experiments_tree(
            str(tree), int(args.tree_gb * 1e9), small_runs=args.small_runs
        )
        size = sum(os.path.getsize(log) for log in kinds)
        print(
            f"generated {len(kinds)} runs, {size / 1e6:,.0f} MB, in {time.perf_counter() - started:.1f} s "
            f"({', '.join(f'{n} {k}' for k, n in sorted(Counter(kinds.values()).items()))})"
        )
        print(
            f"bash parser: {bash_parser}; llmb: {llmb}; {os.cpu_count()} CPUs, python {sys.version.split()[0]}\n"
        )

        def run(tool: str, out: Path, sample: bool = False) -> dict:
            # Bytecode as users have it (pip compiles installed packages, an editable checkout compiles on
            # first import): PYTHONDONTWRITEBYTECODE, set in some sandboxes, would compile llmb every run.
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            if tool == "bash":
                command = ["bash", bash_parser, "--format=csv", str(tree)]
            else:
                install = tempfile.mkdtemp(prefix="llmb-bench-install-", dir=scratch)
                env["LLMB_INSTALL"] = install  # a fresh, empty results database every time
                command = [
                    llmb,
                    "results",
                    "--rescan",
                    str(tree),
                    "--format",
                    "csv",
                    "--full-names",
                ]
            m = timed(command, env, out, sample)
            if tool == "llmb" and m["rc"] != 0 or tool == "bash" and m["rc"] not in (0, 1):
                sys.exit(f"{tool} failed ({m['rc']}): {' '.join(command)}\n{m['stderr']}")
            if tool == "llmb":
                shutil.rmtree(env["LLMB_INSTALL"], ignore_errors=True)
            return m

        outputs = {tool: directory / f"{tool}.csv" for tool in ("bash", "llmb")}
        # warms the page cache
        warm = {tool: run(tool, outputs[tool], sample=True) for tool in ("bash", "llmb")}
        differences = disagreements(read_bash_csv(outputs["bash"]), read_llmb_csv(outputs["llmb"]))
        times: dict[str, list[dict]] = {"bash": [], "llmb": []}
        for _ in range(args.repeat):
            for tool in ("bash", "llmb"):
                times[tool].append(run(tool, directory / f"{tool}.timed.csv"))

        header = (
            "tool",
            "best s",
            "median s",
            "MB/s",
            "CPU s",
            "peak RSS MB",
            "tree RSS MB",
            "speed-up",
        )
        widths = (30, 7, 9, 6, 6, 12, 12, 9)
        print(
            "  ".join(
                h.ljust(w) if i == 0 else h.rjust(w)
                for i, (h, w) in enumerate(zip(header, widths, strict=True))
            )
        )
        best = {tool: min(m["seconds"] for m in runs) for tool, runs in times.items()}
        median = {
            tool: statistics.median(m["seconds"] for m in runs) for tool, runs in times.items()
        }
        names = {"bash": "parse_train_timing_mbridge.sh", "llmb": "llmb results --rescan (cold)"}
        for tool, runs in times.items():
            fastest = min(runs, key=lambda m: m["seconds"])
            cells = (
                names[tool],
                f"{best[tool]:.2f}",
                f"{median[tool]:.2f}",
                f"{size / best[tool] / 1e6:,.0f}",
                f"{fastest['cpu']:.2f}",
                f"{max(m['rss_mb'] for m in [*runs, warm[tool]]):,.0f}",
                f"{warm[tool]['tree_rss_mb']:,.0f}",
                f"{best['bash'] / best[tool]:.1f}x",
            )
            print(
                "  ".join(
                    c.ljust(w) if i == 0 else c.rjust(w)
                    for i, (c, w) in enumerate(zip(cells, widths, strict=True))
                )
            )
        print(
            f"\nspeed-up of llmb: {best['bash'] / best['llmb']:.1f}x at the best, "
            f"{median['bash'] / median['llmb']:.1f}x at the median ({args.repeat} runs each, alternating, "
            f"after one warm-up each; CPU s: user and system time of the fastest run; tree RSS: the summed "
            f"RSS of the tool's processes, sampled in the warm-up run)"
        )
        print(
            "every run's time: "
            + "; ".join(
                f"{tool} " + " ".join(f"{m['seconds']:.2f}" for m in runs)
                for tool, runs in times.items()
            )
        )
        rows = read_llmb_csv(outputs["llmb"])
        print(
            f"agreement: {len(rows)} runs; llmb statuses "
            + ", ".join(
                f"{n} {s}" for s, n in sorted(Counter(r["status"] for r in rows.values()).items())
            )
        )
        if differences:
            print(f"{len(differences)} disagreements between bash and llmb:")
            for line in differences:
                print(f"  {line}")
        else:
            print(
                "bash and llmb agree on every run (status, time mean and std, TFLOPS mean and std, last iteration)"
            )
        print("\naims: llmb >= 10x faster than the bash parser, peak RSS < 200 MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "mode",
        nargs="?",
        choices=("logs", "tree"),
        default="logs",
        help="logs: per-log throughput (default); tree: llmb against the bash parser on a tree",
    )
    parser.add_argument(
        "--trace-gb",
        type=float,
        default=1.0,
        help="logs: size of the NCCL-trace log (default 1 GB)",
    )
    parser.add_argument(
        "--tree-gb", type=float, default=1.0, help="tree: size of the tree (default 1 GB)"
    )
    parser.add_argument(
        "--small-runs",
        type=int,
        default=200,
        help="tree: runs in its small-log fifth (default 200)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="tree: timed runs of each tool; logs: runs of each parse, the best shown (default 3)",
    )
    parser.add_argument(
        "--bash-parser",
        help=f"tree: parse_train_timing_mbridge.sh (default ${BASH_PARSER_VARIABLE})",
    )
    parser.add_argument(
        "--llmb",
        help="tree: the llmb to time (default: the one beside this Python), e.g. a "
        "script that runs another checkout's, to compare versions",
    )
    parser.add_argument("--keep", type=Path, help="write the logs (or the tree) here and keep them")
    args = parser.parse_args()
    if args.mode == "tree":
        tree_mode(args)
    else:
        logs_mode(args)


if __name__ == "__main__":
    main()
