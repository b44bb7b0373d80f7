"""The machinery under the data: entry-point discovery, the JSON cache of
parsed data files, and the loader's checks on malformed workload files."""

from __future__ import annotations

import json
import os
import sys
from importlib.metadata import entry_points as stdlib_entry_points

import pytest
from llmb import yamlio
from llmb.errors import DataError
from llmb.plugins import entrypoints
from llmb.recipes.workload_file import load_workload, workload_from_dict
from workload_dicts import minimal_workload


def test_fast_scan_finds_what_importlib_metadata_finds():
    fast = {(e.name, e.value, e.distribution, e.version) for e in entrypoints.entry_points("llmb")}
    slow = {
        (e.name, e.value, e.dist.metadata["Name"], e.dist.version)
        for e in stdlib_entry_points(group="llmb")
    }
    assert fast == slow
    assert {"llama31", "llama4", "nemotron4", "nemotronh"} <= {name for name, *_ in fast}


def test_first_distribution_on_sys_path_wins(tmp_path, monkeypatch):
    for where, target in (("first", "first_module"), ("second", "second_module")):
        info = tmp_path / where / "llmb_plugin_twice-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: llmb-plugin-twice\nVersion: 1.0\n\nbody: x\n"
        )
        (info / "entry_points.txt").write_text(
            f"[console_scripts]\nx = y\n\n[llmb]\ntwice = {target}\n"
        )
    monkeypatch.setattr(sys, "path", [str(tmp_path / "first"), str(tmp_path / "second")])
    found = entrypoints.entry_points("llmb")
    assert [(e.name, e.value, e.distribution, e.version) for e in found] == [
        ("twice", "first_module", "llmb-plugin-twice", "1.0")
    ]


def test_a_zip_on_sys_path_falls_back_to_importlib_metadata(tmp_path, monkeypatch):
    archive = tmp_path / "plugins.zip"
    archive.write_bytes(b"PK\x05\x06" + b"\x00" * 18)  # an empty zip file
    monkeypatch.setattr(sys, "path", [str(archive), *sys.path])
    assert entrypoints._scan("llmb") is None
    assert {e.name for e in entrypoints.entry_points("llmb")} >= {"llama31", "nemotronh"}


def test_entry_point_load_resolves_attributes():
    ep = entrypoints.EntryPoint("x", "os.path:join", None, None)
    assert ep.load() is os.path.join


