"""What a run's experiment name alone says, as users met it: a strong-scaling
Nemotron-4 name, and Llama 4's own name that counts nodes, not GPUs."""

from __future__ import annotations

import json

import loggen
import pytest
from experiment_dirs import make_run
from llmb.results.experiments import infer_from_name

STRONG = "pretrain_nemotron4_340b_fp8_gpus128_tp8_pp8_cp2_vp12_mbs1_gbs512"
WEAK = "pretrain_nemotron4_340b_fp8_gpus128_tp8_pp8_cp2_vp12_mbs1_gbs32"
# GB200's recipe at 64 nodes (256 GPUs): TP 1, PP 2, VP 12, EP 64, GBS 2048; H100's at 512 GPUs is TP 4, EP 128, GBS 1024
LLAMA4 = "pretrain_llama4_e128_fp8_64nodes_tp1_pp2_cp1_vp12_ep64_mbs1_gbs2048"


@pytest.fixture
def install(install_root):
    return install_root


def test_a_strong_scaling_gbs_makes_the_name_strong(host):
    strong = infer_from_name(STRONG, host.workloads())
    assert (strong.workload, strong.gpus, strong.gbs, strong.scaling) == (
        "nemotron4",
        128,
        512,
        "strong",
    )
    assert infer_from_name(WEAK, host.workloads()).scaling == "weak"


def test_compare_finds_the_strong_scaling_figure_plan_shows(cli, install):
    experiments = install / "workloads" / "nemotron4" / "experiments"
    run = make_run(
        experiments,
        STRONG,
        loggen.nemo2_lines(range(0, 50), step_s=dict.fromkeys(range(50), 21.5), gbs=512),
    )
    planned = cli(
        "plan",
        "nemotron4",
        "--gpu",
        "gb200",
        "--dtype",
        "fp8",
        "--gpus",
        "128",
        "--strong-scaling",
        "--json",
    ).json()["expected"]
    compared = cli("compare", str(run), "--gpu", "gb200", "--json")
    assert compared.code == 0, compared.err
    [row] = json.loads(compared.out)
    assert row["published"]["step_time_ms"] == pytest.approx(planned["step_time_s"] * 1000)
    assert [v["outcome"] for v in row["verdicts"] if v["against"] == "published"] == ["pass"]


def test_a_name_that_counts_nodes_gives_the_gpu_count(cli, install, host):
    assert infer_from_name(LLAMA4, host.workloads()).nodes == 64
    experiments = install / "workloads" / "llama4" / "experiments"
    make_run(
        experiments,
        LLAMA4,
        loggen.nemo2_lines(range(0, 50), step_s=dict.fromkeys(range(50), 6.2), gbs=2048),
    )
    [gb200] = cli("results", "--json", "--gpu", "gb200").json()
    assert gb200["gpus"] == 256 and gb200["mfu_pct"] is not None  # 64 nodes of 4 GPUs
    assert gb200["reference_step_time_ms"] == pytest.approx(6223.0)
    assert gb200["tuned"] is None  # the name's layout is GB200's recipe's
    [h100] = cli("results", "--json", "--gpu", "h100", "--rescan").json()
    assert h100["gpus"] == 512  # 64 nodes of 8 GPUs
    # and not H100's: the run is tuned, each setting as llmb plan --set words it
    assert h100["tuned"] == (
        "tp 4 -> 1, pp 1 -> 2, ep 128 -> 64, vp - -> 12, dp 128 -> 256, gbs 1024 -> 2048"
    )
