"""``llmb results`` and ``llmb compare`` as a user runs them."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from experiment_dirs import make_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402
from llmb.runs.experiment import compact_name  # noqa: E402

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
    make_run(
        nh,
        NH,
        loggen.nemo2_lines(range(0, 50), step_s=dict.fromkeys(range(50), 15.892), gbs=768),
        recipe={
            "workload": "nemotronh",
            "size": "56b",
            "gpu": "h100",
            "dtype": "fp8",
            "gpus": 256,
            "gbs": 768,
            "seq_len": 8192,
        },
    )
    make_run(
        nh,
        NH,
        [*loggen.nemo2_lines(range(0, 20), gbs=768), loggen.OOM, 'he said "stop, now"'],
        stamp="1766139999",
    )
    make_run(mb, MB, loggen.megatron_bridge_lines(range(1, 51)))
    make_run(mb, MB, None, stamp="1766140000")
    return root


def test_table_lists_every_run_with_its_status(cli, install):
    out = cli("results").out
    # each run by its experiment's short form; no llmb job ran these, so JOB is "-" (never the run
    # directory's timestamp, which no command takes as a job id)
    rows = out.splitlines()[2:6]
    assert [re.match(r"^(\S+)\s+(\S+)\s+(\S+)\s", line).groups() for line in rows] == [
        (compact_name(MB), "-", "success"),
        (compact_name(MB), "-", "no_log"),
        (compact_name(NH), "-", "success"),
        (compact_name(NH), "-", "failed"),
    ], out
    assert out.splitlines()[6] == "", out  # and no other run
    assert "1766132151" not in out  # no directory's number stands in for a job
    assert compact_name(NH) == "nemotronh_56b_fp8_gpus256_tp8_pp1_mbs1_gbs768"
    # the note names the run by its directory, as its short name is shared with another run
    assert (
        f"\n{NH}_1766139999: failed: cuda oom: torch.OutOfMemoryError: CUDA out of memory" in out
    ), out
    assert f"\n{MB}_1766140000: no_log: no log-*.out file in " in out, out
    full = cli("results", "--full-names").out  # the log paths, whole
    assert re.search(rf"/{NH}_1766132151/{NH}/log-{NH}\.out\s+-\s+success\s", full), full


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
    assert any(
        r["filename"].endswith(f"log-{MB}.out") and r["filename"].startswith("/") for r in rows
    )
    windowed = json.loads(
        cli("results", "--json", "--window", "1:10", "--workload", "nemotronh").out
    )
    assert {r["window"] for r in windowed} == {"1-10"}
    assert cli("results", "--window", "9:3").code == 2
    assert cli("results", "--since", "yesterday-ish").code == 2
    assert json.loads(cli("results", "--json", "--since", "1d").out)  # logs written just now
    assert json.loads(cli("results", "--json", "--dtype", "bf16").out) == []


def test_gpu_filter_supplies_unknown_gpu_types(cli, install):
    # on an H100, Llama 3.1 8B FP8 at GBS 128 on 8 GPUs takes at least ~3.8 s a step by the workload's
    # FLOP formula: the fixture's 1 s step would make the run implausible once --gpu names the type
    log = next((install / "workloads" / "llama31").rglob("log-*.out"))
    step = dict.fromkeys(range(1, 51), 9330.0)
    log.write_text("\n".join(loggen.megatron_bridge_lines(range(1, 51), step_ms=step)) + "\n")
    rows = json.loads(cli("results", "--json", "--gpu", "h100", "--workload", "llama31").out)
    assert sorted(r["status"] for r in rows) == ["no_log", "success"], rows
    success = next(r for r in rows if r["status"] == "success")
    assert success["gpu"] == "h100" and success["gpu_source"] == "--gpu"
    assert success["mfu_pct"] is not None and 0 < success["mfu_pct"] < 100
    unknown = json.loads(cli("results", "--json", "--workload", "llama31").out)
    assert {r["gpu"] for r in unknown} == {None}  # without --gpu the logs give no GPU type


def test_every_parsed_run_is_stored_and_reused(cli, install, monkeypatch):
    first = json.loads(cli("results", "--json").out)
    stored = json.loads(cli("results", "--from-db", "--json").out)
    assert len(stored) == 4 and {r["run_id"] for r in stored} == {r["run_id"] for r in first}
    assert (install / "results.sqlite").exists()
    # Unchanged logs come from the database: parsing them again would fail here.
    monkeypatch.setattr(
        "llmb.results.collect.scan", lambda *a, **k: pytest.fail("an unchanged log was re-read")
    )
    again = json.loads(cli("results", "--json").out)
    assert [(r["filename"], r["run_id"], r["status"]) for r in again] == [
        (r["filename"], r["run_id"], r["status"]) for r in first
    ]


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
    ok = cli(
        "compare",
        str(install / "workloads" / "nemotronh" / "experiments" / NH / f"{NH}_1766132151"),
    )
    assert ok.code == 0, ok.out
    assert re.search(r"published\s+PASS", ok.out)
    assert re.search(
        r"published 15,892\.0 ms, 395,888 tokens/s, MFU 26\.86% \(.+ table 2, row 4\)$",
        ok.out,
        re.M,
    )
    slow = tmp_path / "slow"
    make_run(
        slow,
        NH,
        loggen.nemo2_lines(range(0, 50), step_s=dict.fromkeys(range(50), 17.7), gbs=768),
        recipe={
            "workload": "nemotronh",
            "size": "56b",
            "gpu": "h100",
            "dtype": "fp8",
            "gpus": 256,
            "gbs": 768,
            "seq_len": 8192,
        },
    )
    regress = cli("compare", str(slow))
    assert regress.code == 1 and "REGRESS" in regress.out
    assert cli("compare", str(slow), "--threshold", "0.85").code == 0


def _baseline_verdicts(result) -> dict[str, dict]:
    """``llmb compare --json``'s baseline verdict of each run, by name."""
    return {
        r["filename"]: next((v for v in r["verdicts"] if v["against"] == "baseline"), None)
        for r in json.loads(result.out)
    }


