"""A large log read in segments by worker processes (``scan``'s ``jobs``)
gives exactly what one reading gives (issue 32): the same findings in the
same order, the same failures at the same offsets, the same RunResult;
whatever falls on a segment's boundary (a Step Time line and its iteration,
a traceback, torchrun's root-cause block, an over-long line), and whatever
goes wrong in a worker (it dies, a reader raises: the log is read whole).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest
from experiment_dirs import make_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402
from llmb.plugins.host import PluginHost  # noqa: E402
from llmb.results import collect  # noqa: E402
from llmb.results import scan as scan_module  # noqa: E402
from llmb.results.collect import Collector  # noqa: E402
from llmb.results.formats import NcclReader  # noqa: E402
from llmb.results.scan import LogParser, scan  # noqa: E402

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="worker processes are forked on Linux only"
)
REAL_LOGS = Path(__file__).resolve().parent / "real_logs"
HOST = PluginHost()
PARSERS = HOST.log_parsers()
MAX_LINE = 3000  # small, so that over-long lines are cheap to make
CHUNK = 1024
ISOLATED = "LLMB_TEST_IN_FRESH_PROCESS"
TRACEBACK_MARK = "the traceback that straddles"


def in_fresh_process(test) -> bool:
    """Run ``test`` again alone in a fresh pytest process and check it passed
    there (True: the caller returns); False inside that process, or where no
    other thread runs here. Workers are forked only while no other thread
    runs, and a suite's earlier tests may leave one."""
    import subprocess

    if os.environ.get(ISOLATED) == "1" or threading.active_count() == 1:
        return False
    node = f"{Path(__file__).resolve()}::{test.__name__}"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node],
        capture_output=True,
        text=True,
        env={**os.environ, ISOLATED: "1"},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return True


def rich_lines() -> list[str]:
    """Something for every parser, many times, far apart: every real log in
    turn, NCCL set-up lines and traces between them, Megatron-Bridge steps
    whose Step Time lines stand a trace away from their iterations, a
    traceback interleaved with another rank's lines, over-long lines."""
    lines: list[str] = []
    steps = list(loggen.megatron_bridge_lines(range(1, 61), last=60))
    hosts = ("nodea", "nodeb", "nodec")
    for number, path in enumerate(sorted(REAL_LOGS.rglob("*.log"))):
        host = hosts[number % 3]
        lines += [
            f"{host}:1:2 [0] NCCL INFO NET/Plugin: Loaded net plugin Plugin{number % 4} (v8)",
            f"{host}:1:2 [0] NCCL INFO Using network IB{number % 5}",
            f"{host}:1:3 [1] NCCL INFO Channel 00/0 : 0[0] -> {number}[0] [send] via NET/IB/0/GDRDMA",
            f"{host}:1:3 [1] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/IPC",
        ]
        lines += loggen.nccl_lines(40 + number, seed=number)
        lines += path.read_text(errors="replace").splitlines()
        lines += steps[2 * number : 2 * number + 1]  # the Step Time line
        lines += [loggen.NOISE_LINE] * (number % 7)
        lines += loggen.nccl_lines(30, seed=100 + number)
        lines += steps[2 * number + 1 : 2 * number + 2]  # its iteration
        if number % 5 == 0:
            lines += [
                "x" * (MAX_LINE + number % 3 - 1),
                "y" * (3 * MAX_LINE),
            ]  # 2999..3001, and 9000
    lines += steps[-30:]  # the last steps, some of them again (a restarted run's)
    lines += [
        f"[rank3]: Traceback (most recent call last): {TRACEBACK_MARK}",
        '[rank3]:   File "/opt/megatron/train.py", line 120, in <module>',
        "[rank5]: some other rank's line",
        *loggen.nccl_lines(20, seed=7),
        '[rank3]:   File "/opt/megatron/train.py", line 80, in main',
        "[rank3]: ValueError: bad tensor shape (8192, 4096) vs (4096,)",
        loggen.CHECKPOINT_MEGATRON,
        loggen.CHECKPOINT_NEMO_SAVE,
        loggen.OOM,
        *loggen.nemo2_lines(range(0, 5)),
        "[after training is done] datetime: 2025-12-19 10:49:16",
        loggen.NODE_FAILURE,
    ]
    return lines


