"""Workloads NVIDIA's collection deprecated (issue 35): ``deprecated:`` in workload.yaml names who, in which
release and where; llmb keeps the workload listed and runnable, and says so in ``llmb list`` and as one
warning of ``llmb plan`` and ``llmb run``."""

from __future__ import annotations

import pytest
from llmb.recipes.workload_file import workload_from_dict
from workload_dicts import minimal_workload

# NVIDIA/exemplar-performance v26.08.00 README.md, Deprecated table: "Last Version" of each row.
DEPRECATED = {"llama4": "25.08", "nemotron4": "26.02.01"}


def test_the_entry_is_read_into_the_workload_record():
    raw = minimal_workload()
    raw["deprecated"] = {
        "by": "NVIDIA's LLM Benchmarking Collection (NVIDIA/exemplar-performance)",
        "release": "v26.08.00",
        "document": "README.md, Deprecated table",
        "last_release": "25.08",
    }
    d = workload_from_dict(raw).deprecated
    assert (d.by, d.release, d.document, d.last_release, d.commit) == (
        "NVIDIA's LLM Benchmarking Collection (NVIDIA/exemplar-performance)",
        "v26.08.00",
        "README.md, Deprecated table",
        "25.08",
        "",
    )
    assert d.describe() == (
        "deprecated by NVIDIA's LLM Benchmarking Collection (NVIDIA/exemplar-performance) in its release "
        "v26.08.00 (README.md, Deprecated table; last shipped in 25.08)"
    )
    assert workload_from_dict(minimal_workload()).deprecated is None


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("yes", "expected a mapping: by, release and document"),
        ({"by": "NVIDIA", "release": "v26.08.00"}, "missing document"),
        ({"by": "NVIDIA", "document": "README.md"}, "missing release"),
        (
            {"by": "NVIDIA", "release": "v1", "document": "README.md", "since": "v1"},
            "unknown keys ['since']; valid: by, release, document, last_release, commit",
        ),
    ],
)
def test_a_malformed_entry_is_refused_naming_what_is_wrong(entry, message):
    raw = minimal_workload()
    raw["deprecated"] = entry
    with pytest.raises(ValueError, match="deprecated: ") as caught:
        workload_from_dict(raw)
    assert message in str(caught.value)


def test_list_marks_llama4_and_nemotron4_deprecated_and_keeps_them(cli):
    listing = cli("list", "--json").json()
    assert {e["workload"] for e in listing} >= {"llama31", "llama4", "nemotron4", "nemotronh"}
    for entry in listing:
        deprecated = entry["deprecated"]
        if entry["workload"] not in DEPRECATED:
            assert deprecated is None, entry
            continue
        assert deprecated["release"] == "v26.08.00"
        assert deprecated["last_release"] == DEPRECATED[entry["workload"]]
        assert "NVIDIA/exemplar-performance" in deprecated["by"]
        assert deprecated["document"] == "README.md, Deprecated table"

    text = cli("list").out
    marked = text.split("Deprecated (still listed and runnable here):\n", 1)[1].split("\n\n")[0]
    assert [line.split(":")[0].strip() for line in marked.splitlines()] == ["llama4", "nemotron4"]
    for name, last in DEPRECATED.items():
        line = next(line for line in marked.splitlines() if line.strip().startswith(name))
        assert "v26.08.00" in line and f"last shipped in {last}" in line
        # its rows are all still there
        assert any(row.split()[:1] == [name] for row in text.splitlines())

    one = cli("list", "nemotronh").out
    assert "Deprecated" not in one
    assert "llama4: deprecated by" in cli("list", "llama4").out


def test_plan_and_run_say_it_in_one_warning(cli, tmp_path, monkeypatch):
    plan = cli("plan", "llama4", "--gpu", "h100", "--dtype", "bf16", "--gpus", "512", "--json")
    assert plan.code == 0, plan.err
    said = [w for w in plan.json()["warnings"] if "deprecated" in w]
    assert said == [
        "llama4 is deprecated by NVIDIA's LLM Benchmarking Collection (NVIDIA/exemplar-performance) in its "
        "release v26.08.00 (README.md, Deprecated table; last shipped in 25.08); llmb still runs its recipes."
    ]
    text = cli("plan", "llama4", "--gpu", "h100", "--dtype", "bf16", "--gpus", "512").out
    assert text.count("is deprecated by") == 1

    monkeypatch.setenv("LLMB_INSTALL", str(tmp_path))
    run = cli(
        "run",
        "nemotron4",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        "2",
        "--proxy",
        "tiny",
        "--dry-run",
    )
    assert run.code == 0, run.err
    lines = [line for line in run.err.splitlines() if "is deprecated by" in line]
    assert len(lines) == 1 and lines[0].startswith("llmb: warning: nemotron4 is deprecated by"), (
        run.err
    )
    assert "last shipped in 26.02.01" in lines[0]

    current = cli("plan", "nemotronh", "--gpus", "32", "--json").json()
    assert not any("deprecated" in w for w in current["warnings"])
