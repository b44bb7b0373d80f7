"""``llmb plugins new NAME`` (issue 35): the skeleton it writes, the names it refuses, and ``llmb plugins``
still listing as before. The skeleton's own tests run in a fresh environment in test_plugin_wheels.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from llmb.errors import UsageError
from llmb.plugins.scaffold import TEMPLATES, render
from llmb.recipes.workload_file import workload_from_dict
from llmb.yamlio import load_yaml

FILES = [
    "pyproject.toml",
    "README.md",
    "src/llmb_plugin_demo/__init__.py",
    "src/llmb_plugin_demo/plugin.py",
    "src/llmb_plugin_demo/model.py",
    "src/llmb_plugin_demo/workload.yaml",
    "tests/test_demo.py",
]


def test_new_writes_a_filled_in_skeleton(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    made = cli("plugins", "new", "demo")
    assert made.code == 0, made.err
    root = tmp_path / "llmb-plugin-demo"
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) == sorted(FILES)
    for name in FILES:
        text = (root / name).read_text()
        assert "{{" not in text and "}}" not in text, name
        assert "seeds/" not in text and "shared/" not in text, name
        if name.endswith(".py"):
            tree = ast.parse(text)
            llmb_imports = [
                node
                for node in ast.walk(tree)
                if isinstance(node, ast.Import | ast.ImportFrom)
                and any(
                    (getattr(node, "module", None) or alias.name).split(".")[0] == "llmb"
                    for alias in node.names
                )
            ]
            # the plugin API only: from llmb import ...
            assert all(
                isinstance(n, ast.ImportFrom) and n.module == "llmb" for n in llmb_imports
            ), name

    pyproject = (root / "pyproject.toml").read_text()
    assert 'demo = "llmb_plugin_demo.plugin"' in pyproject
    assert 'dependencies = ["llmb~=0.1.0"]' in pyproject
    assert (
        "torch"
        not in pyproject.split("[project.optional-dependencies]")[0].split("dependencies")[1]
    )

    workload = workload_from_dict(
        load_yaml((root / "src/llmb_plugin_demo/workload.yaml").read_text())
    )
    assert workload.name == "demo" and workload.sizes() == ["1b"]
    ((row,),) = [v.seed_rows for v in workload.variants]
    assert (row.gpus, int(row.dp.at(8)), int(row.ga.at(8))) == ((8, 8), 8, 2)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "Demo",
            "plugin name 'Demo': expected lower-case letters and digits, starting with a letter",
        ),
        ("3d", "expected lower-case letters and digits"),
        ("my-plugin", "expected lower-case letters and digits"),
        ("llama31", "plugin name 'llama31' is an installed workload's name; pick another"),
        ("llama4_maverick", "expected lower-case letters"),
        ("pretrain", None),
    ],
)
def test_names_are_checked(cli, tmp_path, monkeypatch, name, message):
    monkeypatch.chdir(tmp_path)
    made = cli("plugins", "new", name)
    if message is None:
        assert made.code == 0, made.err
        return
    assert made.code == 2 and message in made.err, made.err
    assert "Traceback" not in made.err and list(tmp_path.iterdir()) == []


def test_an_alias_or_a_plugins_name_is_taken(cli, tmp_path, monkeypatch, host):
    from llmb.plugins.scaffold import check_name, taken_names

    taken = taken_names(host)
    # every alias of an installed workload (none is a valid new name today, but all are held)
    assert taken["pretrain_llama3.1"] == "an alias of the installed workload llama31"
    with pytest.raises(UsageError, match="is an alias of the installed workload nemotronh"):
        check_name("nemotronh2", {**taken, "nemotronh2": taken["pretrain_nemotronh"]})
    # a backend plugin's entry point, which is no workload
    monkeypatch.chdir(tmp_path)
    made = cli("plugins", "new", "slurm")
    assert made.code == 2
    assert "plugin name 'slurm' is the name of the installed plugin llmb-backend-slurm" in made.err


def test_an_existing_directory_is_refused(cli, tmp_path):
    (tmp_path / "there").mkdir()
    made = cli("plugins", "new", "demo", "--dir", str(tmp_path / "there"))
    assert made.code == 2 and "already exists" in made.err
    assert list((tmp_path / "there").iterdir()) == []
    made = cli("plugins", "new", "demo", "--dir", str(tmp_path / "missing" / "demo"))
    assert made.code == 2 and "is not a directory" in made.err


def test_a_directory_it_cannot_write_is_said_in_one_line(cli):
    # /proc takes no new directory, whoever asks (root included)
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc here")
    made = cli("plugins", "new", "demo", "--dir", "/proc/llmb-plugin-demo")
    assert made.code == 1, made.err
    assert "could not write the skeleton into /proc/llmb-plugin-demo" in made.err
    assert "Traceback" not in made.err and len(made.err.strip().splitlines()) == 1


def test_plugins_still_lists(cli):
    listed = cli("plugins", "--json")
    assert listed.code == 0 and {p["name"] for p in listed.json()} >= {"llama31", "nemotronh"}
    table = cli("plugins")
    assert table.out.splitlines()[0].split()[:2] == ["PLUGIN", "DISTRIBUTION"]
    assert "new" in cli("plugins", "--help").out


def test_render_fills_known_keys_and_refuses_unknown_ones():
    assert render("{{name}} {{ package }}", {"name": "a", "package": "b"}) == "a b"
    with pytest.raises(KeyError, match="template key 'nmae' has no value"):
        render("{{nmae}}", {"name": "a"})
    templates = Path(__file__).resolve().parents[1] / "core/src/llmb/data/plugin_template"
    assert sorted(p.name for p in templates.iterdir()) == sorted(TEMPLATES)


def test_the_skeleton_is_lint_clean_as_written(cli, tmp_path):
    """A new plugin starts without a lint finding or a formatting change (its own ruff settings)."""
    import subprocess
    import sys

    pytest.importorskip("ruff")
    assert cli("plugins", "new", "demo", "--dir", str(tmp_path / "demo")).code == 0
    for args in (["check", "--select", "E,F,W,I,B,UP", "."], ["format", "--check", "."]):
        proc = subprocess.run(
            [sys.executable, "-m", "ruff", *args],
            cwd=tmp_path / "demo",
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
