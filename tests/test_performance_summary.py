"""Megatron-Bridge's performance summary as published figures (``--reference summary``).

The data file copies the document's cells; these tests check it against an
independent count (Megatron-Bridge's own FLOPs formula must turn each row's
tokens/s per GPU into its printed TFLOP/s per GPU), and check which rows llmb
uses: pre-training, a printed precision llmb runs, the newest release.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from experiment_dirs import make_run
from llmb.recipes.flops import megatron_bridge_sample
from llmb.recipes.summary_file import summary_from_dict
from llmb.recipes.workload_file import _read

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402

RAW = _read("llmb_plugin_llama31", "performance_summary.yaml")
MB_FP8 = "pretrain_llama3_8b_fp8_gpus8_tp1_pp1_cp1_vpNone_ep1_etpNone_mbs1_gbs128"


def _pretraining_rows():
    for table in RAW["tables"]:
        for index, cells in enumerate(table["rows"]):
            assert len(cells) == len(table["columns"]), f"{table['section']} row {index + 1}"
            if table["task"] == "pretrain":
                yield table, dict(zip(table["columns"], cells, strict=True)), index


def _first(cell) -> float:
    return float(str(cell).split()[0])


@pytest.mark.parametrize(
    ("table", "row", "index"),
    list(_pretraining_rows()),
    ids=lambda v: v["section"] if isinstance(v, dict) and "section" in v else None,
)
def test_every_rows_tflops_follow_from_its_tokens_by_megatron_bridges_count(
    host, table, row, index
):
    arch = host.workloads()["llama31"].architecture(table["size"])
    per_token = megatron_bridge_sample(arch, int(row["Sequence Length"])).per_sample / int(
        row["Sequence Length"]
    )
    computed = _first(row["Tokens / sec / GPU"]) * per_token / 1e12
    # 1% is the rounding of the printed cells; a table whose two figures the document itself makes
    # disagree says so in its erratum (found by this test), and is held to what it says.
    tolerance = 0.025 if table.get("erratum") else 0.01
    assert computed == pytest.approx(_first(row["Model TFLOP / sec / GPU"]), rel=tolerance), (
        f"{table['section']} row {index + 1}"
    )


def test_the_figures_llmb_uses_are_the_newest_pretraining_rows_of_precisions_it_runs(host):
    summary = host.workloads()["llama31"].summary
    by_key = {(r.size, r.gpu, r.dtype, r.gpus): r for r in summary}
    assert len(by_key) == len(summary)
    # 25.11, DGX-H100: 14451 tokens/s/GPU, 744 TFLOP/s/GPU, GBS 128
    h100 = by_key[("8b", "h100", "fp8", 8)]
    assert (h100.tokens_per_s, h100.tflops_per_gpu, h100.gbs) == (14451 * 8, 744, 128)
    assert h100.step_time_s == pytest.approx(128 * 8192 / (14451 * 8))
    assert (h100.container, h100.date) == ("nvcr.io/nvidia/nemo:25.11", "2025-12-04")
    assert "25.11 NeMo Container" in h100.note and "DGX-H100" in h100.note
    # 405B on H100 was last published by 26.06, 70B by 26.04.01 (its revised figures)
    assert by_key[("405b", "h100", "fp8", 1024)].container.endswith("nemo:26.06")
    seventy = by_key[("70b", "gb300", "fp8", 64)]
    assert (seventy.container.endswith("nemo:26.04.01"), seventy.date, seventy.tflops_per_gpu) == (
        True,
        "2026-05-27",
        2348,
    )
    # no fine-tuning row, no MXFP8 row, nothing from a table that prints no precision
    assert all(r.dtype in ("bf16", "fp8", "nvfp4") for r in summary)
    assert not any("SFT" in r.note or "LoRA" in r.note or "25.09" in r.note for r in summary)


def test_a_table_without_a_precision_column_gives_no_figures():
    table = {
        "release": "25.09",
        "task": "pretrain",
        "size": "8b",
        "section": "s",
        "system": "DGX-H100",
        "columns": [
            "Model",
            "#-GPUs",
            "GBS",
            "MBS",
            "Sequence Length",
            "Tokens / sec / GPU",
            "Model TFLOP / sec / GPU",
        ],
        "rows": [["LLAMA3_8B", 8, 128, 1, 8192, 14079, 725]],
    }
    assert summary_from_dict({"source": {"document": "d"}, "tables": [table]}, {"h100"}) == ()


def test_compare_against_the_summary_names_release_and_date(cli, install_root):
    experiments = install_root / "workloads" / "llama31" / "experiments"
    run = make_run(
        experiments,
        MB_FP8,
        loggen.megatron_bridge_lines(range(1, 51), step_ms={i: 9300.0 for i in range(1, 51)}),
    )
    (run / "provenance.json").write_text(
        json.dumps(
            {"submission": {"gpu": "h100", "image": {"reference": "nvcr.io#nvidia/nemo:26.04.01"}}}
        )
    )
    result = cli("compare", str(run), "--reference", "summary", "--json")
    assert result.code == 0, result.out
    [row] = json.loads(result.out)
    [verdict] = row["verdicts"]
    assert (verdict["against"], verdict["outcome"]) == ("summary", "pass")
    assert verdict["ratio"] == pytest.approx((128 * 8192 / (14451 * 8) * 1000) / 9300.0)
    assert "Megatron-Bridge performance summary, 25.11 NeMo Container" in verdict["detail"]
    assert "2025-12-04" in verdict["detail"]
    assert "older than the run's nemo:26.04.01" in verdict["detail"]
    figure = row["reference"]["figure"]
    assert (figure["container"], figure["date"], figure["tflops_per_gpu"]) == (
        "25.11",
        "2025-12-04",
        744,
    )
