"""``llmb results`` and ``llmb compare`` as a user runs them."""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from pathlib import Path

import pytest
from experiment_dirs import make_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402

LEGACY = "filename,status,time_mean_ms,time_std_dev_ms,tflops_per_gpu_mean,tflops_per_gpu_std_dev,max_iteration"
NH = "pretrain_nemotronh_56b_fp8_gpus256_tp8_pp1_cp1_vpNone_mbs1_gbs768"
MB = "pretrain_llama3_8b_fp8_gpus8_tp1_pp1_cp1_vpNone_ep1_etpNone_mbs2_gbs128"


@pytest.fixture
def install(tmp_path, monkeypatch):
    """$LLMB_INSTALL with one experiment per status, in the seeds' layout."""
    root = tmp_path / "install"
    monkeypatch.setenv("LLMB_INSTALL", str(root))
    monkeypatch.setenv("LLMB_LOG_FORMAT", "json")
    nh = root / "workloads" / "nemotronh" / "experiments"
    mb = root / "workloads" / "llama31" / "experiments"
    make_run(nh, NH, loggen.nemo2_lines(range(0, 50), step_s=dict.fromkeys(range(50), 15.892), gbs=768),
             recipe={"workload": "nemotronh", "size": "56b", "gpu": "h100", "dtype": "fp8", "gpus": 256,
                     "gbs": 768, "seq_len": 8192})
    make_run(nh, NH, [*loggen.nemo2_lines(range(0, 20), gbs=768), loggen.OOM, 'he said "stop, now"'],
             stamp="1766139999")
    make_run(mb, MB, loggen.megatron_bridge_lines(range(1, 51)))
    make_run(mb, MB, None, stamp="1766140000")
    return root


def test_table_lists_every_run_with_its_status(cli, install):
    out = cli("results").out
    for name, status in ((f"{NH}_1766132151", "success"), (f"{NH}_1766139999", "failed"),
                         (f"{MB}_1766132151", "success"), (f"{MB}_1766140000", "no_log")):
        assert re.search(rf"^{re.escape(name)}\s+{status}\s", out, re.M), (name, status)
    assert f"{NH}_1766139999: failed: cuda oom: torch.OutOfMemoryError: CUDA out of memory" in out


def test_csv_starts_with_the_replaced_tools_columns_and_stays_valid(cli, install):
    text = cli("results", "--format", "csv").out
    assert text.splitlines()[0].startswith(LEGACY + ",")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 4
    by_status = {r["status"]: r for r in rows}
    assert by_status["no_log"]["time_mean_ms"] == ""
    success = next(r for r in rows if r["filename"] == f"{NH}_1766132151")
    assert float(success["time_mean_ms"]) == pytest.approx(15892.0)
    assert float(success["mfu_pct"]) == pytest.approx(26.86, abs=0.01)
    assert float(success["reference_step_time_ms"]) == 15892.0


def test_json_is_valid_for_every_status(cli, install):
    rows = json.loads(cli("results", "--format", "json").out)
    assert {r["status"] for r in rows} == {"success", "failed", "no_log"}
    for r in rows:
        assert list(r)[:7] == LEGACY.split(",")
        assert isinstance(r["notes"], list) and isinstance(r["nccl"], list)


def test_full_names_window_and_filters(cli, install):
    rows = json.loads(cli("results", "--json", "--full-names", "--workload", "llama31").out)
    assert all(r["workload"] == "llama31" for r in rows) and len(rows) == 2
    assert any(r["filename"].endswith(f"log-{MB}.out") and r["filename"].startswith("/") for r in rows)
    windowed = json.loads(cli("results", "--json", "--window", "1:10", "--workload", "nemotronh").out)
    assert {r["window"] for r in windowed} == {"1-10"}
    assert cli("results", "--window", "9:3").code == 2
    assert cli("results", "--since", "yesterday-ish").code == 2
    assert json.loads(cli("results", "--json", "--since", "1d").out)  # logs written just now
    assert json.loads(cli("results", "--json", "--dtype", "bf16").out) == []


def test_gpu_filter_supplies_unknown_gpu_types(cli, install):
    rows = json.loads(cli("results", "--json", "--gpu", "h100", "--workload", "llama31").out)
    success = next(r for r in rows if r["status"] == "success")
    assert success["gpu"] == "h100" and success["mfu_pct"] is not None


