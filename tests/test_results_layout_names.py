"""What a run's name says, and the job it is shown by (issue 31, items 2 and 6).

The layout in an experiment name is the run's layout: where it is not the recipe's for the run's
configuration, the run is tuned, worded as ``llmb plan --set`` words it, and its short name keeps the
parts that differ. The JOB column shows only ids ``llmb logs`` and ``llmb compare --baseline`` take, and
``--from-db`` names runs as a scan of their directories does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import loggen
from experiment_dirs import make_run

ROOT = Path(__file__).resolve().parent
# A public log of a B300 run, its name giving CP 1 and MBS 4 (the H100 recipe's row is CP 2, MBS 1).
PUBLIC = ROOT / "real_logs" / "dgxc-benchmarking" / "experiments"
B300 = "pretrain_llama3_8b_bf16_gpus8_tp1_pp1_cp1_vpNone_ep1_mbs4_gbs128"
B300_SHORT = "llama3_8b_bf16_gpus8_tp1_pp1_cp1_mbs4_gbs128"
# The H100 recipe's own layout for Llama 3.1 8b BF16 on 8 GPUs.
OFFICIAL = "pretrain_llama3_8b_bf16_gpus8_tp1_pp1_cp2_vpNone_ep1_mbs1_gbs128"
STAMP = "1766132151"


def _plan_words(cli, *settings: str) -> str:
    """What ``llmb plan`` says a run of the H100 configuration with ``--set settings`` changes."""
    args = [a for s in settings for a in ("--set", s)]
    text = cli(
        "plan", "llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8", *args
    )
    assert text.code == 0, text.err
    (line,) = [ln for ln in text.out.splitlines() if ln.strip().startswith("tuned ")]
    return line.strip().removeprefix("tuned").strip()


def _public_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "experiments"
    shutil.copytree(PUBLIC / B300, copy / B300)
    return copy


def _row(table: str, name: str) -> list[str]:
    (line,) = [ln for ln in table.splitlines() if ln.startswith(name + " ")]
    return line.split()


def test_the_layout_in_a_public_logs_name_makes_it_tuned_on_h100(cli, tmp_path):
    runs = _public_copy(tmp_path)
    words = _plan_words(cli, "cp=1", "mbs=4")
    assert words.startswith("cp 2 -> 1") and "mbs 1 -> 4" in words  # the plan's own wording

    (row,) = json.loads(cli("results", str(runs), "--gpu", "h100", "--json").out)
    assert row["tuned"] == words
    table = cli("results", str(runs), "--gpu", "h100").out
    # the short name keeps cp1 (the recipe's CP is 2) and drops vpNone and ep1 (the recipe's too)
    assert _row(table, B300_SHORT)[0] == B300_SHORT, table
    assert f"{B300_SHORT}: tuned ({words}); VS PUBLISHED is against the official" in table, table
    compared = cli("compare", str(runs), "--gpu", "h100")
    assert _row(compared.out, B300_SHORT)[0] == B300_SHORT, compared.out


def test_a_name_with_the_recipes_layout_is_the_official_configuration(cli, tmp_path):
    lines = loggen.megatron_bridge_lines(range(1, 51), step_ms=dict.fromkeys(range(1, 51), 12000.0))
    make_run(tmp_path, OFFICIAL, lines)
    (row,) = json.loads(cli("results", str(tmp_path), "--gpu", "h100", "--json").out)
    assert row["tuned"] is None
    table = cli("results", str(tmp_path), "--gpu", "h100").out
    assert "llama3_8b_bf16_gpus8_tp1_pp1_cp2_mbs1_gbs128 " in table and "tuned" not in table


def test_a_set_runs_short_name_keeps_the_part_it_changed(cli, tmp_path):
    # llmb run --set cp=1 on H100 (the recipe's CP is 2): cp1 is how it differs, so its short name keeps it
    name = OFFICIAL.replace("_cp2_", "_cp1_") + "_tuned"
    lines = loggen.megatron_bridge_lines(range(1, 51), step_ms=dict.fromkeys(range(1, 51), 12000.0))
    recipe = {
        "workload": "llama31",
        "size": "8b",
        "gpu": "h100",
        "dtype": "bf16",
        "gpus": 8,
        "gbs": 128,
    }
    tuned = [
        {"setting": "cp", "published": 2, "run": 1},
        {"setting": "dp", "published": 4, "run": 8},
    ]
    make_run(tmp_path, name, lines, recipe={**recipe, "seq_len": 8192, "tuned": tuned})
    table = cli("results", str(tmp_path)).out
    assert _row(table, "llama3_8b_bf16_gpus8_tp1_pp1_cp1_mbs1_gbs128_tuned")[1] == "-", table


def test_a_foreign_run_shows_no_job_id_no_command_takes(cli, tmp_path):
    runs = _public_copy(tmp_path)
    table = cli("results", str(runs), "--gpu", "h100").out
    assert _row(table, B300_SHORT)[1] == "-", table  # not the directory's timestamp
    # the timestamp is no job: llmb logs and compare --baseline refuse it
    assert cli("logs", STAMP).code != 0
    assert cli("compare", str(runs), "--gpu", "h100", "--baseline", STAMP).code == 2
    # a second run of the experiment, started in another second: the notes name each run's directory
    shutil.copytree(runs / B300 / f"{B300}_{STAMP}", runs / B300 / f"{B300}_1766132999")
    table = cli("results", str(runs), "--gpu", "h100").out
    assert [line.split()[1] for line in table.splitlines()[2:4]] == ["-"] * 2
    assert f"(2 runs: {B300}_{STAMP}, {B300}_1766132999)" in table, table


def _slurm_job(run_dir: Path, log: Path, slurm_id: str) -> str:
    """An llmb Slurm job's record whose attempt was Slurm job ``slurm_id``."""
    from llmb.runs.jobs import Job, claim_job_dir, now, save_job

    job_id = "slurm-4a5b6c"
    assert claim_job_dir(job_id)
    save_job(
        Job(
            id=job_id,
            backend="slurm",
            workload="llama31",
            experiment=OFFICIAL,
            run_dir=str(run_dir),
            log=str(log),
            ranks=8,
            submitted_at=now(),
            details={
                "attempts": [{"slurm_id": slurm_id, "run_dir": str(run_dir), "log": str(log)}]
            },
        )
    )
    return job_id


