"""Results files read back (``llmb compare --baseline FILE``, ``llmb report FILE``) are checked row by row,
through the real ``llmb`` process: a row whose fields have the wrong type or an absurd value is skipped with
one warning naming it and why, a file with nothing usable left is a usage error (exit 2), and no such file
ever makes an internal error (exit 70) or a verdict from a non-finite or absurd step time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from experiment_dirs import make_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402

MB = "pretrain_llama3_8b_fp8_gpus8_tp1_pp1_cp1_vpNone_ep1_etpNone_mbs2_gbs128"
WIDE = {"COLUMNS": "1000"}  # warnings unwrapped, whatever the terminal running the tests
STEP = "not a step time in ms from 0.001 to 1e+09"


@pytest.fixture
def runs(tmp_path, llmb_proc):
    """The run compared, and a results file's successful row of another run of its configuration."""
    compared = make_run(tmp_path / "runs", MB, loggen.megatron_bridge_lines(range(1, 51)))
    other = make_run(
        tmp_path / "base", MB, loggen.megatron_bridge_lines(range(1, 51)), stamp="1766100000"
    )
    result = llmb_proc("results", str(other), "--format", "json", env=WIDE)
    assert result.code == 0, result.err
    [good] = json.loads(result.out)
    assert good["status"] == "success" and good["time_mean_ms"] > 0
    return compared, good


def _baseline_verdict(out: str) -> dict:
    [run] = json.loads(out)
    return next(v for v in run["verdicts"] if v["against"] == "baseline")


# (the bad row's field, its value as JSON text, what the warning says about it)
BAD_ROWS = [
    ("time_mean_ms", '"abc"', f"time_mean_ms is 'abc', {STEP}"),
    ("time_mean_ms", "[1011.28]", f"time_mean_ms is a list, {STEP}"),
    ("time_mean_ms", '{"ms": 1}', f"time_mean_ms is an object, {STEP}"),
    ("gpus", "{}", "gpus is an object, not a GPU count from 1 to 131,072"),
    ("gpus", "[8]", "gpus is a list, not a GPU count from 1 to 131,072"),
    ("gpus", "true", "gpus is true, not a GPU count from 1 to 131,072"),
    ("workload", '["llama31"]', "workload is a list, not text"),
    ("time_mean_ms", "NaN", f"time_mean_ms is nan, {STEP}"),  # the token Python's json reads
    ("time_mean_ms", "Infinity", f"time_mean_ms is inf, {STEP}"),
    ("time_mean_ms", "-5", f"time_mean_ms is -5, {STEP}"),
    ("time_mean_ms", "5e-324", f"time_mean_ms is 5e-324, {STEP}"),  # the smallest subnormal
    ("time_mean_ms", "1e308", f"time_mean_ms is 1e+308, {STEP}"),
    ("time_mean_ms", "1" + "0" * 308, f"time_mean_ms is a 309-digit integer, {STEP}"),
    ("tokens_per_s", "NaN", "tokens_per_s is nan, not a finite number of at most 1e+15"),
]


@pytest.mark.parametrize(
    ("field", "value", "problem"), BAD_ROWS, ids=[f"{f}={v[:12]}" for f, v, _ in BAD_ROWS]
)
def test_a_bad_row_is_skipped_with_one_warning_and_the_good_row_judges(
    runs, tmp_path, llmb_proc, field, value, problem
):
    compared, good = runs
    placeholder = "__BAD__"
    bad = {**good, field: placeholder}
    path = tmp_path / "baseline.json"
    # the bad row first: it matches the run's configuration, so today it is the one judged
    path.write_text(json.dumps([bad, good]).replace(f'"{placeholder}"', value))
    result = llmb_proc("compare", str(compared), "--baseline", str(path), "--json", env=WIDE)
    assert result.code == 0, result.err
    assert result.err == (
        f"llmb: warning: the baseline {path}: entry 1: {problem}; that row is skipped.\n"
    )
    verdict = _baseline_verdict(result.out)
    assert (verdict["outcome"], verdict["ratio"], verdict["reference_ms"]) == (
        "pass",
        1.0,
        good["time_mean_ms"],
    ), verdict

    # the bad row alone: nothing usable is left, so the file is refused
    path.write_text(json.dumps([bad]).replace(f'"{placeholder}"', value))
    result = llmb_proc("compare", str(compared), "--baseline", str(path), env=WIDE)
    assert result.code == 2, result.err
    assert result.err.replace("\n", " ").strip() == (
        f"llmb: error: the baseline {path} has no usable result row: entry 1: {problem}; write one "
        f"with llmb results --format json > results.json, a new file."
    )
    assert result.out == ""


def test_deep_nesting_is_a_usage_error_naming_the_file(runs, tmp_path, llmb_proc):
    compared, good = runs
    depth = 100_000
    for name, text in [
        ("arrays.json", "[" * depth + "]" * depth),
        (
            "in-a-row.json",
            json.dumps([good])[:-2] + ', "notes": ' + "[" * depth + "]" * depth + "}]",
        ),
    ]:
        path = tmp_path / name
        path.write_text(text)
        result = llmb_proc("compare", str(compared), "--baseline", str(path), env=WIDE)
        assert result.code == 2, result.err
        assert result.err.replace("\n", " ").strip() == (
            f"llmb: error: the baseline {path} is not a results file (its JSON is nested too deeply); "
            f"write one with llmb results --format json > results.json, a new file."
        )


def test_many_bad_rows_are_warned_one_by_one_up_to_ten(runs, tmp_path, llmb_proc):
    compared, good = runs
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps([{**good, "gpus": -i} for i in range(1, 13)] + [good]))
    result = llmb_proc("compare", str(compared), "--baseline", str(path), "--json", env=WIDE)
    assert result.code == 0, result.err
    lines = result.err.splitlines()
    assert lines[:10] == [
        f"llmb: warning: the baseline {path}: entry {i}: gpus is -{i}, not a GPU count from 1 to "
        f"131,072; that row is skipped."
        for i in range(1, 11)
    ]
    assert lines[10:] == [f"llmb: warning: the baseline {path}: 2 more unusable rows are skipped."]
    assert _baseline_verdict(result.out)["ratio"] == 1.0


def test_report_reads_results_files_through_the_same_checks(runs, tmp_path, llmb_proc):
    pytest.importorskip("matplotlib")
    _, good = runs
    path = tmp_path / "results.json"
    path.write_text(json.dumps([{**good, "time_mean_ms": "abc"}, good]))
    result = llmb_proc("report", str(path), "--out", str(tmp_path / "report"), "--json", env=WIDE)
    assert result.code == 0, result.err
    assert result.err == (
        f"llmb: warning: the results file {path}: entry 1: time_mean_ms is 'abc', {STEP}; that row "
        f"is skipped.\n"
    )
    assert json.loads(result.out)["runs"] == 1

    path.write_text(json.dumps([{**good, "gpus": {}}]))
    result = llmb_proc("report", str(path), "--out", str(tmp_path / "report2"), env=WIDE)
    assert result.code == 2, result.err
    assert "has no usable result row: entry 1: gpus is an object" in result.err
    assert not (tmp_path / "report2").exists()
