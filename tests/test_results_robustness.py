"""Bad logs give a status and a reason, never a crash; good logs give the
statistics an independent computation gives, however the file is chunked."""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

import pytest
from experiment_dirs import make_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402
from llmb.results.analyze import analyze  # noqa: E402
from llmb.results.formats import BUILTIN_PARSERS  # noqa: E402
from llmb.results.records import STATUSES, RunContext  # noqa: E402
from llmb.results.scan import scan  # noqa: E402

CONTEXT = RunContext(experiment="x", source="none")


def parse_bytes(data: bytes, chunk_size: int = 8 << 20, max_line: int = 1 << 20, window=(35, 44)):
    with tempfile.NamedTemporaryFile(delete=False) as handle:
        handle.write(data)
    try:
        report = scan(handle.name, list(BUILTIN_PARSERS), chunk_size=chunk_size, max_line=max_line)
        return report, analyze(report, CONTEXT, window=window)
    finally:
        os.unlink(handle.name)


FRAGMENTS = [
    b"iteration",
    b" 35/ 50 |",
    b"elapsed time per iteration (ms): ",
    b"Step Time : ",
    b"MODEL_TFLOP/s/GPU",
    b"grad norm: nan |",
    b"train_step_timing in s: ",
    b"NCCL INFO AllReduce: opCount ",
    b"count 1 datatype 99",
    b"[nranks=8]",
    b"Traceback (most recent call last):",
    b"Error: x",
    b"\n",
    b"\n",
    b"  ",
    b"|",
    b":",
    b"\x00",
    b"\xff\xfe",
    b"1e999",
    b"nan",
    b"-1",
    b"Global Checkpoint Save : Rank: 0 : Iteration: ",
    b"Save duration: ",
    b"save-checkpoint ....: (",
    b"CUDA out of memory",
    b"DUE TO NODE FAILURE",
    b"Watchdog caught",
    b"[titan] 2025-04-03 16:32:20,143 - root - INFO - ",
    b"[titan] 2025-99-03 16:32:20,143 - root - INFO - ",
    b"step: ",
    b"  tps: 1,176",
    b"  memory: 42.15GiB(44.37%)",
    b"total steps ",
    b"Training starts at step ",
    b"Training completed",
    b"\x1b[31m",
    b"\r",
    b"12%|",
    b"| 6/50 [00:30<03:40, 1.2it/s]",
    b"CANCELLED AT",
    b"DUE TO TIME LIMIT",
    b"srun: error:",
    b": Exited with exit code",
    b"Unexpected result nan",
    b"SIGTERM",
    b"ChildFailedError: ",
    b"[rank3]: ",
    b"Cuda failure 2 'out of memory'",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pieces=st.lists(
        st.one_of(
            st.sampled_from(FRAGMENTS),
            st.binary(max_size=40),
            st.integers(-(10**6), 10**6).map(lambda n: str(n).encode()),
        ),
        max_size=200,
    ),
    chunk_size=st.integers(1, 300),
)
def test_garbage_never_crashes(pieces, chunk_size):
    report, result = parse_bytes(b"".join(pieces), chunk_size=chunk_size, max_line=64)
    assert result.status in STATUSES
    assert result.status == "success" or result.reason
    assert not report.errors, report.errors


def test_huge_lines_are_skipped_with_flat_memory():
    lines = list(loggen.megatron_bridge_lines(range(1, 51)))
    data = (
        ("\n".join(lines[:40]) + "\n").encode()
        + b"x" * (3 << 20)
        + b"\n"
        + ("\n".join(lines[40:]) + "\n").encode()
    )
    report, result = parse_bytes(data, chunk_size=1 << 20)
    assert report.long_lines == 1
    assert result.status == "success"
    assert any("longer than 1 MiB" in n for n in result.notes)


def test_a_truncated_last_line():
    lines = list(loggen.megatron_bridge_lines(range(1, 51)))
    text = "\n".join(lines)
    cut = len(text) - len(lines[-1]) + 60  # inside iteration 50's line, before its step time
    report, result = parse_bytes(text[:cut].encode())
    assert result.status == "incomplete"
    assert result.max_iteration == 49


def test_mixed_formats_use_the_richer_one():
    data = (
        "\n".join([*loggen.megatron_bridge_lines(range(1, 51)), *loggen.nemo2_lines(range(0, 5))])
        + "\n"
    )
    _, result = parse_bytes(data.encode())
    assert (result.status, result.format) == ("success", "megatron_bridge")
    assert any(
        n.startswith("mixed log formats: 50 megatron_bridge iterations, 5 nemo2 iterations")
        for n in result.notes
    )


