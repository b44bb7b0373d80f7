"""A plugin's hook that fails when called (not at import) is named, with the hook, in one line, and the
command exits 2 (issue 41, item 4). Before: a KeyboardInterrupt it raised ended the command as
"aborted" (130), a ``sys.exit(3)`` exited 3 with nothing said, any other exception exited 70 as an
internal error without naming the plugin. Only a real Ctrl-C (SIGINT delivered to the process while
the hook runs) is "aborted".

The plugins are real distributions found by entry-point discovery (``fake_plugins``); ``llmb`` runs
as a process (``llmb_proc``, or Popen for the Ctrl-C)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from conftest import _llmb_executable
from fake_plugins import LOADS_ITS_WORKLOAD, install_plugin, site_env

# The owner's recipe resolution does what HOOKY_RAISES says (llmb plan calls it).
HOOKY = (
    LOADS_ITS_WORKLOAD
    + """

import os
import pathlib
import sys
import time

RAISES = {
    "keyboard-interrupt": KeyboardInterrupt,
    "runtime-error": lambda: RuntimeError("hooky broke"),
    "generator-exit": GeneratorExit,
}


@hookimpl
def llmb_resolve_recipe(workload, request):
    how = os.environ.get("HOOKY_RAISES", "")
    if how == "exit-3":
        sys.exit(3)
    if how in RAISES:
        raise RAISES[how]()
    if how.startswith("sleep"):
        pathlib.Path(os.environ["HOOKY_MARKER"]).write_text("in the hook")
        try:
            time.sleep(60)
        except KeyboardInterrupt:
            if how == "sleep-swallowing":
                return None  # a plugin that swallows the Ctrl-C cannot keep the command going
            raise
    return None
"""
)

# A site plugin (owns no workload) that wraps every workload's recipe resolution.
WRAPPING = """
import os

from llmb import hookimpl


@hookimpl(wrapper=True)
def llmb_resolve_recipe(workload, request):
    recipe = yield
    if os.environ.get("WRAPPER_RAISES") == "after":
        raise ValueError("the wrapper broke")
    return recipe
"""

PLAN = ("plan", "hooky", "--size", "1b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8")
NAMED = "llmb: error: the plugin llmb-plugin-hooky 0.3.0 failed in its hook llmb_resolve_recipe: "


@pytest.fixture
def site(tmp_path):
    install_plugin(tmp_path / "site", "hooky", source=HOOKY)
    (tmp_path / "site" / "wrapping_site.py").write_text(WRAPPING)
    return tmp_path / "site"


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("keyboard-interrupt", "KeyboardInterrupt (raised by its own code: no Ctrl-C was pressed)"),
        ("exit-3", "SystemExit(3)"),
        ("runtime-error", "RuntimeError: hooky broke"),
        ("generator-exit", "GeneratorExit"),
    ],
)
def test_a_failing_hook_is_named_in_one_line_and_exits_2(llmb_proc, site, how, said):
    result = llmb_proc(*PLAN, env=site_env(site, HOOKY_RAISES=how))
    assert result.code == 2, (result.code, result.err)
    lines = result.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(NAMED + said + ". "), result.err
    assert "report it to its authors" in lines[0] and "LLMB_DEBUG=1" in lines[0]
    assert "Traceback" not in result.err and "internal error" not in result.err
    assert result.out == ""


def test_with_llmb_debug_the_traceback_shows_what_the_plugin_raised(llmb_proc, site):
    result = llmb_proc(*PLAN, env=site_env(site, HOOKY_RAISES="runtime-error", LLMB_DEBUG="1"))
    assert result.code != 0
    assert "Traceback" in result.err and "RuntimeError: hooky broke" in result.err
    assert "llmb_plugin_hooky/plugin.py" in result.err


def test_a_site_plugins_wrapper_is_named_for_its_own_failure_not_for_the_owners(llmb_proc, site):
    env = site_env(site, LLMB_PLUGINS="wrapping_site")
    broke = llmb_proc(*PLAN, env={**env, "WRAPPER_RAISES": "after"})
    assert broke.code == 2, broke.err
    assert (
        "llmb: error: the plugin wrapping_site failed in its hook llmb_resolve_recipe: "
        "ValueError: the wrapper broke. "
    ) in broke.err
    # the owner's failure passes through the wrapper: it is the owner's
    passed = llmb_proc(*PLAN, env={**env, "HOOKY_RAISES": "keyboard-interrupt"})
    assert passed.code == 2 and passed.err.startswith(NAMED + "KeyboardInterrupt"), passed.err
    fine = llmb_proc(*PLAN, "--json", env=env)
    assert fine.code == 0 and fine.json()["workload"] == "hooky", fine.err


@pytest.mark.parametrize("how", ["sleep", "sleep-swallowing"])
def test_a_real_ctrl_c_while_a_hook_runs_aborts_with_130(site, tmp_path, how):
    marker = tmp_path / "in-the-hook"
    env = {
        **os.environ,
        **site_env(site, HOOKY_RAISES=how, HOOKY_MARKER=str(marker)),
        "LLMB_INSTALL": str(tmp_path / "install"),
    }
    env.pop("LLMB_LOG_FORMAT", None)
    proc = subprocess.Popen(
        [_llmb_executable(), *PLAN],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the hook never ran"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.strip() == "llmb: error: aborted", err
    assert out == ""
