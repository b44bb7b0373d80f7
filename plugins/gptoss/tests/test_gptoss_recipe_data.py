"""The GPT-OSS recipes' tables as llmb reads them, through the installed CLI.

Re-typed row by row from the documents, independently of workload.yaml (NVIDIA exemplar-performance
v26.08.00, commit 97b1fd4bf95a9ae85dec0b243d9f97ac038deffb):

- gpt-oss/pretrain/megatron_bridge/README.md: five tables, one per GPU type, each one 120b BF16 row
  for 64-512 GPUs, 36 layers, sequence 4096, GBS = GPUs*20, DP and GA printed as formulas;
- gpt-oss/pretrain/mlperf/README.md: two tables (GB300, GB200) of GPT-OSS 20B rows, 24 layers,
  sequence 8192, with printed DP and GA that are not Megatron's (the dp-ga errata).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import pytest

# ---- 120b: per GPU type, the printed layout and the DP and GA formulas
# (TP, PP, CP, EP, ETP, VP (None: NA), MBS), DP as a fraction of the GPUs, GA as printed
LAYOUT_120B = {
    "gb300": ((1, 1, 1, 64, 1, None, 4), Fraction(1), 5),
    "gb200": ((1, 1, 1, 64, 1, None, 4), Fraction(1), 5),
    "b300": ((1, 1, 1, 8, 1, None, 4), Fraction(1), 5),
    "b200": ((1, 1, 1, 8, 1, None, 4), Fraction(1), 5),
    "h100": ((1, 4, 1, 8, 1, None, 1), Fraction(1, 4), 80),
}
GBS_PER_GPU_120B = 20
# the scales metadata.yaml lists inside the tables' 64-512 (GB300's multiples of 72 are a note)
SCALES_120B = (64, 128, 256, 512)

# ---- 20b (MLPerf): (gpu, dtype, gpus) -> (TP, PP, CP, EP, VP, MBS, GBS), (DP, GA) as printed
PUBLISHED_20B = {
    ("gb300", "nvfp4", 8): ((1, 1, 1, 2, None, 3, 24), (4, 2)),
    ("gb300", "fp8", 8): ((1, 1, 1, 1, None, 3, 24), (8, 1)),
    ("gb300", "nvfp4", 72): ((1, 1, 2, 4, None, 1, 36), (9, 4)),
    ("gb300", "fp8", 72): ((1, 1, 2, 4, None, 1, 36), (9, 4)),
    ("gb300", "fp8", 512): ((2, 1, 4, 8, None, 1, 64), (8, 8)),
    ("gb200", "nvfp4", 8): ((1, 1, 1, 2, None, 2, 16), (4, 2)),
    ("gb200", "fp8", 8): ((1, 1, 1, 1, None, 2, 16), (8, 1)),
    ("gb200", "nvfp4", 72): ((1, 1, 2, 4, None, 1, 36), (9, 4)),
    ("gb200", "fp8", 72): ((1, 1, 2, 4, None, 1, 36), (9, 4)),
    ("gb200", "fp8", 512): ((2, 1, 4, 8, None, 1, 64), (8, 8)),
}
# the erratum each row whose printed DP/GA is not Megatron's carries (by its EP)
DP_GA_ERRATUM = {
    2: "gptoss-mlperf-dp-ga-ep2",
    4: "gptoss-mlperf-dp-ga-ep4",
    8: "gptoss-mlperf-dp-ga-ep8",
}


def derived(gpus: int, tp: int, pp: int, cp: int, mbs: int, gbs: int) -> tuple[int, int]:
    dp = gpus // (tp * pp * cp)
    return dp, gbs // (mbs * dp)


def test_the_plugin_is_listed(llmb):
    plugins = {p["name"]: p for p in llmb("plugins", "--json").json()}
    assert plugins["gptoss"]["status"] == "loaded"
    assert plugins["gptoss"]["distribution"] == "llmb-plugin-gptoss"
    assert plugins["gptoss"]["workloads"] == ["gptoss"]


def test_list_shows_every_published_configuration(llmb):
    listed = llmb("list", "gptoss", "--json").json()
    rows = listed["configurations"] if isinstance(listed, dict) else listed
    found: dict[tuple[str, str, str], set[int]] = {}
    for row in rows:
        assert row["workload"] == "gptoss" and row["scaling"] == "weak"
        if row.get("runs_recipes_of"):  # another GPU type that runs a published row (H200: H100's)
            continue
        for dtype in row["dtypes"]:
            found.setdefault((row["gpu"], row["size"], dtype), set()).update(row["tested_gpus"])
    expected: dict[tuple[str, str, str], set[int]] = {
        (gpu, "120b", "bf16"): {64, 512}
        for gpu in LAYOUT_120B  # the range's ends
    }
    for gpu, dtype, gpus in PUBLISHED_20B:
        expected.setdefault((gpu, "20b", dtype), set()).add(gpus)
    assert found == expected


def test_the_printed_120b_dp_and_ga_are_the_derivation():
    for _gpu, ((tp, pp, cp, _ep, _etp, _vp, mbs), dp_share, ga) in LAYOUT_120B.items():
        for gpus in SCALES_120B:
            assert derived(gpus, tp, pp, cp, mbs, GBS_PER_GPU_120B * gpus) == (gpus * dp_share, ga)


@pytest.mark.slow  # 30 plans, each its own llmb process
def test_every_row_plans_with_the_published_layout(llmb):
    asked = [
        ("megatron-bridge", gpu, "120b", "bf16", n) for gpu in LAYOUT_120B for n in SCALES_120B
    ]
    asked += [("mlperf", gpu, "20b", dtype, n) for gpu, dtype, n in PUBLISHED_20B]
    assert len(asked) == 30

    def plan(row):
        variant, gpu, size, dtype, gpus = row
        args = f"plan gptoss --variant {variant} --size {size} --gpu {gpu} --dtype {dtype} --gpus {gpus} --json"
        return row, llmb(*args.split()).json()

    with ThreadPoolExecutor(8) as pool:
        plans = dict(pool.map(plan, asked))
    for (variant, gpu, size, dtype, gpus), got in plans.items():
        where = (variant, gpu, size, dtype, gpus)
        assert got["validated"] and got["steps"] == 50, where
        assert got["framework"] == "megatron_bridge" and got["variant"] == variant, where
        errata = {e["id"] for e in got.get("errata", [])}
        if size == "120b":
            layout, dp_share, ga = LAYOUT_120B[gpu]
            assert tuple(got[k] for k in ("tp", "pp", "cp", "ep", "etp", "vp", "mbs")) == layout, (
                where
            )
            assert got["gbs"] == GBS_PER_GPU_120B * gpus, where
            assert (got["dp"], got["ga"]) == (gpus * dp_share, ga), where  # as printed
            assert (got["layers"], got["seq_len"]) == (36, 4096), where
            assert not errata, where
        else:
            (tp, pp, cp, ep, vp, mbs, gbs), printed = PUBLISHED_20B[(gpu, dtype, gpus)]
            assert tuple(got[k] for k in ("tp", "pp", "cp", "ep", "vp", "mbs", "gbs")) == (
                tp,
                pp,
                cp,
                ep,
                vp,
                mbs,
                gbs,
            ), where
            assert got["etp"] == 1, (
                where
            )  # the plugin's adjustment: Megatron-Bridge's gpt_oss_20b ETP
            assert (got["layers"], got["seq_len"]) == (24, 8192), where
            dp_ga = derived(gpus, tp, pp, cp, mbs, gbs)
            assert (got["dp"], got["ga"]) == dp_ga, where
            if printed == dp_ga:
                assert not errata, where
            else:
                assert errata == {DP_GA_ERRATUM[ep]}, where


def test_gb300_72_gpus_is_refused_for_120b(llmb):
    refused = llmb(
        *"plan gptoss --size 120b --gpu gb300 --dtype bf16 --gpus 72".split(), check=False
    )
    assert refused.returncode == 2 and "EP" in refused.stderr, refused.stderr


def test_the_120b_tables_have_no_fp8(llmb):
    refused = llmb(*"plan gptoss --size 120b --gpu b200 --dtype fp8 --gpus 64".split(), check=False)
    assert refused.returncode == 2 and "fp8" in refused.stderr.lower()


def test_the_plan_cites_the_public_recipes(llmb):
    text = llmb(*"plan gptoss --size 120b --gpu gb200 --dtype bf16 --gpus 128".split()).stdout
    assert "GPT-OSS pre-training recipe (NVIDIA LLM Benchmarking Collection v26.08.00" in text
    text = llmb(
        *"plan gptoss --variant mlperf --size 20b --gpu gb300 --dtype nvfp4 --gpus 8".split()
    ).stdout
    assert (
        "GPT-OSS 20B MLPerf Training recipe (NVIDIA LLM Benchmarking Collection v26.08.00" in text
    )
