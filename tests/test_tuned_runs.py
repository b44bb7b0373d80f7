"""A run tuned with --set is never taken for the official configuration's (issue 23): its experiment name
ends in _tuned, the plan lists every setting that differs and the official published figure, and results
and compare show the tuned result beside that figure, with the settings."""

from __future__ import annotations

import json
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
    assert "nemotronh_56b_fp8_gpus256_tp4_pp1_mbs1_gbs768_tuned" in table
    assert (
        "slurm-0a1b2c: tuned (tp 8 -> 4); VS PUBLISHED is against the official configuration's"
        in table
    )
    compared = cli("compare", str(tmp_path))
    assert compared.code == 0, compared.out
    assert (
        "slurm-0a1b2c tuned (tp 8 -> 4): measured 14,000.0 ms per step" in compared.out
        and "the official configuration's published 15,892.0 ms" in compared.out
    ), compared.out
