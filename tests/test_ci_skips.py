"""The suite's own guards (tests/conftest.py), each shown by a real pytest run (issue 36):

- under CI a skip fails: what is missing on the machine cannot pass as skipped (with torch
  uninstalled about a hundred tests skipped and the run passed). A torch that cannot be imported
  stands in for an uninstalled one. Each of the two ways a test skips fails: a module skipped as it
  is collected, and a test that skips once running (in its body, or in a fixture it asks for);
- a developer's exported $LLMB_INSTALL is never written by the tests (a results.sqlite appeared in
  one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _run_pytest(
    cwd: Path, *args: str, ci: bool, path: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    """A real pytest run in ``cwd``, with ``CI`` set or not, ``path`` before PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*path, env.get("PYTHONPATH")]))
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _pytest(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess:
    broken = tmp_path / "site" / "torch"
    broken.mkdir(parents=True, exist_ok=True)
    (broken / "__init__.py").write_text(
        "raise ModuleNotFoundError('torch is not installed here', name='torch')\n"
    )
    return _run_pytest(TESTS, "-q", "test_checkpoint_trust.py", ci=ci, path=(str(broken.parent),))


def test_without_torch_the_module_skips_on_a_developer_machine_and_fails_under_ci(tmp_path):
    here = _pytest(tmp_path, ci=False)
    # 5: pytest collected nothing to run (the whole module skipped)
    assert here.returncode in (0, 5) and "1 skipped" in here.stdout, here.stdout[-2000:]
    ci = _pytest(tmp_path, ci=True)
    assert ci.returncode != 0, ci.stdout[-2000:]
    assert "skipped under CI, which must run every test" in ci.stdout
    assert "distributed checkpoints need torch" in ci.stdout and "1 skipped" not in ci.stdout


SKIPPING = {
    # skipped as the module is collected (pytest_make_collect_report's report)
    "test_collected.py": (
        "import pytest\n"
        "pytest.skip('no collector here', allow_module_level=True)\n"
        "def test_never_collected():\n"
        "    pass\n"
    ),
    # skipped once running: in the test's body, and in a fixture's setup (pytest_runtest_makereport's)
    "test_running.py": (
        "import pytest\n"
        "@pytest.fixture\n"
        "def tool():\n"
        "    pytest.skip('no tool in the fixture')\n"
        "def test_in_its_body():\n"
        "    pytest.skip('no program in the body')\n"
        "def test_in_its_fixture(tool):\n"
        "    pass\n"
        "@pytest.mark.skip(reason='a marked skip')\n"
        "def test_marked():\n"
        "    pass\n"
    ),
}


def _probe(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess:
    probe = tmp_path / "probe"
    probe.mkdir(exist_ok=True)
    for name, text in SKIPPING.items():
        (probe / name).write_text(text)
    # every report (-rA), and the modules after one that fails to collect
    flags = ("-rA", "--continue-on-collection-errors", "-p", "conftest", "-p", "no:xdist", ".")
    return _run_pytest(probe, *flags, ci=ci, path=(str(TESTS),))


def test_every_way_a_test_skips_fails_under_ci(tmp_path):
    here = _probe(tmp_path, ci=False)
    assert here.returncode == 0, here.stdout[-3000:]
    assert "4 skipped" in here.stdout and "failed" not in here.stdout, here.stdout[-3000:]
    ci = _probe(tmp_path, ci=True)
    assert ci.returncode == 1, ci.stdout[-3000:]
    failed = [line for line in ci.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    for where, reason in (
        ("test_collected.py", "no collector here"),
        ("test_running.py::test_in_its_body", "no program in the body"),
        ("test_running.py::test_in_its_fixture", "no tool in the fixture"),
        ("test_running.py::test_marked", "a marked skip"),
    ):
        assert any(line.split()[1] == where for line in failed), (where, ci.stdout[-3000:])
        assert (
            f"skipped under CI, which must run every test (.ci/run installs what the suite needs): {reason}"
            in ci.stdout
        )
    assert "skipped" not in ci.stdout.splitlines()[-1], ci.stdout[-3000:]


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
