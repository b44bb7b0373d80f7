"""A plugin never takes over another workload's names (issue 41, item 2). Each plugin here is a real
distribution (a package and its .dist-info, ``fake_plugins.install_plugin``) that ``llmb``, run as
a process, finds through its entry-point discovery, as it finds one installed with pip.

A name or alias that another installed workload holds (its name, its alias, ``NAME_SIZE`` as a sweep
file's section), or that is one of llmb-run's names for a built-in workload, is refused when the
workloads are indexed, one warning naming both owners; an alias two plugins claim names neither and
says by whom, on the command line and in a sweep or bulk file, before anything is submitted."""

from __future__ import annotations

import json

import pytest
from fake_plugins import install_plugin, site_env, with_aliases
from llmb.paths import packaged_data
from llmb.recipes.workload_file import workload_from_dict
from llmb.yamlio import load_yaml_file
from workload_dicts import minimal_workload

# a plan of the minimal workload's one row (workload_dicts.minimal_workload)
MINIMAL = ("--size", "1b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8")


def warnings_of(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("llmb: warning:")]


def sweep_tasks(llmb_proc, path, env) -> tuple[list[dict], str]:
    """The tasks ``llmb sweep --file PATH`` would run (a dry run of CPU proxies), and its stderr."""
    result = llmb_proc(
        "sweep", "--file", str(path), "--proxy", "tiny", "--dry-run", "--json", env=env
    )
    assert result.code == 0, result.err
    return json.loads(result.out), result.err


def test_an_alias_that_is_another_workloads_sweep_section_is_refused(llmb_proc, tmp_path):
    """The attack: a third-party plugin's alias ``llama31_8b`` turned the sweep section ``llama31_8b:``
    (the example of docs/sweeps.md) into its own workload."""
    site = install_plugin(tmp_path / "site", "taker", workload=with_aliases("taker", "llama31_8b"))
    env = site_env(site)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("llama31_8b: {dtypes: [bf16], scales: [2], gpu: h100}\n")
    tasks, err = sweep_tasks(llmb_proc, sweep, env)
    assert [t["task"] for t in tasks] == ["llama31 8b h100 bf16 2 GPUs"], tasks
    (warning,) = [w for w in warnings_of(err) if "llama31_8b" in w]
    assert "the alias 'llama31_8b' of taker (llmb-plugin-taker 0.3.0) is refused" in warning
    assert "llama31 (llmb-plugin-llama31 0.1.0, llmb's built-in workload) at size 8b" in warning
    # the plugin's own workload still works, under its own name
    planned = llmb_proc("plan", "taker", *MINIMAL, "--json", env=env)
    assert planned.code == 0 and planned.json()["workload"] == "taker", planned.err


def test_llmb_runs_names_for_a_built_in_stay_the_built_ins(llmb_proc, tmp_path):
    """An alias that is llmb-run's name for a built-in, another workload's own name as an alias, and a
    workload named with llmb-run's name for a built-in: each refused, naming both owners."""
    site = tmp_path / "site"
    install_plugin(site, "grabby", workload=with_aliases("grabby", "pretrain_llama3.1", "llama4"))
    install_plugin(site, "posing", workload=minimal_workload("pretrain_nemotronh"))
    env = site_env(site)
    for typed, meant in [("pretrain_llama3.1", "llama31"), ("pretrain_nemotronh", "nemotronh")]:
        listed = llmb_proc("list", typed, "--json", env=env)
        assert listed.code == 0, listed.err
        assert {row["workload"] for row in listed.json()} == {meant}
    bulk = tmp_path / "bulk.yaml"  # as NVIDIA's llmb-run bulk files write their sections
    bulk.write_text("pretrain_llama3.1_8b: {dtypes: [bf16], scales: [2], gpu: h100}\n")
    tasks, err = sweep_tasks(llmb_proc, bulk, env)
    assert [t["task"] for t in tasks] == ["llama31 8b h100 bf16 2 GPUs"], tasks
    said = warnings_of(err)
    assert (
        "llmb: warning: the alias 'pretrain_llama3.1' of grabby (llmb-plugin-grabby 0.3.0) is refused: "
        "it is llmb-run's name for llama31 (llmb-plugin-llama31 0.1.0, llmb's built-in workload)"
    ) in said, said
    assert (
        "llmb: warning: the alias 'llama4' of grabby (llmb-plugin-grabby 0.3.0) is refused: it is the "
        "name of the workload llama4 (llmb-plugin-llama4 0.1.0, llmb's built-in workload)"
    ) in said, said
    assert any(
        w.startswith(
            "llmb: warning: the workload 'pretrain_nemotronh' of llmb-plugin-posing 0.3.0 is refused: "
            "its name is llmb-run's name for nemotronh (llmb-plugin-nemotronh 0.1.0"
        )
        for w in said
    ), said
    plugins = {p["name"]: p for p in json.loads(llmb_proc("plugins", "--json", env=env).out)}
    assert plugins["grabby"]["workloads"] == ["grabby"] and plugins["posing"]["workloads"] == []