@pytest.fixture(scope="module")
def log(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("chunked") / "log-x.out"
    text = "\n".join(rich_lines())
    path.write_text(text)  # the last line has no line end: a truncated log
    return path


def segmented(monkeypatch, segment: int) -> list:
    """Logs of any size read in segments of ``segment`` bytes, whatever the
    leading parsers take of them; the segments of each read (a spy)."""
    monkeypatch.setattr(scan_module, "SEGMENTED_MIN", 0)
    monkeypatch.setattr(scan_module, "SEGMENT", segment)
    monkeypatch.setattr(scan_module, "_leaders_take_most", lambda *args: True)
    seen = []
    real = scan_module._segments

    def spy(fd, size, segment):
        seen.append(real(fd, size, segment))
        return seen[-1]

    monkeypatch.setattr(scan_module, "_segments", spy)
    return seen


def read(path: Path, jobs: int, parsers=None) -> str:
    """The whole report, as text (NaN equals NaN there)."""
    return repr(scan(str(path), parsers or PARSERS, chunk_size=CHUNK, max_line=MAX_LINE, jobs=jobs))


@pytest.mark.parametrize("segment", [997, 4096, 65536])
def test_a_log_read_in_segments_gives_what_one_reading_gives(log, monkeypatch, segment):
    if in_fresh_process(test_a_log_read_in_segments_gives_what_one_reading_gives):
        return
    whole = read(log, jobs=1)
    seen = segmented(monkeypatch, segment)
    for jobs in (2, 3):
        assert read(log, jobs=jobs) == whole
    assert seen and len(seen[-1]) > 10  # it was read in segments
    report = scan(str(log), PARSERS, chunk_size=CHUNK, max_line=MAX_LINE, jobs=2)
    assert report.long_lines > 5 and not report.errors
    assert {"nccl", "nccl_transport", "megatron_bridge", "failures", "checkpoint"} <= {
        name for name, found in report.findings.items() if found
    }
    assert sum(c.calls for c in report.findings["nccl"]) > 1000
    assert report.findings["nccl_transport"].hosts == 3


def test_what_straddles_a_boundary_is_read_as_in_one_reading(log, monkeypatch):
    """A boundary inside the traceback, inside each real log's torchrun
    root-cause block and between each Step Time line and its iteration."""
    if in_fresh_process(test_what_straddles_a_boundary_is_read_as_in_one_reading):
        return
    text = log.read_bytes()
    whole = read(log, jobs=1)
    targets = [text.index(TRACEBACK_MARK.encode()) + 60]
    targets += [i + 40 for i in _positions(text, b"Root Cause (first observed failure)")][:3]
    targets += [i + 10 for i in _positions(text, b"Step Time : ")][:3]
    assert len(targets) >= 6
    for target in targets:
        seen = segmented(monkeypatch, target)
        assert read(log, jobs=2) == whole
        assert seen[-1][0][1] > target - 1  # the first boundary is just after the target's line


def _positions(text: bytes, needle: bytes) -> list[int]:
    out, at = [], text.find(needle)
    while at >= 0:
        out.append(at)
        at = text.find(needle, at + 1)
    return out


def test_a_run_read_in_segments_has_the_result_of_one_reading(tmp_path, monkeypatch):
    """Through the collector: the same RunResult, and LLMB_RESULTS_JOBS=1 reads it whole."""
    if in_fresh_process(test_a_run_read_in_segments_has_the_result_of_one_reading):
        return
    lines = rich_lines()
    make_run(tmp_path, "pretrain_llama3_8b_bf16_gpus8_tp1_pp1_cp1_vpNone_ep1_mbs2_gbs128", lines)
    seen = segmented(monkeypatch, 8192)
    results = {}
    for jobs in ("1", "2"):
        monkeypatch.setenv(collect.JOBS_VARIABLE, jobs)
        (found,) = Collector(HOST).collect([str(tmp_path)])
        results[jobs] = json.dumps(found.result.to_dict())
        assert len(seen) == (0 if jobs == "1" else 1)
    assert results["1"] == results["2"]
    assert json.loads(results["1"])["status"] == "invalid_grad_norm"  # a real log's nan grad norm


def test_a_log_that_dominates_a_tree_is_read_in_segments_first(tmp_path, monkeypatch):
    """One log of more than a CPU's share of the tree: read by every CPU in
    segments before the pool parses the rest; the results and run ids are
    those of one process."""
    if in_fresh_process(test_a_log_that_dominates_a_tree_is_read_in_segments_first):
        return
    from llmb.results.store import ResultStore

    lines = rich_lines()
    make_run(tmp_path, "pretrain_llama3_8b_bf16_gpus8_tp1_pp1_cp1_vpNone_ep1_mbs2_gbs128", lines)
    for number in range(6):
        make_run(
            tmp_path,
            f"pretrain_nemotron4_15b_bf16_gpus16_tp1_pp1_cp1_vpNone_epNone_mbs2_gbs128_{number}",
            list(loggen.megatron_bridge_lines(range(1, 51))),
        )
    monkeypatch.setattr(collect, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(collect, "SEGMENTED_MIN", 0)
    seen = segmented(monkeypatch, 16384)
    results = {}
    for jobs in ("1", "2"):
        monkeypatch.setenv(collect.JOBS_VARIABLE, jobs)
        with ResultStore(str(tmp_path / f"{jobs}.sqlite")) as store:
            results[jobs] = [
                (c.location.log, json.dumps(c.result.to_dict()), c.run_id)
                for c in Collector(HOST, store).collect([str(tmp_path)])
            ]
    assert results["1"] == results["2"]
    assert len(seen) == 1  # the large log, once, in segments; the small ones whole


class _Dies:
    """A leading reader that can be merged, whose worker dies on the trace's first line."""

    def __init__(self, main: int):
        self.main = main

    def feed(self, chunk: bytes) -> None:
        if os.getpid() != self.main and b"NCCL INFO AllReduce" in chunk:
            os._exit(3)

    def merge(self, other) -> None:
        pass

    def finish(self) -> None:
        return None


class _Raises(_Dies):
    def feed(self, chunk: bytes) -> None:
        if b"Root Cause" in chunk:
            raise ValueError("no")


@pytest.mark.parametrize("reader", [_Dies, _Raises])
def test_a_failing_worker_costs_nothing(log, monkeypatch, reader):
    """A worker that dies, or a reader that raises in one: the log is read
    whole, in this process, and the report is that reading's (with the
    reader's error, where it raises there too)."""
    if in_fresh_process(test_a_failing_worker_costs_nothing):
        return
    main = os.getpid()
    parsers = [LogParser("first", "a test's", lambda: reader(main)), *PARSERS]
    whole = read(log, jobs=1, parsers=parsers)
    seen = segmented(monkeypatch, 4096)
    assert read(log, jobs=2, parsers=parsers) == whole
    assert seen  # segments were tried
    assert ("ValueError: no" in whole) == (reader is _Raises)


def test_small_logs_and_one_job_are_read_whole(log, monkeypatch):
    monkeypatch.setattr(scan_module, "SEGMENT", 4096)
    called = []
    monkeypatch.setattr(scan_module, "_scan_in_segments", lambda *a: called.append(a))
    scan(str(log), PARSERS, jobs=2)  # under SEGMENTED_MIN
    monkeypatch.setattr(scan_module, "SEGMENTED_MIN", 0)
    scan(str(log), PARSERS, jobs=1)
    assert not called


def test_segments_start_at_line_starts(tmp_path):
    path = tmp_path / "log"
    data = b"a" * 10 + b"\n" + b"b" * 5000 + b"\n" + b"c\n" * 3000 + b"tail"
    path.write_bytes(data)
    with open(path, "rb") as handle:
        segments = scan_module._segments(handle.fileno(), len(data), 1000)
    assert segments[0][0] == 0 and segments[-1][1] == len(data)
    for (_, end), (start, _) in zip(segments, segments[1:], strict=False):
        assert end == start and data[start - 1 : start] == b"\n"
    assert segments[1][0] == 11 + 5001  # the long line is not cut
    with open(path, "rb") as handle:  # one line end only: one segment
        assert len(scan_module._segments(handle.fileno(), 11, 4)) == 1


@pytest.mark.parametrize("chunk_size", [7, 100, 1001])
def test_an_over_long_line_is_skipped_wherever_blocks_cut_it(tmp_path, chunk_size):
    """Over ``max_line`` bytes (its line end not counted) is skipped, at most is read,
    however the blocks read fall (before, a line the carry completed was never measured)."""
    lines = list(loggen.megatron_bridge_lines(range(1, 11), last=10))
    text = []
    for length in (999, 1000, 1001, 1500, 2500):
        text += [lines.pop(0), "x" * (length - 10) + "Step Time "]
    path = tmp_path / "log"
    path.write_text("\n".join(text + lines) + "\n")
    report = scan(str(path), PARSERS, chunk_size=chunk_size, max_line=1000)
    reference = scan(str(path), PARSERS, chunk_size=1, max_line=1000)
    assert report.long_lines == reference.long_lines == 3
    assert repr(report.findings) == repr(reference.findings)


def test_nccl_readers_merge_as_one_reading():
    lines = list(loggen.nccl_lines(500, seed=3))
    half = "\n".join(lines[:250]).encode() + b"\n"
    rest = "\n".join(lines[250:]).encode() + b"\n"
    one, first, second = NcclReader(), NcclReader(), NcclReader()
    one.feed(half + rest)
    first.feed(half)
    second.feed(rest)
    first.merge(second)
    assert one.finish() == first.finish()


def test_segments_are_read_only_where_the_leading_parsers_take_most(tmp_path, monkeypatch):
    """An NCCL trace: its parsers take three quarters of it, and the rest of the
    work, which stays in one process, is small. A log of noise: all of it would
    go through this process, so it is read whole."""
    monkeypatch.setattr(scan_module, "SEGMENT", 1 << 16)
    lead = PARSERS[:2]
    trace, noise = tmp_path / "trace", tmp_path / "noise"
    loggen.write_large_trace(trace, 3 << 20)
    noise.write_text((loggen.NOISE_LINE + "\n") * 20000)
    for path, expected in ((trace, True), (noise, False)):
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            segments = scan_module._segments(handle.fileno(), size, 1 << 16)
            assert (
                scan_module._leaders_take_most(handle.fileno(), segments, lead, CHUNK, MAX_LINE)
                is expected
            )
