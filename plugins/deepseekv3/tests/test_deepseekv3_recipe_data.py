"""The DeepSeek-V3 and Kimi-K2 recipes' tables as llmb reads them, through the installed CLI.

``PUBLISHED`` re-types every table row by row from the documents, independently of the plugin's YAML:
the DeepSeek-V3 pre-training recipe (NVIDIA exemplar-performance v26.08.00,
deepseek_v3/pretrain/megatron_bridge/README.md, commit b4ac983a38b181164a8c0f3a8ed6400817699726) and
the Kimi-K2 pre-training recipe (kimi-k2/README.md, commit 97b1fd4bf95a9ae85dec0b243d9f97ac038deffb):
per workload, GPU type, precision and GPU count, the layout (TP, PP, CP, EP, VP, MBS, GBS) and the DP
and GA the document prints. Kimi-K2's tables print no GA: it is GBS / (MBS x DP), written out here.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

# (workload, gpu, dtype, gpus) -> (TP, PP, CP, EP, DP, VP (None: N/A or blank), MBS, GBS, GA)
PUBLISHED: dict[tuple[str, str, str, int], tuple] = {
    # DeepSeek-V3, ## GB300
    ("deepseekv3", "gb300", "nvfp4", 128): (1, 4, 1, 32, 32, 4, 2, 2048, 32),
    ("deepseekv3", "gb300", "fp8", 128): (1, 4, 1, 32, 32, 4, 1, 2048, 64),
    ("deepseekv3", "gb300", "bf16", 128): (1, 4, 1, 32, 32, 4, 1, 2048, 64),
    ("deepseekv3", "gb300", "nvfp4", 256): (1, 2, 1, 32, 128, 8, 2, 4096, 16),
    ("deepseekv3", "gb300", "fp8", 256): (1, 2, 1, 32, 128, 8, 1, 4096, 32),
    ("deepseekv3", "gb300", "bf16", 256): (1, 4, 1, 64, 64, 4, 1, 4096, 64),
    ("deepseekv3", "gb300", "nvfp4", 512): (1, 2, 1, 32, 256, 8, 2, 8192, 16),
    ("deepseekv3", "gb300", "fp8", 512): (1, 2, 1, 32, 256, 8, 1, 8192, 32),
    ("deepseekv3", "gb300", "bf16", 512): (1, 4, 1, 64, 128, 4, 1, 8192, 64),
    # ## GB200: FP8 at 128; "NVFP4/FP8/BF16" at 256 and 512
    ("deepseekv3", "gb200", "fp8", 128): (2, 2, 1, 32, 32, 8, 1, 2048, 64),
    **{
        ("deepseekv3", "gb200", dtype, 256): (1, 4, 1, 64, 64, 4, 1, 4096, 64)
        for dtype in ("nvfp4", "fp8", "bf16")
    },
    **{
        ("deepseekv3", "gb200", dtype, 512): (1, 4, 1, 64, 128, 4, 1, 8192, 64)
        for dtype in ("nvfp4", "fp8", "bf16")
    },
    # ## B300: NVFP4 rows and "FP8/BF16" rows
    ("deepseekv3", "b300", "nvfp4", 128): (1, 8, 1, 8, 16, 2, 2, 2048, 64),
    ("deepseekv3", "b300", "fp8", 128): (1, 8, 1, 8, 16, 2, 1, 2048, 128),
    ("deepseekv3", "b300", "bf16", 128): (1, 8, 1, 8, 16, 2, 1, 2048, 128),
    ("deepseekv3", "b300", "nvfp4", 256): (1, 8, 1, 8, 32, 2, 2, 4096, 64),
    ("deepseekv3", "b300", "fp8", 256): (1, 8, 1, 8, 32, 2, 1, 4096, 128),
    ("deepseekv3", "b300", "bf16", 256): (1, 8, 1, 8, 32, 2, 1, 4096, 128),
    ("deepseekv3", "b300", "nvfp4", 512): (1, 8, 1, 8, 64, 2, 2, 8192, 64),
    ("deepseekv3", "b300", "fp8", 512): (1, 8, 1, 8, 64, 2, 1, 8192, 128),
    ("deepseekv3", "b300", "bf16", 512): (1, 8, 1, 8, 64, 2, 1, 8192, 128),
    # ## B200: BF16's VP cell blank
    ("deepseekv3", "b200", "fp8", 128): (1, 8, 1, 8, 16, 2, 1, 2048, 128),
    ("deepseekv3", "b200", "fp8", 256): (1, 8, 1, 8, 32, 2, 1, 4096, 128),
    ("deepseekv3", "b200", "bf16", 256): (1, 8, 1, 8, 32, None, 1, 4096, 128),
    ("deepseekv3", "b200", "fp8", 512): (1, 8, 1, 8, 64, 2, 1, 8192, 128),
    ("deepseekv3", "b200", "bf16", 512): (1, 8, 1, 8, 64, None, 1, 8192, 128),
    # ## H100
    ("deepseekv3", "h100", "fp8", 1024): (2, 8, 1, 64, 64, 2, 1, 16384, 256),
    ("deepseekv3", "h100", "bf16", 1024): (2, 8, 1, 64, 64, 4, 1, 16384, 256),
    # Kimi-K2 (FP8 only); GA = GBS / (MBS x DP)
    ("kimik2", "gb300", "fp8", 256): (1, 4, 1, 64, 64, 4, 1, 4096, 4096 // (1 * 64)),
    ("kimik2", "gb300", "fp8", 512): (1, 4, 1, 64, 128, 4, 1, 8192, 8192 // (1 * 128)),
    ("kimik2", "gb200", "fp8", 256): (1, 4, 1, 64, 64, 4, 1, 2048, 2048 // (1 * 64)),
    ("kimik2", "gb200", "fp8", 512): (1, 4, 1, 64, 128, 4, 1, 4096, 4096 // (1 * 128)),
    ("kimik2", "b300", "fp8", 256): (1, 16, 1, 16, 16, None, 2, 4096, 4096 // (2 * 16)),
    ("kimik2", "b300", "fp8", 512): (1, 16, 1, 16, 32, None, 2, 8192, 8192 // (2 * 32)),
    ("kimik2", "b200", "fp8", 256): (1, 16, 1, 16, 16, None, 1, 4096, 4096 // (1 * 16)),
    ("kimik2", "b200", "fp8", 512): (1, 16, 1, 16, 32, None, 1, 8192, 8192 // (1 * 32)),
}
SIZE = {"deepseekv3": "671b", "kimik2": "1t"}
# the model's layers: the DeepSeek-V3 tables' Layers column; Kimi-K2's config.json num_hidden_layers
LAYERS = {"deepseekv3": 61, "kimik2": 61}


def test_the_derivation_matches_every_printed_cell():
    for key, (tp, pp, cp, _ep, dp, _vp, mbs, gbs, ga) in PUBLISHED.items():
        assert key[3] == tp * pp * cp * dp, key
        assert gbs == mbs * dp * ga, key
    assert (
        len(PUBLISHED) == 32 + 8
    )  # DeepSeek-V3: GB300 9, GB200 7, B300 9, B200 5, H100 2; Kimi-K2 8


def test_the_plugin_is_listed(llmb):
    plugins = {p["name"]: p for p in llmb("plugins", "--json").json()}
    assert plugins["deepseekv3"]["status"] == "loaded"
    assert plugins["deepseekv3"]["distribution"] == "llmb-plugin-deepseekv3"
    assert plugins["deepseekv3"]["workloads"] == ["deepseekv3", "kimik2"]


@pytest.mark.parametrize("workload", ["deepseekv3", "kimik2"])
def test_list_shows_every_published_configuration(llmb, workload):
    listed = llmb("list", workload, "--json").json()
    rows = listed["configurations"] if isinstance(listed, dict) else listed
    found: set[tuple[str, str, str, int]] = set()
    for row in rows:
        assert row["workload"] == workload and row["scaling"] == "weak"
        assert row["size"] == SIZE[workload]
        if row.get(
            "runs_recipes_of"
        ):  # another GPU type that runs a published row (the H200 the H100's)
            continue
        for dtype in row["dtypes"]:
            found.update((workload, row["gpu"], dtype, n) for n in row["tested_gpus"])
    assert found == {key for key in PUBLISHED if key[0] == workload}


@pytest.mark.slow  # 40 plans, each its own llmb process
def test_every_row_plans_with_the_printed_dp_and_ga(llmb):
    def plan(key):
        workload, gpu, dtype, gpus = key
        return key, llmb(
            *f"plan {workload} --gpu {gpu} --dtype {dtype} --gpus {gpus} --json".split()
        ).json()

    with ThreadPoolExecutor(8) as pool:
        plans = dict(pool.map(plan, PUBLISHED))
    for key, got in plans.items():
        tp, pp, cp, ep, dp, vp, mbs, gbs, ga = PUBLISHED[key]
        workload = key[0]
        assert (got["dp"], got["ga"]) == (dp, ga), key
        assert (got["tp"], got["pp"], got["cp"], got["ep"], got["vp"], got["mbs"]) == (
            tp,
            pp,
            cp,
            ep,
            vp,
            mbs,
        ), key
        assert got["gbs"] == gbs, key
        assert got["validated"] and got["steps"] == 50 and got["seq_len"] == 4096, key
        assert got["layers"] == LAYERS[workload] and got["size"] == SIZE[workload], key
        assert got["framework"] == "megatron_bridge" and got["etp"] == 1, key


def test_what_the_tables_do_not_offer_is_refused(llmb):
    for args in (
        "plan kimik2 --gpu gb300 --dtype bf16 --gpus 256",  # Kimi-K2: FP8 only
        "plan kimik2 --gpu h100 --dtype fp8 --gpus 256",  # no H100 table
        "plan deepseekv3 --gpu h100 --dtype nvfp4 --gpus 1024",  # NVFP4 off Hopper only
        "plan deepseekv3 --gpu b200 --dtype nvfp4 --gpus 256",  # no NVFP4 row on B200
    ):
        refused = llmb(*args.split(), check=False)
        assert refused.returncode == 2, (args, refused.stdout[-500:])


def test_the_names_users_type_reach_the_workloads(llmb):
    for name, workload in (
        ("deepseek-v3", "deepseekv3"),
        ("pretrain_deepseek-v3", "deepseekv3"),
        ("kimi-k2", "kimik2"),
        ("pretrain_kimi-k2", "kimik2"),
    ):
        got = llmb(*f"plan {name} --gpu b200 --dtype fp8 --gpus 256 --json".split()).json()
        assert got["workload"] == workload, name


def test_the_plan_cites_the_public_recipes(llmb):
    text = llmb(*"plan deepseekv3 --gpu b200 --dtype fp8 --gpus 128".split()).stdout
    assert "DeepSeek-V3 pre-training recipe (NVIDIA LLM Benchmarking Collection v26.08.00" in text
    text = llmb(*"plan kimik2 --gpu b300 --dtype fp8 --gpus 256".split()).stdout
    assert "Kimi-K2 pre-training recipe (NVIDIA LLM Benchmarking Collection v26.08.00" in text
