"""Names in the YAML llmb writes are quoted, and a workload file whose name is not a string is refused
(issue 41, item 3). YAML reads an unquoted ``no``, ``off``, ``yes``, ``on``, ``true``, ``false`` as a
boolean and ``null`` as null: ``llmb plugins new no`` wrote ``name: no``, ``llmb list`` showed a
workload ``False``, and ``no`` and ``off`` installed together were one duplicate ``False``.

The skeletons are written by the real command line and loaded by ``llmb`` as a process, through
``LLMB_PLUGINS`` (the host's registration path for a module on the path) or a real .dist-info."""

from __future__ import annotations

import json

import pytest
from fake_plugins import install_plugin, site_env
from llmb.recipes.workload_file import workload_from_dict
from llmb.yamlio import load_yaml
from workload_dicts import minimal_workload

WORDS = ["no", "off", "yes", "on", "true", "false", "null"]
SKELETON_PLAN = ("--size", "1b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8", "--json")


def new_skeleton(llmb_proc, where, name: str):
    result = llmb_proc("plugins", "new", name, "--dir", str(where / f"llmb-plugin-{name}"))
    assert result.code == 0, result.err
    return where / f"llmb-plugin-{name}"


@pytest.mark.parametrize("word", WORDS)
def test_plugins_new_writes_the_name_as_a_string(llmb_proc, tmp_path, word):
    root = new_skeleton(llmb_proc, tmp_path, word)
    data = load_yaml((root / f"src/llmb_plugin_{word}/workload.yaml").read_text())
    assert data["name"] == word
    assert data["architectures"]["1b"]["family"] == word
    assert data["variants"][0]["document"] == f"{word}-recipe.md"
    assert list(data["documents"]) == [f"{word}-recipe.md"]
    assert workload_from_dict(data).name == word


def test_two_such_skeletons_installed_together_are_two_workloads(llmb_proc, tmp_path):
    """``no`` and ``off``, loaded together: two workloads, each planned as its own tests plan it."""
    roots = [new_skeleton(llmb_proc, tmp_path, name) for name in ("no", "off")]
    env = site_env(
        roots[0] / "src",
        LLMB_PLUGINS="llmb_plugin_no.plugin,llmb_plugin_off.plugin",
    )
    env["PYTHONPATH"] = f"{roots[1] / 'src'}:{env['PYTHONPATH']}"
    listed = llmb_proc("list", "--json", env=env)
    assert listed.code == 0, listed.err
    assert "warning" not in listed.err, listed.err
    names = {row["workload"] for row in listed.json()}
    assert {"no", "off"} <= names and not {"False", "True", "None"} & names
    for name in ("no", "off"):
        plan = llmb_proc("plan", name, *SKELETON_PLAN, env=env)
        assert plan.code == 0, plan.err
        assert (plan.json()["workload"], plan.json()["dp"], plan.json()["ga"]) == (name, 8, 2)


def test_a_workload_file_with_an_unquoted_no_is_refused_saying_how_to_write_it(llmb_proc, tmp_path):
    text = json.dumps(minimal_workload("placeholder"), indent=1)
    text = text.replace('"name": "placeholder"', '"name": no')  # as a person writes it: unquoted
    site = install_plugin(tmp_path / "site", "no", workload_text=text)
    env = site_env(site)
    listed = llmb_proc("list", "--json", env=env)
    assert listed.code == 0, listed.err
    assert "False" not in {row["workload"] for row in listed.json()}
    planned = llmb_proc("plan", "no", "--gpus", "8", env=env)
    assert planned.code == 1, planned.err
    assert (
        "llmb: error: workload 'no' is unavailable: plugin llmb-plugin-no 0.3.0 failed to load: "
        "DataError: llmb_plugin_no/workload.yaml: workload: the workload's name must be a string, but "
        'YAML read it as False (an unquoted no, off or false); quote it, e.g. name: "no"'
    ) in planned.err
    assert "Traceback" not in planned.err


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("name", True, "the workload's name must be a string, but YAML read it as True"),
        ("name", None, "the workload's name must be a string, but YAML read it as None"),
        ("aliases", [False], "an alias must be a string, but YAML read it as False"),
        ("family", None, "family must be a string, but YAML read it as None"),
    ],
)
def test_a_name_that_yaml_read_as_a_boolean_or_null_is_refused(field, value, said):
    raw = minimal_workload("mini")
    if field == "family":
        raw["architectures"]["1b"]["family"] = value
    else:
        raw[field] = value
    with pytest.raises(ValueError, match=said.replace("(", r"\(")):
        workload_from_dict(raw)