def test_every_parsed_run_is_stored_and_reused(cli, install, monkeypatch):
    first = json.loads(cli("results", "--json").out)
    stored = json.loads(cli("results", "--from-db", "--json").out)
    assert len(stored) == 4 and {r["run_id"] for r in stored} == {r["run_id"] for r in first}
    assert (install / "results.sqlite").exists()
    # Unchanged logs come from the database: parsing them again would fail here.
    monkeypatch.setattr("llmb.results.collect.scan", lambda *a, **k: pytest.fail("an unchanged log was re-read"))
    again = json.loads(cli("results", "--json").out)
    assert [(r["filename"], r["run_id"], r["status"]) for r in again] == [
        (r["filename"], r["run_id"], r["status"]) for r in first]


def test_rescan_reparses(cli, install):
    cli("results")
    log = next((install / "workloads" / "llama31").rglob("log-*.out"))
    log.write_text("\n".join(loggen.megatron_bridge_lines(range(1, 30))) + "\n")
    rows = json.loads(cli("results", "--json", "--workload", "llama31").out)
    assert "incomplete" in {r["status"] for r in rows}  # changed log: parsed again without --rescan


def test_missing_directory_is_a_usage_error(cli, install):
    result = cli("results", "/no/such/dir")
    assert result.code == 2 and "no such file or directory: /no/such/dir" in result.err


def test_compare_with_published_numbers_and_exit_code(cli, install, tmp_path):
    ok = cli("compare", str(install / "workloads" / "nemotronh" / "experiments" / NH / f"{NH}_1766132151"))
    assert ok.code == 0, ok.out
    assert re.search(r"published\s+PASS", ok.out)
    assert re.search(r"published 395,888 tokens/s, MFU 26\.86% \(.+ table 2, row 4\)$", ok.out, re.M)
    slow = tmp_path / "slow"
    make_run(slow, NH, loggen.nemo2_lines(range(0, 50), step_s=dict.fromkeys(range(50), 17.7), gbs=768),
             recipe={"workload": "nemotronh", "size": "56b", "gpu": "h100", "dtype": "fp8", "gpus": 256,
                     "gbs": 768, "seq_len": 8192})
    regress = cli("compare", str(slow))
    assert regress.code == 1 and "REGRESS" in regress.out
    assert cli("compare", str(slow), "--threshold", "0.85").code == 0


def test_compare_against_a_baseline_file_and_run(cli, install, tmp_path):
    baseline = tmp_path / "baseline.json"
    baseline.write_text(cli("results", "--format", "json", "--workload", "llama31").out)
    same = cli("compare", str(install / "workloads" / "llama31"), "--baseline", str(baseline), "--json")
    verdicts = {(r["filename"], v["against"]): v["outcome"] for r in json.loads(same.out) for v in r["verdicts"]}
    assert verdicts[(f"{MB}_1766132151", "baseline")] == "pass"
    assert verdicts[(f"{MB}_1766132151", "published")] == "skipped"  # no published figure for 8 GPUs of MB fp8
    assert verdicts[(f"{MB}_1766140000", "run")] == "no_log"  # a job that never ran fails a gate, in results' words
    assert same.code == 1
    run_id = next(r["run_id"] for r in json.loads(cli("results", "--from-db", "--json").out)
                  if r["filename"] == MB)
    good_run = str(install / "workloads" / "llama31" / "experiments" / MB / f"{MB}_1766132151")
    by_id = cli("compare", good_run, "--baseline", str(run_id))
    assert by_id.code == 0 and re.search(r"baseline\s+PASS", by_id.out)


def test_compare_fails_on_a_failed_run(cli, install):
    result = cli("compare", "--workload", "nemotronh")
    assert result.code == 1 and "FAILED" in result.out


@pytest.mark.parametrize(("content", "message"), [
    ("not json", "is not valid JSON"),
    ('[{"x": 1}]', "entry 1 is not a result row"),
])
def test_bad_baselines_are_usage_errors(cli, install, tmp_path, content, message):
    bad = tmp_path / "b.json"
    bad.write_text(content)
    result = cli("compare", "--baseline", str(bad))
    assert result.code == 2 and message in result.err
    assert cli("compare", "--baseline", "999999").code == 2
