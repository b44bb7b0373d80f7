"""Plugin discovery and dispatch: broken plugins, duplicates, site plugins
that wrap resolution, and per-workload hooks that only reach their owner."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from llmb import hookimpl
from llmb.errors import PluginError
from llmb.plugins.host import PluginHost
from llmb.recipes.records import ModelFlops, RecipeRequest
from llmb.recipes.workload_file import workload_from_dict
from workload_dicts import minimal_workload


def install_fake_distribution(
    root: Path, name: str, module_source: str, data: str | None = None
) -> None:
    """A real installed distribution (dist-info + package) on a sys.path entry."""
    package = f"llmb_plugin_{name}"
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    (root / package / "plugin.py").write_text(textwrap.dedent(module_source))
    if data is not None:
        (root / package / "workload.yaml").write_text(textwrap.dedent(data))
    info = root / f"{package}-0.3.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: llmb-plugin-{name}\nVersion: 0.3.0\n"
    )
    (info / "entry_points.txt").write_text(f"[llmb]\n{name} = {package}.plugin\n")


@pytest.fixture
def broken_site(tmp_path):
    install_fake_distribution(tmp_path, "broken", "import nvidia_secret_sauce  # not installed\n")
    return tmp_path


def test_a_plugin_that_fails_to_import_is_a_warning_not_a_crash(llmb_proc, broken_site):
    result = llmb_proc("list", env={"PYTHONPATH": str(broken_site), "LLMB_LOG_FORMAT": "json"})
    assert result.code == 0
    assert "llama31" in result.out
    warning = json.loads(result.err.splitlines()[0])
    assert warning["level"] == "warning" and warning["plugin"] == "broken"
    assert warning["provider"] == "llmb-plugin-broken 0.3.0"
    assert "No module named 'nvidia_secret_sauce'" in warning["error"]


def test_selecting_the_broken_workload_fails_with_its_error(llmb_proc, broken_site):
    result = llmb_proc("plan", "broken", "--gpus", "8", env={"PYTHONPATH": str(broken_site)})
    assert result.code == 1
    assert (
        "workload 'broken' is unavailable: plugin llmb-plugin-broken 0.3.0 failed to load: "
        "ModuleNotFoundError: No module named 'nvidia_secret_sauce'"
    ) in result.err
    assert "Traceback" not in result.err


def test_plugins_command_reports_the_failure(llmb_proc, broken_site):
    plugins = {
        p["name"]: p
        for p in json.loads(
            llmb_proc("plugins", "--json", env={"PYTHONPATH": str(broken_site)}).out
        )
    }
    assert plugins["broken"]["status"] == "failed"
    assert plugins["broken"]["distribution"] == "llmb-plugin-broken"
    assert "nvidia_secret_sauce" in plugins["broken"]["error"]
    assert plugins["llama31"]["status"] == "loaded"


def test_a_plugin_with_a_malformed_data_file_fails_when_selected(llmb_proc, tmp_path):
    install_fake_distribution(
        tmp_path,
        "badyaml",
        """
        from llmb import hookimpl
        from llmb.recipes.workload_file import load_workload

        @hookimpl
        def llmb_workloads():
            return [load_workload(__package__)]
        """,
        data=(
            "name: badyaml\n"
            "variants: [{name: x, framework: nemo2, document: s.md, tables: [{table: 0, columns: [size], rows: [[1b]]}]}]\n"
        ),
    )
    env = {"PYTHONPATH": str(tmp_path)}
    assert llmb_proc("list", env=env).code == 0
    result = llmb_proc("plan", "badyaml", "--gpus", "8", env=env)
    assert result.code == 1
    assert "workload 'badyaml' is unavailable" in result.err and "missing columns" in result.err


class DuplicateLlama:
    @staticmethod
    @hookimpl
    def llmb_workloads():
        return [PluginHost().workload("llama31")]


def test_duplicate_workloads_are_refused_naming_both_providers():
    host = PluginHost(extra_plugins=[("site-copy-of-llama", DuplicateLlama)])
    with pytest.raises(
        PluginError, match="registered by both llmb-plugin-llama31 0.1.0 and site-copy-of-llama"
    ):
        host.workload("llama31")
    assert host.workload("nemotronh").name == "nemotronh"


class GB200Site:
    """A site plugin: TP_COMM_OVERLAP=False on GB200, as the Nemotron-4 seed advises."""

    @staticmethod
    @hookimpl(wrapper=True)
    def llmb_resolve_recipe(workload, request):
        recipe = yield
        return recipe.with_env(TP_COMM_OVERLAP="False") if recipe.gpu == "gb200" else recipe


def test_site_plugins_wrap_recipe_resolution(cli):
    host = PluginHost(extra_plugins=[("site", GB200Site)])
    gb200 = host.resolve(RecipeRequest("nemotron4", None, "gb200", "bf16", 256))
    h100 = host.resolve(RecipeRequest("nemotron4", None, "h100", "bf16", 256))
    assert dict(gb200.env) == {"TP_COMM_OVERLAP": "False"} and h100.env == ()

    from llmb.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "nemotron4", "--gpu", "gb200", "--gpus", "256", "--json"], host=host)
    assert exit_info.value.code == 0


class Greedy:
    """Answers the FLOPs hook for every workload without checking whose it is."""

    @staticmethod
    @hookimpl
    def llmb_workloads():
        return [workload_from_dict(minimal_workload("greedy"))]

    @staticmethod
    @hookimpl
    def llmb_model_flops(workload, arch, seq_len):
        return ModelFlops(per_sample=42.0, terms={"all": 42.0}, formula="greedy")


def test_per_workload_hooks_reach_only_the_owner():
    host = PluginHost(extra_plugins=[("greedy", Greedy)])
    llama = host.workload("llama31")
    own = host.model_flops(llama, llama.architecture("8b"), 8192)
    assert own.formula == llama.cite("llama31-nemo2.md", "Notes")
    greedy = host.workload("greedy")
    assert host.model_flops(greedy, greedy.architecture("1b"), 128).per_sample == 42.0
    recipe = host.resolve(RecipeRequest("greedy", "1b", "h100", "bf16", 16))
    assert (recipe.dp, recipe.gbs, recipe.ga) == (16, 16, 1)


def test_workload_without_a_flops_hook_gets_the_core_fallback():
    class Plain:
        @staticmethod
        @hookimpl
        def llmb_workloads():
            return [workload_from_dict(minimal_workload("plain"))]

    host = PluginHost(discover=False, extra_plugins=[("plain", Plain)])
    plain = host.workload("plain")
    flops = host.model_flops(plain, plain.architecture("1b"), 128)
    assert flops.formula.startswith("Megatron-Bridge")


class PlainSite:
    """A site plugin that forgot wrapper=True: it must not hijack anyone's FLOPs."""

    @staticmethod
    @hookimpl(tryfirst=True)
    def llmb_model_flops(workload, arch, seq_len):
        return ModelFlops(per_sample=1.0, terms={}, formula="hijacked")


