"""One order for GPU types and dtypes wherever llmb lists them (issue 43, item 6): the GPU catalogue's
(h100, h200, b200, ...) and bf16, fp8, nvfp4; and the H200, which runs the H100's recipes, is listed."""

from __future__ import annotations

import json
import re
from itertools import groupby

from llmb.recipes.gpus import DTYPES, catalogue, in_dtype_order, in_gpu_order


def test_the_orders_are_the_catalogues():
    assert list(catalogue())[:2] == ["h100", "h200"]
    assert in_gpu_order(["gb300", "b200", "zz9", "h200", "h100", "b200"]) == [
        "h100",
        "h200",
        "b200",
        "gb300",
        "zz9",  # a name the catalogue lacks: last
    ]
    assert in_dtype_order(["nvfp4", "fp8", "bf16", "fp8", "mxfp8"]) == [*DTYPES, "mxfp8"]


def test_list_orders_gpus_and_dtypes_one_way_and_lists_the_h200(cli, monkeypatch):
    matrix = json.loads(cli("list", "--json").out)  # the published recipes' rows: the H200 has none
    for e in matrix:
        assert e["dtypes"] == in_dtype_order(e["dtypes"]), e
    for _, rows in groupby(matrix, key=lambda e: (e["workload"], e["variant"], e["size"])):
        gpus = [e["gpu"] for e in rows]
        assert gpus == sorted(gpus, key=in_gpu_order(gpus).index), gpus
    h100 = [e for e in matrix if e["gpu"] == "h100"]
    assert h100 and all(e["also_run_by"] == ["h200"] for e in h100)
    assert not [e for e in matrix if e["gpu"] == "h200"]
    # the table: an H200 row beside each H100 row, and why
    monkeypatch.setenv("COLUMNS", "200")
    shown = cli("list").out
    rows = [line.split() for line in shown.splitlines() if line.startswith(("llama31", "qwen3"))]
    h100_rows = [r for r in rows if r[3] == "h100"]
    assert h100_rows
    assert [r[:3] + r[4:] for r in rows if r[3] == "h200"] == [r[:3] + r[4:] for r in h100_rows]
    assert (
        "h200 runs the h100 recipe (same chip, more memory: NVIDIA's H200 product page)." in shown
    )


def test_a_wrong_gpu_type_lists_the_valid_ones_in_the_catalogues_order(cli):
    wrong = cli("plan", "llama31", "--size", "8b", "--gpu", "a100", "--dtype", "bf16")
    listed = re.search(r"valid GPU types: ([a-z0-9, ]+)\.", wrong.err).group(1).split(", ")
    assert listed == in_gpu_order(listed) and "h200" in listed