@st.composite
def well_formed(draw):
    """A Megatron-Bridge log: some iterations (maybe repeated), noise between
    lines, ranks interleaved; returns the log and the step times that count."""
    fmt = draw(st.sampled_from(["megatron_bridge", "nemo2"]))
    last = 50 if fmt == "megatron_bridge" else 49
    first = 1 if fmt == "megatron_bridge" else 0
    iterations = draw(st.lists(st.integers(first, last), min_size=1, max_size=70))
    times = [draw(st.floats(1.0, 1e5, allow_nan=False)) for _ in iterations]
    lines, kept = [], {}
    for i, ms in zip(iterations, times, strict=True):
        if fmt == "megatron_bridge":
            lines += list(loggen.megatron_bridge_lines([i], last=last, step_ms={i: ms}))
            kept[i] = float(f"{ms:.1f}")
        else:
            lines += list(loggen.nemo2_lines([i], last=last, step_s={i: ms / 1000}))
            kept[i] = float(f"{ms / 1000:.4f}") * 1000
        if draw(st.booleans()):
            lines.append(
                draw(
                    st.sampled_from(
                        [
                            "[NeMo W] noise",
                            "NCCL INFO Channel 00/02 : 0 1",
                            "",
                            "iteration but not a real one",
                            "node1:1:1 [0] NCCL INFO AllGather: opCount 1 sendbuff 0x1 recvbuff 0x1 count 4 datatype 9 op 0 "
                            "root 0 comm 0x2 [nranks=8] stream 0x3",
                        ]
                    )
                )
            )
    return fmt, "\n".join(lines) + "\n", kept


@settings(max_examples=200, deadline=None)
@given(
    log=well_formed(),
    chunk_size=st.integers(50, 5000),
    window=st.tuples(st.integers(0, 50), st.integers(0, 50)),
)
def test_statistics_match_an_independent_computation(log, chunk_size, window):
    fmt, text, kept = log
    window = (min(window), max(window))
    report, result = parse_bytes(text.encode(), chunk_size=chunk_size, window=window)
    assert result.format == fmt
    inside = [kept[i] for i in sorted(kept) if window[0] <= i <= window[1]]
    if not inside:
        assert result.stats is None
        return
    assert result.stats.count == len(inside)
    assert result.stats.time_mean_ms == pytest.approx(statistics.fmean(inside), rel=1e-9)
    if len(inside) > 1:
        assert result.stats.time_std_ms == pytest.approx(
            statistics.stdev(inside), rel=1e-6, abs=1e-6
        )
    else:
        assert result.stats.time_std_ms is None
    complete = (50 if fmt == "megatron_bridge" else 49) in kept and all(
        i in kept for i in range(window[0], window[1] + 1)
    )
    assert (result.status == "success") == complete


def test_interleaved_ranks_with_duplicate_iterations():
    rank0 = list(
        loggen.megatron_bridge_lines(
            range(1, 51), prefix="job/0 ", step_ms={i: 1000.0 for i in range(51)}
        )
    )
    rank7 = list(
        loggen.megatron_bridge_lines(
            range(1, 51),
            prefix="job/7 ",
            step_ms={i: 1000.0 for i in range(51)},
            tflops={i: 50.0 for i in range(51)},
        )
    )
    mixed = [line for pair in zip(rank0, rank7, strict=True) for line in pair]
    _, result = parse_bytes(("\n".join(mixed) + "\n").encode())
    assert (result.status, result.stats.time_mean_ms, result.stats.tflops_mean) == (
        "success",
        1000.0,
        50.0,
    )
    assert any("50 repeated iteration lines" in n for n in result.notes)


MB8 = "pretrain_llama3_8b_fp8_gpus8_tp1_pp1_cp1_vpNone_ep1_etpNone_mbs2_gbs128"


def test_non_finite_step_times_in_the_window_make_the_run_invalid(cli, tmp_path):
    """``inf`` and ``nan`` step times inside the window (35-44) make the run
    invalid, naming the iterations; one outside the window does not count."""
    step = {i: 1000.0 for i in range(1, 51)}
    step.update({5: math.inf, 38: math.inf, 39: math.inf, 42: math.nan})
    make_run(tmp_path, MB8, loggen.megatron_bridge_lines(range(1, 51), step_ms=step))
    log = next(tmp_path.rglob("log-*.out")).read_text()
    assert (
        "elapsed time per iteration (ms): inf |" in log
        and "elapsed time per iteration (ms): nan |" in log
    )
    reason = "step time is not a finite number (inf, nan) at iteration 38-39, 42, inside the window 35-44"

    rows = json.loads(cli("results", "--json", str(tmp_path)).out)
    assert [(r["status"], r["failure_reason"]) for r in rows] == [("invalid_step_time", reason)]
    table = cli("results", str(tmp_path))
    # no llmb job ran it (JOB "-"), so the note under the table names it by its short name
    short = "llama3_8b_fp8_gpus8_tp1_pp1_etpNone_mbs2_gbs128"
    assert table.code == 0 and re.search(rf"^{short}\s+-\s+invalid_step_time\s", table.out, re.M)
    assert f"\n{short}: invalid_step_time: {reason}\n" in table.out, table.out
    assert cli("compare", str(tmp_path)).code == 1  # an invalid run fails a gate


def test_a_huge_exponent_is_an_infinite_step_time():
    lines = list(loggen.megatron_bridge_lines(range(1, 51)))
    at = next(i for i, line in enumerate(lines) if "iteration       40/" in line)
    lines[at] = re.sub(
        r"elapsed time per iteration \(ms\): [^ ]+",
        "elapsed time per iteration (ms): 1e999",
        lines[at],
    )
    _, result = parse_bytes(("\n".join(lines) + "\n").encode())
    assert (result.status, result.reason) == (
        "invalid_step_time",
        "step time is not a finite number (inf) at iteration 40, inside the window 35-44",
    )