SELF = "the baseline is this run itself"


def test_compare_against_a_baseline_file_directory_or_database_id_never_the_run_itself(
    cli, install, tmp_path
):
    mb = install / "workloads" / "llama31"
    good = f"{MB}_1766132151"
    again = tmp_path / "again"  # a second run of the same configuration, a little slower
    make_run(
        again,
        MB,
        loggen.megatron_bridge_lines(range(1, 51), step_ms=dict.fromkeys(range(1, 51), 1030.0)),
        stamp="1766150000",
    )
    baseline = tmp_path / "baseline.json"
    baseline.write_text(cli("results", "--format", "json", "--workload", "llama31").out)
    good_ms = next(
        r["time_mean_ms"] for r in json.loads(baseline.read_text()) if r["status"] == "success"
    )
    run_id = next(
        r["run_id"]
        for r in json.loads(cli("results", "--from-db", "--json").out)
        if r["filename"] == good and r["status"] == "success"  # named as a scan names it
    )
    for spec, form, words in (
        (str(baseline), "file", f"file {baseline}: {good}"),
        (str(mb), "directory", f"directory {mb}: {good}"),
        (str(run_id), "database", f"run {run_id} in the results database"),
    ):
        compared = cli("compare", str(mb), str(again), "--baseline", spec, "--json")
        verdicts = _baseline_verdicts(compared)
        assert verdicts[good]["outcome"] == "not_compared" and verdicts[good]["detail"] == SELF, (
            spec
        )
        other = verdicts[f"{MB}_1766150000"]
        assert other["outcome"] == "pass" and other["ratio"] == pytest.approx(
            good_ms / 1030.0, rel=1e-4
        ), spec
        assert f"({words}; pass at 95%)" in other["detail"]
        assert (
            other["baseline"]["given_as"] == form
            and other["baseline"]["matched"] == "configuration"
        )
        assert other["baseline"]["log"].endswith(f"{good}/{MB}/log-{MB}.out")
        assert compared.code == 1  # the run without a log fails
    text = cli("compare", str(mb / "experiments" / MB / good), "--baseline", str(mb))
    # no llmb job ran it: JOB is "-", not its directory's number
    short = re.escape(compact_name(MB))
    assert re.search(rf"^{short}\s+-\s+\S+\s+baseline\s+NOT.COMPARED\s", text.out, re.M), text.out
    assert "1766132151" not in text.out
    # the detail, under the table, by the run's short name
    assert f"\n{compact_name(MB)}: against baseline: {SELF}\n" in text.out, text.out
    assert text.code == 3  # compared with nothing
    # a directory whose runs are all compared with each other: each with the other, never with itself
    both = _baseline_verdicts(
        cli("compare", str(mb), str(again), "--baseline", str(tmp_path), "--json")
    )
    assert both[good]["outcome"] == "pass" and both[f"{MB}_1766150000"]["outcome"] == "pass"
    assert both[good]["detail"].startswith(
        f"{1030.0 / good_ms:.1%} of baseline throughput (directory {tmp_path}: "
    )
    assert both[good]["baseline"]["log"] != both[f"{MB}_1766150000"]["baseline"]["log"]


