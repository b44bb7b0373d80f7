"""The suite's own guards (tests/conftest.py), each shown by a real pytest run (issue 36):

- under CI a skip fails: what is missing on the machine cannot pass as skipped (with torch
  uninstalled about a hundred tests skipped and the run passed). A torch that cannot be imported
  stands in for an uninstalled one;
- a developer's exported $LLMB_INSTALL is never written by the tests (a results.sqlite appeared in
  one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _pytest(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess:
    broken = tmp_path / "site" / "torch"
    broken.mkdir(parents=True, exist_ok=True)
    (broken / "__init__.py").write_text(
        "raise ModuleNotFoundError('torch is not installed here', name='torch')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(broken.parent), env.get("PYTHONPATH")]))
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "test_checkpoint_trust.py",
        ],
        cwd=TESTS,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_without_torch_the_module_skips_on_a_developer_machine_and_fails_under_ci(tmp_path):
    here = _pytest(tmp_path, ci=False)
    # 5: pytest collected nothing to run (the whole module skipped)
    assert here.returncode in (0, 5) and "1 skipped" in here.stdout, here.stdout[-2000:]
    ci = _pytest(tmp_path, ci=True)
    assert ci.returncode != 0, ci.stdout[-2000:]
    assert "skipped under CI, which must run every test" in ci.stdout
    assert "distributed checkpoints need torch" in ci.stdout and "1 skipped" not in ci.stdout


def test_a_developers_own_install_is_never_written(tmp_path):
    mine = tmp_path / "my-install"
    probe = tmp_path / "probe" / "test_probe.py"
    probe.parent.mkdir()
    probe.write_text(
        "import os\n"
        "def test_the_cli_fixture_uses_an_install_of_its_own(cli):\n"
        "    assert cli('status').code in (0, 1)\n"
        f"    assert os.environ['LLMB_INSTALL'] != {str(mine)!r}\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(
        LLMB_INSTALL=str(mine),
        PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")])),
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "conftest",
            str(probe),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:]
    assert not mine.exists()
