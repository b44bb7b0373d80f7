"""The plugins' data files against the seed documents, cell by cell.

Every recipe table and every published performance table of every seed must
be in a plugin's data, with the same cells; nothing may be added that the
seed does not print.
"""

from __future__ import annotations

import re
from collections import defaultdict
from importlib.resources import files

import pytest
from llmb.recipes.workload_file import COLUMN_NAMES
from llmb.yamlio import load_yaml
from seed_tables import read_tables

PLUGINS = ("llama31", "llama4", "nemotron4", "nemotronh")


def _raw(workload: str) -> dict:
    return load_yaml(files(f"llmb_plugin_{workload}").joinpath("workload.yaml").read_bytes())


def _norm(cell: object) -> str:
    return re.sub(r"\s+", " ", str(cell)).strip().lower()


def _is_recipe_table(header: list[str]) -> bool:
    names = {h.strip().lower() for h in header}
    return {"tp", "gbs", "gpus"} <= names


def _is_performance_table(header: list[str]) -> bool:
    return len(header) > 1 and all(re.match(r"\d+x ", h) for h in header[1:])


def _data_tables():
    for workload in PLUGINS:
        for variant in _raw(workload)["variants"]:
            for table in variant["tables"]:
                yield workload, variant["document"], table


def test_every_seed_recipe_table_is_in_the_data(seeds):
    in_data = {(seed, table["table"]) for _, seed, table in _data_tables()}
    in_seeds = {
        (path.name, t.index)
        for path in sorted(seeds.glob("*.md"))
        for t in read_tables(path.read_text())
        if _is_recipe_table(t.header)
    }
    assert in_seeds, "no recipe table found in the seeds"
    assert in_data == in_seeds


@pytest.mark.parametrize("workload", PLUGINS)
def test_recipe_tables_match_the_seed_cell_by_cell(workload, seeds):
    for variant in _raw(workload)["variants"]:
        seed_tables = read_tables((seeds / variant["document"]).read_text())
        for table in variant["tables"]:
            printed = seed_tables[table["table"]]
            where = f"{variant['document']} table {table['table']}"
            assert [COLUMN_NAMES[h.strip().lower()] for h in printed.header] == [
                COLUMN_NAMES.get(str(c).lower(), str(c).lower()) for c in table["columns"]
            ], where
            assert len(table["rows"]) == len(printed.rows), where
            for index, (data_row, seed_row) in enumerate(
                zip(table["rows"], printed.rows, strict=True)
            ):
                assert [_norm(c) for c in data_row] == [_norm(c) for c in seed_row], (
                    f"{where} row {index + 1}"
                )


def _performance(seed_text: str) -> dict[int, dict[int, dict[str, str]]]:
    """seed table index -> GPUs -> metric -> printed cell."""
    out: dict[int, dict[int, dict[str, str]]] = {}
    for t in read_tables(seed_text):
        if not _is_performance_table(t.header):
            continue
        gpus = [int(re.match(r"(\d+)x", h).group(1)) for h in t.header[1:]]
        table: dict[int, dict[str, str]] = {g: {} for g in gpus}
        for row in t.rows:
            name = row[0].lower()
            metric = (
                "step_time_s"
                if "step time" in name
                else "days_1t"
                if "time to train" in name
                else "tokens_per_s"
                if "tokens per second" in name
                else "mfu_pct"
                if "utilization" in name
                else None
            )
            assert metric, f"unknown performance row {row[0]!r}"
            for g, cell in zip(gpus, row[1:], strict=True):
                table[g][metric] = cell.replace("%", "").strip()
        out[t.index] = table
    return out


def test_every_published_performance_table_is_in_the_references(host, seeds):
    printed = {
        (path.name, index, g): metrics
        for path in sorted(seeds.glob("*.md"))
        for index, table in _performance(path.read_text()).items()
        for g, metrics in table.items()
    }
    stored = {}
    for workload in host.workloads().values():
        for ref in workload.references:
            if ref.provenance.table is not None:
                stored[(ref.provenance.seed, ref.provenance.table, ref.gpus)] = ref
    assert set(stored) == set(printed)
    for key, metrics in printed.items():
        ref = stored[key]
        for metric, cell in metrics.items():
            value = (
                ref.printed_mfu_pct
                if metric == "mfu_pct" and ref.printed_mfu_pct is not None
                else getattr(ref, metric)
            )  # the printed figure is kept beside llmb's correction
            if cell.lower() == "n/a":
                assert value is None, (key, metric)
            else:
                assert value == float(cell), (key, metric, value, cell)


def test_reference_rows_name_a_recipe_llmb_can_resolve(host):
    from llmb.recipes.records import RecipeRequest

    for workload in host.workloads().values():
        for ref in workload.references:
            recipe = host.resolve(
                RecipeRequest(
                    workload=workload.name,
                    size=ref.size,
                    gpu=ref.gpu,
                    dtype=ref.dtype,
                    gpus=ref.gpus,
                    variant=ref.variant,
                    strong_scaling=ref.scaling == "strong",
                )
            )
            assert recipe.validated, ref


def test_defaults_are_the_seeds_launch_defaults(host):
    # The launch.sh defaults each seed documents.
    expected = {
        ("llama31", "megatron-bridge"): {"size": "405b", "dtype": "fp8"},
        ("llama31", "nemo2"): {},
        ("llama4", "nemo2"): {"size": "400b", "dtype": "bf16"},
        ("nemotron4", "nemo2"): {"size": "340b", "dtype": "fp8"},
        ("nemotronh", "nemo2"): {"size": "56b", "dtype": "fp8", "gpu": "h100"},
    }
    # the example plugin examples/llmb-plugin-qwen3, where installed
    if "qwen3" in host.workloads():
        expected[("qwen3", "megatron-bridge")] = {"size": "235b", "dtype": "bf16"}
    # plugins/deepseekv3: the DeepSeek-V3 recipe's launch.sh (DTYPE bf16, MODEL_SIZE fixed 671b) and the
    # Kimi-K2 one's (DTYPE fp8, the only one; 1t)
    if "deepseekv3" in host.workloads():
        expected[("deepseekv3", "megatron-bridge")] = {"size": "671b", "dtype": "bf16"}
        expected[("kimik2", "megatron-bridge")] = {"size": "1t", "dtype": "fp8"}
    # plugins/gptoss: the GPT-OSS recipe's launch.sh (120b, DTYPE bf16) and the MLPerf one's (20b, nvfp4)
    if "gptoss" in host.workloads():
        expected[("gptoss", "megatron-bridge")] = {"size": "120b", "dtype": "bf16"}
        expected[("gptoss", "mlperf")] = {"size": "20b", "dtype": "nvfp4"}
    found = defaultdict(dict)
    for workload in host.workloads().values():
        for variant in workload.variants:
            found[(workload.name, variant.name)] = dict(variant.defaults)
    assert dict(found) == expected


def test_windows_follow_the_seeds(host):
    windows = {w.name: {v.name: v.window for v in w.variants} for w in host.workloads().values()}
    assert windows["llama4"]["nemo2"] == (11, 44)
    assert windows["nemotronh"]["nemo2"] == (11, 44)
    assert windows["llama31"]["megatron-bridge"] == (35, 44)
    assert windows["nemotron4"]["nemo2"] == (35, 44)