def test_one_baseline_run_for_one_run_is_compared_even_when_the_configurations_differ(
    cli, install, tmp_path
):
    nh = install / "workloads" / "nemotronh" / "experiments" / NH / f"{NH}_1766132151"
    mb = install / "workloads" / "llama31" / "experiments" / MB / f"{MB}_1766132151"
    one = cli("compare", str(mb), "--baseline", str(nh), "--json")
    [verdict] = _baseline_verdicts(one).values()
    assert verdict["outcome"] == "pass" and verdict["baseline"]["matched"] == "direct"
    assert (
        f"(directory {nh}: {NH}_1766132151: the one run given, configurations not matched; pass"
        in verdict["detail"]
    )
    # with more than one run compared, runs are matched by configuration
    two = _baseline_verdicts(cli("compare", str(mb), str(nh), "--baseline", str(nh), "--json"))
    assert two[f"{MB}_1766132151"]["outcome"] == "not_compared"
    assert (
        two[f"{MB}_1766132151"]["detail"]
        == f"no baseline run of this configuration in directory {nh}"
    )
    assert two[f"{NH}_1766132151"]["detail"] == SELF


def test_compare_fails_on_a_failed_run(cli, install):
    result = cli("compare", "--workload", "nemotronh")
    assert result.code == 1 and "FAILED" in result.out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "is not a results file (not valid JSON"),
        ('[{"x": 1}]', "entry 1 is not a result row"),
    ],
)
def test_bad_baselines_are_usage_errors(cli, install, tmp_path, content, message):
    bad = tmp_path / "b.json"
    bad.write_text(content)
    result = cli("compare", "--baseline", str(bad))
    assert result.code == 2 and message in result.err


def test_a_baseline_that_is_a_log_or_a_fifo_is_refused_without_advice_to_overwrite_it(
    cli, install, tmp_path
):
    import os

    log = tmp_path / "log-run.out"
    log.write_text("iteration 1/50 | elapsed time per iteration (ms): 10 |\n")
    result = cli("compare", "--baseline", str(log))
    assert result.code == 2 and "not a results file" in result.err
    assert f"> {log}" not in result.err  # the advice names a new file, never the log it read
    fifo = tmp_path / "baseline.json"
    os.mkfifo(fifo)  # nothing ever writes it: reading it would hang the command
    result = cli("compare", "--baseline", str(fifo))
    assert result.code == 2 and str(fifo) in result.err


FORMS = (
    "--baseline takes a directory of runs (as llmb results DIR reads it), a results file (llmb results --format "
    "json > FILE), an llmb job id (what llmb run prints and llmb status lists, e.g. local-575dba, or the Slurm "
    "job id of one) or a results-database id (the run_id of llmb results --from-db --json)."
)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("local-575dba", "--baseline local-575dba: no such directory, file or llmb job; " + FORMS),
        ("no/such/dir", "--baseline no/such/dir: no such directory, file or llmb job; " + FORMS),
        (
            "999999",
            "--baseline 999999: no llmb job has Slurm job id 999999, and the results database has no run 999999",
        ),
        (
            "NHFAILED",
            "the directory holds no successful run to compare with (1 run: failed); " + FORMS,
        ),
    ],
)
def test_a_baseline_that_names_nothing_usable_says_what_is_accepted(cli, install, spec, message):
    if spec == "NHFAILED":
        spec = str(install / "workloads" / "nemotronh" / "experiments" / NH / f"{NH}_1766139999")
    result = cli("compare", "--baseline", spec)
    assert result.code == 2 and message in result.err.replace("\n", " "), result.err
    assert "Traceback" not in result.err and "No such file" not in result.err