def test_parsed_yaml_is_cached_and_invalidated(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LLMB_NO_CACHE", raising=False)
    data = tmp_path / "w.yaml"
    data.write_text("a: 1\n")
    assert yamlio.load_yaml_file(data) == {"a": 1}
    (entry,) = (tmp_path / "cache").iterdir()
    assert json.loads(entry.read_text())["data"] == {"a": 1}
    # A cache hit is served without PyYAML:
    monkeypatch.setattr(yamlio, "load_yaml", lambda text: pytest.fail("parsed again"))
    assert yamlio.load_yaml_file(data) == {"a": 1}
    monkeypatch.undo()
    monkeypatch.setenv("LLMB_CACHE_DIR", str(tmp_path / "cache"))
    data.write_text("a: 22\n")  # new size and mtime
    assert yamlio.load_yaml_file(data) == {"a": 22}


def test_an_unwritable_cache_only_costs_speed(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("LLMB_CACHE_DIR", str(blocker / "cache"))
    data = tmp_path / "w.yaml"
    data.write_text("b: [1, 2]\n")
    assert yamlio.load_yaml_file(data) == {"b": [1, 2]}
    monkeypatch.setenv("LLMB_NO_CACHE", "1")
    assert yamlio.cache_dir() is None


def broken(path: str, value):
    data = minimal_workload()
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[int(last) if last.isdigit() else last] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            "variants.0.tables.0.gpu",
            "a100",
            "variant v: table 2: unknown GPU type 'a100'; valid: h100",
        ),
        (
            "variants.0.tables.0.rows.0.2",
            "FP16",
            "variant v: table 2: row 1: unknown dtype 'FP16'; valid: bf16, fp8, nvfp4",
        ),
        (
            "variants.0.tables.0.scaling",
            "Strongest",
            "unknown scaling 'Strongest'; valid: weak, strong",
        ),
        (
            "variants.0.framework",
            "jax",
            "variant v: unknown framework 'jax'; valid: megatron_bridge, nemo2",
        ),
        ("variants.0.tables.0.rows.0", ["1b", "8-16", "BF16"], "row 1: 3 cells for 10 columns"),
        ("variants.0.tables.0.rows.0.9", "GPUs/3", "impossible at 8 GPUs: GBS would be 2.667"),
        ("architectures.1b.colour", "red", "architecture 1b: unknown keys ['colour']"),
    ],
)
def test_malformed_data_is_refused_saying_where(path, value, message):
    with pytest.raises(
        ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        workload_from_dict(broken(path, value))


def test_base_architectures_copy_and_convert():
    data = minimal_workload()
    data["architectures"]["1b-wide"] = {"base": "1b", "hidden": 512, "published_params": "56e9"}
    arch = workload_from_dict(data).architectures["1b-wide"]
    assert (arch.hidden, arch.head_dim, arch.published_params, arch.layers) == (512, 128, 56e9, 4)
    data["architectures"] = {"2b": {"base": "later"}, **data["architectures"]}
    with pytest.raises(ValueError, match="architecture 2b: base 'later' is not defined above it"):
        workload_from_dict(data)


def test_a_variant_names_its_container_per_gpu_type():
    """``containers_by_gpu`` names the image a GPU type of the variant's tables runs in where it is not
    ``container`` (Nemotron-4 340B: nemo:25.07.01 on GB200 and B200); every other runs ``container``."""
    data = minimal_workload()
    h100_table = data["variants"][0]["tables"][0]
    data["variants"][0]["tables"].append({**h100_table, "table": 3, "gpu": "gb200"})
    data["variants"][0]["container"] = "nvcr.io#nvidia/nemo:25.09.00"
    data["variants"][0]["containers_by_gpu"] = {"GB200": " nvcr.io#nvidia/nemo:25.07.01 "}
    variant = workload_from_dict(data).variant("v")
    assert variant.containers_by_gpu == {"gb200": "nvcr.io#nvidia/nemo:25.07.01"}
    assert variant.container_for("gb200") == "nvcr.io#nvidia/nemo:25.07.01"
    assert variant.container_for("h100") == variant.container_for(None) == variant.container
    assert variant.containers() == ("nvcr.io#nvidia/nemo:25.09.00", "nvcr.io#nvidia/nemo:25.07.01")
    assert variant.containers("gb200") == ("nvcr.io#nvidia/nemo:25.07.01",)
    assert variant.containers("b200") == ()
    plain = workload_from_dict(minimal_workload()).variant("v")
    assert (plain.containers_by_gpu, plain.containers()) == ({}, ())  # no container named

    for by_gpu, container, message in (
        ({"gb200": "x"}, None, "variant v: containers_by_gpu: needs the variant's container too"),
        ({"a100": "x"}, "c", "containers_by_gpu: unknown GPU type 'a100'; valid: "),
        ({"b200": "x"}, "c", "containers_by_gpu: b200 has no table in this variant; its GPU types: h100, gb200"),
        ({"gb200": "a b"}, "c", "containers_by_gpu: gb200: expected one container image"),
        ({"gb200": None}, "c", "containers_by_gpu: gb200: expected one container image"),
        ({"gb200": "x", "GB200": "y"}, "c", "containers_by_gpu: gb200 is named twice"),
        (["gb200"], "c", "containers_by_gpu: expected a mapping of GPU types to container images"),
        ({}, "c", "containers_by_gpu: expected a mapping of GPU types to container images"),
    ):  # fmt: skip
        data["variants"][0]["container"] = container
        data["variants"][0]["containers_by_gpu"] = by_gpu
        with pytest.raises(ValueError, match=message.replace("(", r"\(")):
            workload_from_dict(data)


def test_load_workload_wraps_errors_with_the_file(monkeypatch):
    monkeypatch.setattr(
        "llmb.recipes.workload_file._read",
        lambda package, resource: broken("variants.0.framework", "jax"),
    )
    with pytest.raises(
        DataError, match="llmb_plugin_x/workload.yaml: variant v: unknown framework 'jax'"
    ):
        load_workload("llmb_plugin_x")