def test_a_log_named_for_a_slurm_job_of_an_llmb_job_shows_that_job(cli, install_root, tmp_path):
    lines = list(
        loggen.megatron_bridge_lines(range(1, 51), step_ms=dict.fromkeys(range(1, 51), 12000.0))
    )
    run_dir = make_run(tmp_path / "experiments", OFFICIAL, None)
    log = run_dir / OFFICIAL / f"log-{OFFICIAL}_4242.out"  # the Slurm job id ends the log's name
    log.write_text("\n".join(lines) + "\n")
    job_id = _slurm_job(run_dir, log, "4242")
    table = cli("results", str(tmp_path / "experiments"), "--gpu", "h100").out
    shown = _row(table, "llama3_8b_bf16_gpus8_tp1_pp1_cp2_mbs1_gbs128")[1]
    assert shown == job_id, table
    assert cli("logs", shown).out == log.read_text()
    again = make_run(tmp_path / "again", OFFICIAL, lines, stamp="1766150000")
    compared = cli("compare", str(again), "--gpu", "h100", "--baseline", shown, "--json")
    verdicts = {v["against"]: v for v in compared.json()[0]["verdicts"]}
    assert verdicts["baseline"]["outcome"] == "pass", compared.out


def test_from_db_names_runs_as_a_scan_does(cli, tmp_path):
    runs = _public_copy(tmp_path)
    lines = loggen.megatron_bridge_lines(range(1, 51), step_ms=dict.fromkeys(range(1, 51), 12000.0))
    make_run(runs, OFFICIAL, lines, stamp="1766132152")
    scanned = cli("results", str(runs), "--gpu", "h100")
    stored = cli("results", "--from-db", "--gpu", "h100")
    assert scanned.out == stored.out, stored.out
    assert B300_SHORT in stored.out
    names = [
        r["filename"] for r in json.loads(cli("results", str(runs), "--gpu", "h100", "--json").out)
    ]
    listed = [r["filename"] for r in json.loads(cli("results", "--from-db", "--json").out)]
    assert sorted(listed) == sorted(names) == sorted([f"{B300}_{STAMP}", f"{OFFICIAL}_1766132152"])
