"""MFU against both peaks: the run dtype's and BF16's, each only where the
GPU type lists it (data/gpus.yaml), never another peak in its place; in the
results row, the table, llmb compare and the published figures."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from experiment_dirs import make_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402
from llmb.recipes.gpus import catalogue  # noqa: E402
from llmb.recipes.metrics import mfu_at_bf16_pct, mfu_pcts  # noqa: E402
from llmb.results.collect import Collector  # noqa: E402
from llmb.results.records import RunResult  # noqa: E402

MB = "pretrain_llama3_8b_{dtype}_gpus8_tp1_pp1_cp1_vpNone_ep1_etpNone_mbs2_gbs128"
NH256 = "pretrain_nemotronh_56b_fp8_gpus256_tp8_pp1_cp1_vpNone_mbs1_gbs768"
TFLOPS = 900.0  # every iteration's logged TFLOP/s/GPU
# 8b at GBS 128 on 8 GPUs: 632 TFLOP/s/GPU by the workload's formula, below every peak (at loggen's default
# 1 s it would be 7,590: an impossible run, llmb.results.plausibility)
STEP_MS = 12000.0


def run_dir(root: Path, gpu: str, dtype: str, device: str | None = None) -> str:
    recipe = {
        "workload": "llama31",
        "size": "8b",
        "gpu": gpu,
        "dtype": dtype,
        "gpus": 8,
        "gbs": 128,
        "seq_len": 8192,
    }
    if device:
        recipe["device"] = device
    make_run(
        root,
        MB.format(dtype=dtype),
        loggen.megatron_bridge_lines(
            range(1, 51),
            step_ms=dict.fromkeys(range(1, 51), STEP_MS),
            tflops=dict.fromkeys(range(1, 51), TFLOPS),
        ),
        recipe=recipe,
    )
    return str(root)


def result(host, root: Path) -> RunResult:
    (collected,) = Collector(host).collect([str(root)])
    return collected.result


def test_the_pair_is_against_the_dtypes_peak_and_the_bf16_peak():
    h100 = catalogue()["h100"].peak_tflops
    assert mfu_pcts(900.0, h100, "fp8") == (
        pytest.approx(100 * 900 / 1979),
        pytest.approx(100 * 900 / 989),
    )
    at_dtype, at_bf16 = mfu_pcts(900.0, h100, "bf16")
    assert at_dtype == at_bf16 == pytest.approx(100 * 900 / 989)
    # H100 lists no NVFP4 peak
    assert mfu_pcts(900.0, h100, "nvfp4") == (None, pytest.approx(100 * 900 / 989))
    # a GPU type listing no peak has no MFU
    assert mfu_pcts(900.0, {}, "bf16") == (None, None)
    assert mfu_pcts(900.0, catalogue()["b200"].peak_tflops, None) == (None, pytest.approx(40.0))
    assert mfu_at_bf16_pct(20.0, catalogue()["gb200"].peak_tflops, "fp8") == pytest.approx(40.0)
    assert mfu_at_bf16_pct(20.0, {}, "fp8") is None
    assert mfu_at_bf16_pct(None, catalogue()["h100"].peak_tflops, "fp8") is None


@pytest.mark.parametrize(
    ("gpu", "dtype", "at_dtype", "at_bf16"),
    [
        ("h100", "fp8", 100 * TFLOPS / 1979, 100 * TFLOPS / 989),
        ("h100", "bf16", 100 * TFLOPS / 989, 100 * TFLOPS / 989),
        ("b200", "nvfp4", 100 * TFLOPS / 9000, 100 * TFLOPS / 2250),
        # the H200 runs the H100's recipes and takes its peaks (gpus.yaml runs_recipes_of; tests/test_h200.py)
        ("h200", "fp8", 100 * TFLOPS / 1979, 100 * TFLOPS / 989),
        ("h200", "bf16", 100 * TFLOPS / 989, 100 * TFLOPS / 989),
    ],
)
def test_a_runs_mfu_against_both_peaks(host, tmp_path, gpu, dtype, at_dtype, at_bf16):
    r = result(host, Path(run_dir(tmp_path, gpu, dtype)))
    assert r.status == "success" and r.stats.tflops_mean == pytest.approx(TFLOPS)
    assert r.mfu_pct == (None if at_dtype is None else pytest.approx(at_dtype))
    assert r.mfu_bf16_pct == (None if at_bf16 is None else pytest.approx(at_bf16))


def test_a_cpu_run_has_no_mfu(host, tmp_path):
    r = result(host, Path(run_dir(tmp_path, "h100", "bf16", device="cpu")))
    assert (r.mfu_pct, r.mfu_bf16_pct) == (None, None)


def test_the_published_mfu_is_restated_against_the_bf16_peak(host, tmp_path):
    make_run(
        tmp_path,
        NH256,
        loggen.nemo2_lines(
            range(0, 50),
            step_s=dict.fromkeys(range(50), 15.892),
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
        },
    )
    r = result(host, tmp_path)
    assert round(r.mfu_pct, 2) == 26.86  # the seed's worked example, against the FP8 peak
    assert r.mfu_bf16_pct == pytest.approx(r.mfu_pct * 1979 / 989)
    assert r.reference_mfu_pct is not None
    assert r.reference_mfu_bf16_pct == pytest.approx(r.reference_mfu_pct * 1979 / 989)
    again = RunResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert (again.mfu_bf16_pct, again.reference_mfu_bf16_pct) == (
        r.mfu_bf16_pct,
        r.reference_mfu_bf16_pct,
    )


def test_results_and_compare_show_both(cli, tmp_path):
    root = tmp_path / "runs"
    run_dir(root, "h100", "fp8")
    (row,) = json.loads(cli("results", str(root), "--json").out)
    assert row["mfu_pct"] == round(100 * TFLOPS / 1979, 2) and row["mfu_bf16_pct"] == round(
        100 * TFLOPS / 989, 2
    )
    table = cli("results", str(root)).out
    header = next(line for line in table.splitlines() if line.startswith("EXPERIMENT"))
    assert re.search(r"MFU %\s+MFU BF16 %", header)
    assert f"{100 * TFLOPS / 1979:.2f}" in table and f"{100 * TFLOPS / 989:.2f}" in table
    csv_header = cli("results", str(root), "--format", "csv").out.splitlines()[0].split(",")
    assert {"mfu_pct", "mfu_bf16_pct", "reference_mfu_bf16_pct"} <= set(csv_header)
    (compared,) = json.loads(cli("compare", str(root), "--json").out)
    assert compared["mfu_pct"] == pytest.approx(100 * TFLOPS / 1979)
    assert compared["mfu_bf16_pct"] == pytest.approx(100 * TFLOPS / 989)


def test_compare_text_names_the_bf16_figure_of_an_fp8_run(cli, tmp_path):
    make_run(
        tmp_path,
        NH256,
        loggen.nemo2_lines(
            range(0, 50),
            step_s=dict.fromkeys(range(50), 15.892),
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
        },
    )
    out = cli("compare", str(tmp_path)).out
    # the seed's TFLOP/s/GPU over the BF16 peak
    bf16 = 100 * (768 * 2.816073e15 / 15.892 / 256 / 1e12) / 989
    assert re.search(
        rf"measured [\d,.]+ ms per step, [\d,]+ tokens/s, MFU 26\.86% \({bf16:.2f}% of the BF16 peak\)",
        out,
    ), out
    assert "published" in out and out.count("of the BF16 peak") == 2


def test_plan_shows_the_published_mfu_against_both_peaks(cli):
    args = [
        "plan",
        "nemotronh",
        "--size",
        "56b",
        "--gpu",
        "h100",
        "--dtype",
        "fp8",
        "--gpus",
        "256",
    ]
    expected = json.loads(cli(*args, "--json").out)["expected"]
    assert expected["mfu_pct"] == 26.86 and expected["mfu_bf16_pct"] == round(26.86 * 1979 / 989, 2)
    assert f"MFU 26.86% ({round(26.86 * 1979 / 989, 2):g}% of the BF16 peak)" in cli(*args).out


def test_the_run_summary_shows_the_bf16_figure_of_an_fp8_run():
    from llmb.lifecycle.follow import summary
    from llmb.runs.jobs import Job, JobStatus

    job = Job(
        id="local-1",
        backend="local",
        workload="llama31",
        experiment="x",
        run_dir="/r",
        log="/r/log",
        ranks=8,
        submitted_at="2026-11-23T00:00:00Z",
    )
    row = {
        "status": "success",
        "window": "35-44",
        "samples_in_window": 10,
        "time_mean_ms": 1000.0,
        "time_std_dev_ms": 1.0,
        "tokens_per_s": 1e6,
        "tflops_per_gpu_mean": 900.0,
        "tflops_source": "log",
        "days_to_train_1t": 11.6,
        "dtype": "fp8",
        "mfu_pct": 45.48,
        "mfu_bf16_pct": 91.0,
    }
    text = summary(JobStatus(job, "SUCCEEDED", None, None, {"result": row}))
    assert "MFU         45.48% (91.00% of the BF16 peak)" in text
    bf16 = summary(
        JobStatus(
            job, "SUCCEEDED", None, None, {"result": {**row, "dtype": "bf16", "mfu_pct": 91.0}}
        )
    )
    assert "MFU         91.00%\n" in bf16 + "\n" and "BF16 peak" not in bf16
    none = summary(
        JobStatus(
            job, "SUCCEEDED", None, None, {"result": {**row, "mfu_pct": None, "mfu_bf16_pct": None}}
        )
    )
    assert "MFU         - (no GPU peak applies)" in none and "BF16 peak" not in none


def test_every_peak_names_the_public_source_that_gives_exactly_it_and_the_ones_that_disagree(cli):
    from llmb.recipes.gpus import _peak_sources, catalogue, peak_source, recipes_of

    documents = _peak_sources()["documents"]
    for gpu, spec in catalogue().items():
        for dtype, peak in spec.peak_tflops.items():
            # a type that runs another's recipes (the H200) takes its peak, and so its source
            entries = _peak_sources()["gpus"][recipes_of(gpu)][dtype]["sources"]
            # the source llmb's figure is from comes first
            assert float(entries[0]["value"]) == peak, (gpu, dtype)
            assert all(e["source"] in documents for e in entries), (gpu, dtype)
            assert peak_source(gpu, dtype).document == "NVIDIA LLM Benchmarking Collection README"
            if recipes_of(gpu) != gpu:  # and its own entries give the same figure, rounded at most
                own = _peak_sources()["gpus"][gpu][dtype]["sources"]
                assert own and all(abs(float(e["value"]) - peak) < 1 for e in own), (gpu, dtype)
                assert all(e["source"] in documents for e in own), (gpu, dtype)
    # GB200 BF16: tools disagree (2450 here, NVIDIA's NVL72 figure halved 2500, 2250 elsewhere), and llmb says so
    gb200 = peak_source("gb200", "bf16")
    assert gb200.tflops == 2450 and {value for _, value in gb200.others} == {2500, 2250}
    text = cli(
        "plan", "llama31", "--size", "8b", "--gpu", "gb200", "--dtype", "fp8", "--gpus", "8"
    ).out
    assert (
        "MFU peak     FP8 4900 TFLOP/s dense per GPU (NVIDIA LLM Benchmarking Collection README); "
        "other sources give 5000 (NVIDIA Blackwell datasheet)" in text
    )
