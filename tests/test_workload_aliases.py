"""Workloads by the names NVIDIA's llmb-run gives them (issue 34): ``llama3.1`` and
``pretrain_llama3.1`` on the command line, ``pretrain_llama3.1_8b:`` as a sweep file's section, as
its bulk files write them. The names come from each workload's data (``aliases``), taken from the
published recipes' own llmb-run commands."""

from __future__ import annotations

import pytest
from llmb.cli.run_options import parameter_names
from llmb.recipes.workload_file import workload_from_dict
from llmb.runs.sweeps import tasks_from_file

# the published recipes' llmb-run commands: `llmb-run ... -w NAME -s SIZE`
LLMB_RUN_NAMES = {
    "pretrain_llama3.1": "llama31",
    "pretrain_llama4_maverick": "llama4",
    "pretrain_nemotron4-340b": "nemotron4",
    "pretrain_nemotronh": "nemotronh",
}


@pytest.mark.parametrize(("alias", "name"), sorted(LLMB_RUN_NAMES.items()))
def test_llmb_runs_workload_names_are_the_workloads(host, alias, name):
    assert host.workload(alias).name == name
    assert host.workload(alias.upper()).name == name


def test_no_alias_is_claimed_twice_or_shadows_a_name(host):
    workloads = host.workloads()
    claimed = [alias for w in workloads.values() for alias in w.aliases]
    assert len(claimed) == len(set(claimed))
    assert not set(claimed) & set(workloads)


def test_plan_takes_an_alias(cli):
    by_alias = cli(*"plan llama3.1 --size 8b --gpu h100 --dtype bf16 --gpus 8 --json".split())
    by_name = cli(*"plan llama31 --size 8b --gpu h100 --dtype bf16 --gpus 8 --json".split())
    assert by_alias.code == 0, by_alias.err
    assert by_alias.json() == by_name.json()


def test_an_unknown_name_still_lists_the_installed_workloads(cli):
    result = cli(*"plan llama9 --size 8b --gpu h100 --dtype bf16 --gpus 8".split())
    assert result.code == 2
    # every installed workload, in order (plugins beside llmb's own may come before them)
    assert "unknown workload 'llama9'; installed workloads: " in result.err
    assert "llama31, llama4" in result.err


def test_a_sweep_file_takes_llmb_run_bulk_headers(host, tmp_path):
    path = tmp_path / "bulk.yaml"
    path.write_text(
        "pretrain_llama3.1_8b: {dtypes: [bf16], scales: [8], gpu: h100}\n"
        "pretrain_llama4_maverick_400b: {dtypes: [fp8], scales: [128], gpu: h100}\n"
        "pretrain_nemotron4_340b: {dtypes: [bf16], scales: [256], gpu: h100}\n"
    )
    tasks = tasks_from_file(str(path), host.workloads(), parameter_names())
    assert [(t.workload, t.size) for t in tasks] == [
        ("llama31", "8b"),
        ("llama4", "400b"),
        ("nemotron4", "340b"),
    ]


@pytest.mark.parametrize("alias", ["llama31", "bad name", "x/y", ""])
def test_a_workload_file_refuses_an_alias_that_is_its_name_or_no_word(alias):
    raw = {"name": "llama31", "variants": [], "aliases": [alias]}
    with pytest.raises(ValueError, match="alias"):
        workload_from_dict(raw)