def test_a_site_plugins_plain_implementation_is_ignored(capsys):
    host = PluginHost(extra_plugins=[("plain-site", PlainSite)])
    llama = host.workload("llama31")
    assert host.model_flops(llama, llama.architecture("8b"), 8192).formula == llama.cite(
        "llama31-nemo2.md", "Notes"
    )
    assert "only wrappers (wrapper=True) are called" in capsys.readouterr().err


def test_a_plugin_that_exits_on_import_is_a_warning_not_the_end_of_the_command(llmb_proc, tmp_path):
    install_fake_distribution(tmp_path, "quitter", "import sys\nsys.exit(3)\n")
    result = llmb_proc("--log-format", "json", "list", env={"PYTHONPATH": str(tmp_path)})
    assert result.code == 0 and "llama31" in result.out
    warning = json.loads(result.err.splitlines()[0])
    assert warning["plugin"] == "quitter" and "SystemExit" in warning["error"]
    plugins = json.loads(llmb_proc("plugins", "--json", env={"PYTHONPATH": str(tmp_path)}).out)
    assert {p["name"]: p["status"] for p in plugins}["quitter"] == "failed"


def test_an_unrelated_distribution_whose_entry_points_are_not_utf8_costs_nothing(
    llmb_proc, tmp_path
):
    info = tmp_path / "something_else-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: something-else\nVersion: 1.0\n")
    # Latin-1
    (info / "entry_points.txt").write_bytes(b"[console_scripts]\nsomething = caf\xe9:main\n")
    for command in (
        ["list"],
        ["plan", "llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8"],
        ["results", str(tmp_path)],
    ):
        result = llmb_proc(*command, env={"PYTHONPATH": str(tmp_path)})
        assert result.code == 0, (command, result.err)