def test_an_alias_two_plugins_claim_names_neither_and_says_by_whom(llmb_proc, tmp_path):
    site = tmp_path / "site"
    install_plugin(site, "one", workload=with_aliases("one", "shared"))
    install_plugin(site, "two", workload=with_aliases("two", "shared"))
    install = tmp_path / "install"
    env = site_env(site, LLMB_INSTALL=str(install))
    claimed = "the name 'shared' is claimed by one (llmb-plugin-one 0.3.0) and two (llmb-plugin-two 0.3.0)"
    planned = llmb_proc("plan", "shared", *MINIMAL, env=env)
    assert planned.code == 2, planned.err
    assert (
        f"llmb: error: {claimed}, so it names neither; use the workload's own name (one, two)."
        in planned.err
    )
    assert "unknown workload" not in planned.err and "Traceback" not in planned.err
    # a sweep file naming it, after a section that could run: refused before anything is submitted
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        "one_1b: {dtypes: [bf16], scales: [2], gpu: h100}\n"
        "shared_1b: {dtypes: [bf16], scales: [2], gpu: h100}\n"
    )
    swept = llmb_proc("sweep", "--file", str(sweep), "--proxy", "tiny", env=env)
    assert swept.code == 2, swept.err
    assert f"llmb: error: sweep header 'shared_1b': {claimed}" in swept.err
    jobs = llmb_proc("status", "--json", env=env)
    assert jobs.code == 0 and jobs.json() == [], jobs.out
    # each still answers to its own name
    for name in ("one", "two"):
        own = llmb_proc("plan", name, *MINIMAL, "--json", env=env)
        assert own.code == 0 and own.json()["workload"] == name, own.err


def test_a_workload_named_as_another_workloads_section_is_refused_whole(llmb_proc, tmp_path):
    site = install_plugin(tmp_path / "site", "shadow", workload=minimal_workload("llama31_70b"))
    env = site_env(site)
    planned = llmb_proc("plan", "llama31_70b", "--gpus", "8", env=env)
    assert planned.code == 1, planned.err
    assert (
        "workload 'llama31_70b' is unavailable: llmb refused it: a sweep file reads the section "
        "llama31_70b: as llama31 (llmb-plugin-llama31 0.1.0, llmb's built-in workload) at size 70b"
    ) in planned.err


def test_llmb_run_names_of_a_built_in_that_is_not_installed_are_still_its():
    """Where llmb-plugin-llama31 is not installed, its llmb-run names are not another plugin's to take:
    typed, they say whose they are."""
    from llmb.plugins.names import referee

    taker = workload_from_dict(with_aliases("taker", "pretrain_llama3.1", "llama31", "mine"))
    refereed = referee({"taker": taker}, {"taker": "llmb-plugin-taker 0.3.0"})
    assert refereed.workloads["taker"].aliases == ("mine",)
    assert refereed.unresolved["pretrain_llama3.1"].startswith(
        "'pretrain_llama3.1' is llmb-run's name for llama31 (llmb-plugin-llama31, llmb's built-in "
        "workload), which is not installed here"
    )
    assert [r.name for r in refereed.refusals] == ["pretrain_llama3.1", "llama31"]


@pytest.mark.parametrize("workload", ["llama31", "llama4", "nemotron4", "nemotronh"])
def test_the_built_in_names_are_the_built_in_plugins_aliases(host, workload):
    """data/builtin_workloads.yaml and each built-in plugin's workload.yaml list the same names."""
    from llmb.plugins.names import BUILTIN_FILE

    listed = load_yaml_file(packaged_data(BUILTIN_FILE))
    assert tuple(listed[workload]) == host.workload(workload).aliases
