"""The Qwen3 recipe's tables as llmb reads them, through the installed CLI.

``PUBLISHED`` is the recipe document's ten tables (NVIDIA exemplar-performance v26.08.00,
qwen3/pretrain/README.md, commit b4ac983a38b181164a8c0f3a8ed6400817699726) re-typed row by row from
the document, independently of workload.yaml: per GPU type, size and precision, each GPU count with the
DP and GA the document prints.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

# (gpu, size, dtype) -> {gpus: (DP, GA)} as printed
PUBLISHED: dict[tuple[str, str, str], dict[int, tuple[int, int]]] = {}
_30B_MBS8 = {8: (8, 8), 16: (16, 8), 32: (32, 8), 64: (64, 8)}
_30B_MBS4 = {8: (8, 16), 16: (16, 16), 32: (32, 16), 64: (64, 16)}
for _gpu, _rows in (
    ("gb300", _30B_MBS8),
    ("gb200", _30B_MBS4),
    ("b300", _30B_MBS8),
    ("b200", _30B_MBS4),
):
    for _dtype in ("bf16", "fp8"):
        PUBLISHED[(_gpu, "30b", _dtype)] = _rows
PUBLISHED[("h100", "30b", "bf16")] = {16: (16, 64), 32: (32, 64), 64: (64, 64)}
for _dtype in ("bf16", "fp8"):
    PUBLISHED[("gb300", "235b", _dtype)] = {256: (64, 64), 512: (128, 64)}
    PUBLISHED[("gb200", "235b", _dtype)] = {256: (32, 256), 512: (64, 256)}
    PUBLISHED[("b300", "235b", _dtype)] = {256: (32, 128), 512: (64, 128)}
    PUBLISHED[("b200", "235b", _dtype)] = {256: (32, 256), 512: (64, 256)}
PUBLISHED[("h100", "235b", "bf16")] = {256: (16, 512), 512: (32, 512)}

# the layout columns as printed, the same for every GPU count of a (gpu, size, dtype):
# TP, PP, CP, EP, VP (None: N/A), MBS; GBS is 64 x GPUs for 30B and 32 x GPUs for 235B in every table
LAYOUTS = {
    ("gb300", "30b", "bf16"): (1, 1, 1, 8, None, 8),
    ("gb300", "30b", "fp8"): (1, 1, 1, 8, None, 8),
    ("gb300", "235b", "bf16"): (1, 4, 1, 32, None, 2),
    ("gb300", "235b", "fp8"): (1, 4, 1, 32, 12, 2),
    ("gb200", "30b", "bf16"): (1, 1, 1, 8, None, 4),
    ("gb200", "30b", "fp8"): (1, 1, 1, 8, None, 4),
    ("gb200", "235b", "bf16"): (1, 8, 1, 8, None, 1),
    ("gb200", "235b", "fp8"): (1, 8, 1, 32, 3, 1),
    ("b300", "30b", "bf16"): (1, 1, 1, 8, None, 8),
    ("b300", "30b", "fp8"): (1, 1, 1, 8, None, 8),
    ("b300", "235b", "bf16"): (1, 8, 1, 8, None, 2),
    ("b300", "235b", "fp8"): (1, 8, 1, 8, 3, 2),
    ("b200", "30b", "bf16"): (1, 1, 1, 8, None, 4),
    ("b200", "30b", "fp8"): (1, 1, 1, 8, None, 4),
    ("b200", "235b", "bf16"): (1, 8, 1, 8, 4, 1),
    ("b200", "235b", "fp8"): (1, 8, 1, 8, 3, 1),
    ("h100", "30b", "bf16"): (1, 1, 1, 16, None, 1),
    ("h100", "235b", "bf16"): (2, 8, 1, 32, 4, 1),
}
GBS_PER_GPU = {"30b": 64, "235b": 32}


def test_the_plugin_is_listed(llmb):
    plugins = {p["name"]: p for p in llmb("plugins", "--json").json()}
    assert plugins["qwen3"]["status"] == "loaded"
    assert plugins["qwen3"]["distribution"] == "llmb-plugin-qwen3"
    assert plugins["qwen3"]["workloads"] == ["qwen3"]


def test_list_shows_every_published_configuration(llmb):
    listed = llmb("list", "qwen3", "--json").json()
    rows = listed["configurations"] if isinstance(listed, dict) else listed
    found: dict[tuple[str, str, str], set[int]] = {}
    for row in rows:
        assert row["workload"] == "qwen3" and row["scaling"] == "weak"
        if row.get(
            "runs_recipes_of"
        ):  # another GPU type that runs a published row (the H200 the H100's)
            continue
        for dtype in row["dtypes"]:
            found.setdefault((row["gpu"], row["size"], dtype), set()).update(row["tested_gpus"])
    assert found == {key: set(scales) for key, scales in PUBLISHED.items()}


@pytest.mark.slow  # 53 plans, each its own llmb process
def test_every_row_plans_with_the_printed_dp_and_ga(llmb):
    asked = [
        (gpu, size, dtype, gpus)
        for (gpu, size, dtype), scales in PUBLISHED.items()
        for gpus in scales
    ]
    assert len(asked) == 53

    def plan(row):
        gpu, size, dtype, gpus = row
        return row, llmb(
            *f"plan qwen3 --size {size} --gpu {gpu} --dtype {dtype} --gpus {gpus} --json".split()
        ).json()

    with ThreadPoolExecutor(8) as pool:
        plans = dict(pool.map(plan, asked))
    for (gpu, size, dtype, gpus), got in plans.items():
        printed = PUBLISHED[(gpu, size, dtype)][gpus]
        assert (got["dp"], got["ga"]) == printed, (gpu, size, dtype, gpus)
        assert got["validated"] and got["steps"] == 50 and got["seq_len"] == 4096
        assert got["layers"] == {"30b": 48, "235b": 94}[size]
        assert got["framework"] == "megatron_bridge"
        layout = tuple(got[k] for k in ("tp", "pp", "cp", "ep", "vp", "mbs"))
        assert layout == LAYOUTS[(gpu, size, dtype)], (gpu, size, dtype, gpus)
        assert got["gbs"] == GBS_PER_GPU[size] * gpus, (gpu, size, dtype, gpus)
        assert got["etp"] == 1  # the plugin's adjustment: Megatron-Bridge's Qwen3 recipes' ETP
    assert set(LAYOUTS) == set(PUBLISHED)


def test_h100_has_no_fp8_and_235b_no_64_gpus(llmb):
    refused = llmb(*"plan qwen3 --size 30b --gpu h100 --dtype fp8 --gpus 16".split(), check=False)
    assert refused.returncode == 2 and "fp8" in refused.stderr.lower()
    refused = llmb(
        *"plan qwen3 --size 235b --gpu gb200 --dtype bf16 --gpus 64".split(), check=False
    )
    assert refused.returncode == 2, refused.stderr


def test_the_plan_cites_the_public_recipe(llmb):
    text = llmb(*"plan qwen3 --size 30b --gpu b200 --dtype fp8 --gpus 8".split()).stdout
    assert "Qwen3 pre-training recipe (NVIDIA LLM Benchmarking Collection v26.08.00" in text
    assert "v26.08.00" in text