def test_a_workload_file_with_the_old_key_names_still_loads_with_a_deprecation_warning():
    """Published plugins wrote seed / seed_table / seed_says before the keys were renamed."""
    current = minimal_workload("old")
    current["variants"][0]["errata"] = [
        {"id": "E1", "recipe_says": "GBS 12", "resolution": "GBS 16", "kind": "note"}
    ]
    old = minimal_workload("old")
    variant = old["variants"][0]
    variant["seed"] = variant.pop("document")
    variant["tables"][0]["seed_table"] = variant["tables"][0].pop("table")
    variant["errata"] = [
        {"id": "E1", "seed_says": "GBS 12", "resolution": "GBS 16", "kind": "note"}
    ]
    with pytest.warns(DeprecationWarning, match="seed, seed_says, seed_table are the old names"):
        loaded = workload_from_dict(old)
    # records compare by identity; their text is the test
    assert repr(loaded) == repr(workload_from_dict(current))


def test_a_plugin_named_in_llmb_plugins_that_fails_to_import_is_reported_like_an_installed_one(
    llmb_proc,
):
    result = llmb_proc("plugins", "--json", env={"LLMB_PLUGINS": "no_such_llmb_plugin_module"})
    assert result.code == 0, result.err
    failed = [p for p in json.loads(result.out) if p["name"] == "no_such_llmb_plugin_module"]
    assert len(failed) == 1 and failed[0]["status"] == "failed", result.out
    assert "ModuleNotFoundError" in failed[0]["error"]


@pytest.mark.parametrize(
    ("name", "raising"),
    [
        ("grabby", "raise KeyboardInterrupt"),
        ("closer", "raise GeneratorExit('no more')"),
        (
            "hooky",
            "from llmb import hookimpl\n\n@hookimpl\ndef llmb_workloads():\n    raise KeyboardInterrupt\n",
        ),
    ],
    ids=[
        "keyboard-interrupt-at-import",
        "generator-exit-at-import",
        "keyboard-interrupt-registering",
    ],
)
def test_a_plugin_raising_keyboard_interrupt_itself_is_a_broken_plugin_not_a_ctrl_c(
    llmb_proc, tmp_path, name, raising
):
    """Issue 32, item 12: a KeyboardInterrupt (or GeneratorExit) that a plugin raises at import or in its
    registration hook is no Ctrl-C: list and plugins go on, with one warning naming it."""
    install_fake_distribution(tmp_path, name, f"{raising}\n")
    env = {"PYTHONPATH": str(tmp_path)}
    listed = llmb_proc("list", env=env)
    assert listed.code == 0 and "llama31" in listed.out, listed.err
    warnings = [line for line in listed.err.splitlines() if line.startswith("llmb: warning:")]
    assert len(warnings) == 1 and f"plugin: {name}" in warnings[0], listed.err
    assert "llmb: error" not in listed.err
    shown = llmb_proc("plugins", "--json", env=env)
    assert shown.code == 0, shown.err
    (mine,) = [p for p in json.loads(shown.out) if p["name"] == name]
    expected = "GeneratorExit: no more" if name == "closer" else "KeyboardInterrupt"
    assert mine["status"] == "failed" and mine["error"] == expected


SLOW_IMPORT = """
import pathlib, time
pathlib.Path({marker!r}).write_text("importing")
{sleep}
"""


@pytest.mark.parametrize(
    "sleep",
    [
        "time.sleep(60)",
        # a plugin that swallows the KeyboardInterrupt cannot keep the command going either
        "try:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    pass",
    ],
    ids=["plain", "swallowed"],
)
def test_a_real_ctrl_c_while_a_plugin_imports_still_aborts_with_130(tmp_path, sleep):
    import os
    import signal
    import subprocess
    import time

    from conftest import _llmb_executable

    marker = tmp_path / "importing"
    site = tmp_path / "site"
    install_fake_distribution(site, "sleepy", SLOW_IMPORT.format(marker=str(marker), sleep=sleep))
    env = {**os.environ, "PYTHONPATH": str(site), "LLMB_INSTALL": str(tmp_path / "install")}
    env.pop("LLMB_LOG_FORMAT", None)
    proc = subprocess.Popen(
        [_llmb_executable(), "list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, (
                "the plugin was never imported"
            )
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, (proc.returncode, err)
    assert "llmb: error:" in err and "Traceback" not in err
    assert "warning" not in err and "llama31" not in out
