"""Real logs from public sources read as a correct parser reads them.

tests/real_logs/MANIFEST.yaml lists each log (text unchanged from the cited
source), where it was published, and the reading worked out by hand: status,
window means, failure kind and message, and a part of the reason where the status
needs explaining. Each entry goes through ``llmb results
--format json`` as a user runs it, and through the ``Collector`` for what the
JSON rounds or leaves out (the failure's kind, unrounded means).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from llmb.results.collect import Collector
from llmb.results.records import STATUSES

CORPUS = Path(__file__).parent / "real_logs"
ENTRIES = yaml.safe_load((CORPUS / "MANIFEST.yaml").read_text(encoding="utf-8"))["entries"]
LOG_SUFFIXES = (".log", ".out")


def _window(entry: dict) -> tuple[int, int] | None:
    if "window" not in entry:
        return None
    first, last = str(entry["window"]).split(":")
    return int(first), int(last)


def _close(actual: float | None, expected: float | None) -> bool:
    if expected is None or actual is None:
        return actual is expected
    return math.isclose(actual, expected, rel_tol=1e-6, abs_tol=0.01)


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param(
            e,
            marks=[pytest.mark.xfail(strict=True, reason=e["waits_on"])]
            if e.get("waits_on")
            else [],
        )
        for e in ENTRIES
    ],
    ids=[e["name"] for e in ENTRIES],
)
def test_real_log_reads_as_expected(entry, cli, host, install_root):
    path = CORPUS / entry["path"]
    assert path.exists(), f"{entry['path']} is listed but missing"
    expect = entry["expect"]
    window = _window(entry)
    args = ["results", str(path), "--format", "json"]
    if window:
        args += ["--window", f"{window[0]}:{window[1]}"]
    run = cli(*args)
    assert run.code == 0, run.err
    rows = json.loads(run.out)
    assert len(rows) == 1, rows
    row = rows[0]
    assert row["status"] == expect["status"], row["failure_reason"]
    if "time_mean_ms" in expect:  # the JSON rounds to 3 decimals
        assert _close(row["time_mean_ms"], expect["time_mean_ms"]), (
            row["time_mean_ms"],
            expect["time_mean_ms"],
        )

    collected = Collector(host, store=None).collect([str(path)], window=window)
    assert len(collected) == 1
    result = collected[0].result
    assert result.status == expect["status"], result.reason
    stats = result.stats
    if "time_mean_ms" in expect:
        assert _close(stats.time_mean_ms if stats else None, expect["time_mean_ms"])
    if "tflops_mean" in expect:
        assert _close(stats.tflops_mean if stats else None, expect["tflops_mean"]), stats
    if "reason_contains" in expect:
        assert expect["reason_contains"] in (result.reason or ""), result.reason
        assert expect["reason_contains"] in (row["failure_reason"] or "")
    if "step_time_lines" in expect:
        found = result.extra.get("step_time_lines") or {}
        for key, value in expect["step_time_lines"].items():
            assert _close(found.get(key), value), (key, found)
    failure = expect.get("failure")
    if failure is None:
        assert result.failure is None, result.failure
    else:
        assert result.failure is not None, result.reason
        assert result.failure.kind == failure["kind"], result.failure
        assert failure["message_contains"] in result.failure.message, result.failure.message
        assert failure["message_contains"] in row["failure_reason"]


def test_corpus_is_broad_and_every_entry_names_its_source():
    assert len(ENTRIES) >= 20
    tools = {entry["tool"].split()[0] for entry in ENTRIES}
    assert len(tools) >= 5, tools
    assert {"megatron-lm", "megatron-bridge", "nemo2", "torchtitan", "llmb-run"} <= tools
    names = [entry["name"] for entry in ENTRIES]
    assert len(set(names)) == len(names)
    for entry in ENTRIES:
        source = entry["source"]
        assert source.get("repository"), entry["name"]
        assert source.get("url") or (source.get("path") and len(source.get("commit", "")) == 40), (
            entry["name"]
        )
        assert entry.get("cut"), entry["name"]
        assert entry["expect"]["status"] in STATUSES, entry["name"]
        assert (CORPUS / entry["path"]).exists(), entry["name"]


def test_every_log_in_the_corpus_is_listed():
    listed = set()
    for entry in ENTRIES:
        path = CORPUS / entry["path"]
        listed |= {p for p in path.rglob("*") if p.is_file()} if path.is_dir() else {path}
    on_disk = {p for p in CORPUS.rglob("*") if p.is_file() and p.suffix in LOG_SUFFIXES}
    assert on_disk == listed, sorted(str(p.relative_to(CORPUS)) for p in on_disk ^ listed)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["name"] for e in ENTRIES])
def test_every_figure_counts_the_values_it_was_computed_from(entry, cli, host, install_root):
    """Issue 40: a figure is never reported with a sample count other than the number of step times
    (and TFLOP/s values) it was computed from; a success has at least one step time."""
    from llmb.results.analyze import SAMPLED, _in_window, log_every

    path = CORPUS / entry["path"]
    window = _window(entry)
    result = Collector(host, store=None).collect([str(path)], window=window)[0].result
    stats = result.stats
    if stats is None:
        assert result.status != "success", result.reason
        return
    every = log_every(list(result.samples)) if result.format in SAMPLED else 1
    inside = [s for s in result.samples if _in_window(s, result.window, every)]
    times = [
        s.step_time_ms
        for s in inside
        if s.step_time_ms is not None and math.isfinite(s.step_time_ms)
    ]
    assert stats.count == (len(times) if stats.time_mean_ms is not None else 0), (stats, times)
    if stats.tflops_source == "log":
        values = [s.tflops_per_gpu for s in inside if s.tflops_per_gpu is not None]
        assert stats.tflops_count == len([v for v in values if math.isfinite(v)]), stats
    if result.status == "success":
        assert stats.count >= 1 and stats.time_mean_ms is not None, stats
    args = ["results", str(path), "--format", "json"] + (
        ["--window", f"{window[0]}:{window[1]}"] if window else []
    )
    [row] = cli(*args).json()
    assert row["samples_in_window"] == stats.count


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.get("states")], ids=lambda e: e["name"])
def test_what_a_log_states_of_its_run_is_read(entry):
    """The manifest's ``states``, worked out by reading the log, are what llmb reads of it (the
    statements reader, and the iteration lines' own global batch size): what verdicts hold a run's name
    and records against (issue 40)."""
    from llmb.results.formats import BUILTIN_PARSERS
    from llmb.results.scan import scan

    findings = scan(str(CORPUS / entry["path"]), list(BUILTIN_PARSERS)).findings
    found = {(s.field, s.value) for s in findings.get("statements") or ()}
    for fmt in ("megatron_bridge", "nemo2", "torchtitan"):
        if (log := findings.get(fmt)) is not None:
            found |= {
                ("gbs", s.global_batch_size) for s in log.samples.values() if s.global_batch_size
            }
    assert set(entry["states"].items()) <= found, sorted(set(entry["states"].items()) - found)