def test_results_json_names_the_job_by_the_job_id_status_json_gives(
    llmb_proc, proxy_certification, tmp_path
):
    """Issue 40, item 8: the results table shows JOB and ``llmb status --json`` has ``job_id``, but the
    results JSON had no job: one key, ``job_id``, in both, so a script can join them."""
    cert = proxy_certification  # a real local job: llama31 8b's tiny proxy on one rank
    assert cert.result.code == 0, cert.result.err[-3000:]
    [job_id] = cert.suite["workloads"]["llama31"]["jobs"]
    install = tmp_path / "install"
    shutil.copytree(cert.install, install)  # the fixture is read only
    env = {"LLMB_INSTALL": str(install), "LLMB_NO_CACHE": "1"}

    status = llmb_proc("status", "--json", env=env)
    assert status.code == 0, status.err
    [job] = [j for j in status.json() if j["job_id"] == job_id]
    for asked in (("--format", "json"), ("--json",)):
        shown = llmb_proc("results", *asked, env=env)
        assert shown.code == 0, shown.err
        [run] = shown.json()
        assert run["job_id"] == job["job_id"] == job_id, (asked, run)
    # the table's JOB column and the CSV say the same id
    table = llmb_proc("results", env=env)
    assert table.code == 0 and job_id in table.out, table.out
    [csv_row] = csv.DictReader(io.StringIO(llmb_proc("results", "--format", "csv", env=env).out))
    assert csv_row["job_id"] == job_id


def test_a_run_no_llmb_job_ran_has_job_id_null(cli, install):
    rows = json.loads(cli("results", "--json").out)
    assert rows and all(r["job_id"] is None for r in rows)


def test_compare_against_an_llmb_job_or_the_slurm_job_id_of_one(
    cli, proxy_certification, tmp_path, monkeypatch
):
    cert = proxy_certification  # a real local job: llama31 8b's tiny proxy on one rank
    assert cert.result.code == 0, cert.result.err[-3000:]
    [job_id] = cert.suite["workloads"]["llama31"]["jobs"]
    install = tmp_path / "install"
    # the job records; the run directories stay where the job ran them
    shutil.copytree(cert.install, install)
    monkeypatch.setenv("LLMB_INSTALL", str(install))
    record = json.loads((install / "jobs" / job_id / "job.json").read_text())
    run_dir = Path(record["run_dir"])
    again = tmp_path / "again" / run_dir.parent.name / f"{run_dir.parent.name}_1795649999"
    shutil.copytree(run_dir, again)  # the same log as a second run of the configuration
    mb = tmp_path / "mb"  # a Megatron-Bridge log of another configuration, in the results database
    make_run(mb, MB, loggen.megatron_bridge_lines(range(1, 51)))
    [mb_id] = [str(r["run_id"]) for r in json.loads(cli("results", str(mb), "--json").out)]

    by_job = cli("compare", str(again), "--baseline", job_id, "--json")
    [verdict] = _baseline_verdicts(by_job).values()
    assert (verdict["outcome"], verdict["ratio"]) == ("pass", 1.0), verdict
    assert verdict["detail"] == f"100.0% of baseline throughput (job {job_id}; pass at 95%)"
    assert (verdict["baseline"]["given_as"], verdict["baseline"]["log"]) == ("job", record["log"])
    itself = _baseline_verdicts(
        cli("compare", str(run_dir), str(again), "--baseline", job_id, "--json")
    )
    assert itself[run_dir.name]["detail"] == SELF and itself[again.name]["outcome"] == "pass"

    # A Slurm job id of a job's attempt names the job; digits that are also a database id are the job, said so.
    (install / "jobs" / "slurm-0a0a0a").mkdir()
    (install / "jobs" / "slurm-0a0a0a" / "job.json").write_text(
        json.dumps(
            {
                **record,
                "id": "slurm-0a0a0a",
                "backend": "slurm",
                "details": {
                    "attempts": [
                        {
                            "attempt": 1,
                            "slurm_id": mb_id,
                            "run_dir": str(run_dir),
                            "log": record["log"],
                        }
                    ]
                },
            }
        )
    )
    both = cli("compare", str(again), "--baseline", mb_id, "--json")
    [verdict] = _baseline_verdicts(both).values()
    assert (
        verdict["outcome"] == "pass"
        and f"(job slurm-0a0a0a (Slurm job {mb_id}); pass at 95%)" in verdict["detail"]
    )
    mb_dir = mb / MB / f"{MB}_1766132151" / MB
    assert (
        f"llmb: note: --baseline {mb_id} is job slurm-0a0a0a (Slurm job {mb_id}) and also run {mb_id} in the "
        f"results database; comparing with the job (to compare with that run, give its directory: --baseline "
        f"{mb_dir})."
    ) in both.err

    # That run, another configuration in another log format, is one baseline run for one run: compared directly.
    direct = cli("compare", str(again), "--baseline", str(mb_dir))
    assert re.search(
        rf"baseline\s+\S+.*\(directory {re.escape(str(mb_dir))}: {MB}_1766132151: the one run given, "
        rf"configurations not matched; pass at 95%\)",
        direct.out,
    ), direct.out
