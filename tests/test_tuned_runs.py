"""A run tuned with --set is never taken for the official configuration's (issue 23): its experiment name
ends in _tuned, the plan lists every setting that differs and the official published figure, and results
and compare show the tuned result beside that figure, with the settings."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from experiment_dirs import make_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402

LLAMA4_H100 = ("llama4", "--gpu", "h100", "--dtype", "bf16", "--gpus", "512")
NH256 = "pretrain_nemotronh_56b_fp8_gpus256_tp4_pp1_cp1_vpNone_mbs1_gbs768_tuned"


def test_the_plan_lists_what_differs_and_the_official_figure(cli):
    plan = json.loads(cli("plan", *LLAMA4_H100, "--set", "tp=8", "--set", "mbs=2", "--json").out)
    assert plan["expected"] is None
    assert plan["tuned"] == [
        {"setting": "tp", "published": 4, "run": 8},
        {"setting": "dp", "published": 128, "run": 64},
        {"setting": "mbs", "published": 1, "run": 2},
    ]
    assert plan["official_expected"]["step_time_s"] == 4.426
    assert plan["time_limit"]["step_s"] == 4.426  # the official configuration's step time
    text = cli("plan", *LLAMA4_H100, "--set", "tp=8", "--set", "mbs=2").out
    assert "  tuned        tp 4 -> 8, dp 128 -> 64, mbs 1 -> 2" in text
    assert "the official configuration's published figure: step 4.426 s" in text
    assert json.loads(cli("plan", *LLAMA4_H100, "--json").out)["tuned"] is None  # the official one


def test_a_tuned_runs_experiment_name_says_so(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sinfo: the dry run goes on
    out = cli("run", *LLAMA4_H100, "--set", "tp=8", "--backend", "slurm", "--dry-run", "--bare")
    assert out.code == 0, out.err
    assert (
        "#SBATCH --job-name=pretrain_llama4_400b_bf16_gpus512_tp8_pp1_cp1_vpNone_ep128_mbs1_gbs1024_tuned"
        in out.out
    )
    official = cli("run", *LLAMA4_H100, "--backend", "slurm", "--dry-run", "--bare")
    assert "_gbs1024\n" in official.out and "_tuned" not in official.out


def test_results_and_compare_show_a_tuned_run_beside_the_official_figure(cli, tmp_path):
    # Nemotron-H 56B on 256 H100s, TP 4 instead of the published 8, 14 s a step against the published 15.892 s
    make_run(
        tmp_path,
        NH256,
        loggen.nemo2_lines(
            range(0, 50),
            step_s=dict.fromkeys(range(50), 14.0),
            gbs=768,
            tflops=dict.fromkeys(range(50), 0.0),
        ),
        recipe={
            "workload": "nemotronh",
            "size": "56b",
            "gpu": "h100",
            "dtype": "fp8",
            "gpus": 256,
            "gbs": 768,
            "seq_len": 8192,
            "job_id": "slurm-0a1b2c",
            "tuned": [{"setting": "tp", "published": 8, "run": 4}],
        },
    )
    (row,) = json.loads(cli("results", str(tmp_path), "--json").out)
    assert row["tuned"] == "tp 8 -> 4" and row["reference_step_time_ms"] == 15892.0
    table = cli("results", str(tmp_path)).out
    short = "nemotronh_56b_fp8_gpus256_tp4_pp1_mbs1_gbs768_tuned"
    # JOB: '-', since this install has no job slurm-0a1b2c (llmb logs would refuse it): notes name the run
    assert re.search(rf"^{short}\s+-\s+success\s", table, re.M), table
    assert (
        f"{short}: tuned (tp 8 -> 4); VS PUBLISHED is against the official configuration's" in table
    )
    compared = cli("compare", str(tmp_path))
    assert compared.code == 0, compared.out
    assert (
        f"{short} tuned (tp 8 -> 4): measured 14,000.0 ms per step" in compared.out
        and "the official configuration's published 15,892.0 ms" in compared.out
    ), compared.out


def test_a_name_that_gives_another_layout_than_the_recipe_is_a_tuned_run(cli, tmp_path):
    # The replaced tool's name of Nemotron-H 56B on 256 GPUs at TP 4, no recipe.json: on H100 (TP 8 published)
    # it is tuned, in the plan's words for --set tp=4, and shown beside the official figure as a --set run is.
    name = NH256.removesuffix("_tuned")
    make_run(
        tmp_path,
        name,
        loggen.nemo2_lines(
            range(0, 50),
            step_s=dict.fromkeys(range(50), 14.0),
            gbs=768,
            tflops=dict.fromkeys(range(50), 0.0),
        ),
    )
    plan = cli(
        "plan", "nemotronh", "--gpu", "h100", "--dtype", "fp8", "--gpus", "256", "--set", "tp=4"
    )
    (words,) = [
        ln.split("tuned", 1)[1].strip() for ln in plan.out.splitlines() if "  tuned  " in ln
    ]
    assert words.startswith("tp 8 -> 4")
    (row,) = json.loads(cli("results", str(tmp_path), "--gpu", "h100", "--json").out)
    assert row["tuned"] == words and row["reference_step_time_ms"] == 15892.0
    short = "nemotronh_56b_fp8_gpus256_tp4_pp1_mbs1_gbs768"
    table = cli("results", str(tmp_path), "--gpu", "h100").out
    assert f"{short}: tuned ({words}); VS PUBLISHED is against the official" in table, table
    compared = cli("compare", str(tmp_path), "--gpu", "h100")
    assert (
        f"{short} tuned ({words}): measured 14,000.0 ms per step" in compared.out
        and "the official configuration's published 15,892.0 ms" in compared.out
    ), compared.out
    # with no GPU type to look its recipe up by, it is not known to be tuned
    (row,) = json.loads(cli("results", str(tmp_path), "--json", "--rescan").out)
    assert row["tuned"] is None


def test_steps_by_set_or_by_flag_is_one_thing_and_never_tuned(cli):
    """Issue 34: --set steps=20 named the run _tuned and --steps 20 did not. Steps change how long a
    run is, not what it measures: both spellings give the same run, named as the official one."""
    base = ("run", "llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8")
    specs = []
    for spelling in (("--set", "steps=20"), ("--steps", "20")):
        result = cli(*base, "--backend", "slurm", *spelling, "--dry-run", "--json")
        assert result.code == 0, result.err
        specs.append(result.json()["run_spec"])
    assert specs[0]["experiment"] == specs[1]["experiment"]
    assert not specs[0]["experiment"].endswith("_tuned") and specs[0]["steps"] == 20
