"""Shared fixtures: the real plugin host, the seeds, and ways to run the CLI.

``cli`` runs ``llmb`` in-process (fast, for many invocations); ``llmb_proc``
runs the installed console script as a real process (for exit codes, stderr
and imports exactly as a user sees them).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# A width from the shell that started the tests would cut and wrap what they read (llmb.cli.output): tests
# that need one set it themselves.
os.environ.pop("COLUMNS", None)
# A developer's exported $LLMB_INSTALL is their own install: no test writes there (issue 36). Tests that
# need one get a private one (the cli and llmb_proc fixtures, install_root) or set it themselves.
os.environ.pop("LLMB_INSTALL", None)
# A suite started in the background by a non-interactive shell (`cmd &`, nohup) inherits SIGINT ignored,
# and so does every llmb a test starts: the Ctrl-C tests would then test nothing but that. The default
# disposition here is what a terminal gives (a child's handlers are reset on exec; an ignore is not).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, str(Path(__file__).parent))
# loggen: logs in the seeds' formats
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from llmb.install.cluster_settings import SETTINGS  # noqa: E402
from llmb.plugins.host import PluginHost  # noqa: E402
from seed_tables import seeds_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def host() -> PluginHost:
    return PluginHost()


@pytest.fixture(scope="session")
def seeds() -> Path:
    found = seeds_dir()
    if found is None:
        pytest.skip(
            "seed documents not found: need ../shared/seeds beside the checkout or $LLMB_SEEDS_DIR"
        )
    return found


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


def _llmb_executable() -> str:
    beside = Path(sys.executable).with_name("llmb")
    return str(beside) if beside.exists() else (shutil.which("llmb") or "llmb")


@pytest.fixture(autouse=True)
def _warnings_said_afresh():
    """A warning is said once per command (llmb.log); in this process each
    test starts afresh, as each command does, with the format from its environment."""
    from llmb import log

    log.configure()


@pytest.fixture(scope="session")
def llmb_proc(tmp_path_factory):
    """Run the installed ``llmb`` console script as a separate process."""
    exe = _llmb_executable()

    install = tmp_path_factory.mktemp("install")

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Result:
        full_env = {
            k: v for k, v in os.environ.items() if k not in _SEED_VARS and k != "LLMB_LOG_FORMAT"
        }
        full_env["LLMB_INSTALL"] = str(install)
        full_env.update(env or {})
        proc = subprocess.run(
            [exe, *args], capture_output=True, text=True, env=full_env, timeout=timeout
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run


# Variables a developer's shell may hold that would change what a test asks for.
_SEED_VARS = (
    "MODEL_SIZE",
    "DTYPE",
    "JOB_TOTAL_GPUS",
    "GPU_TYPE",
    "STRONG_SCALING",
    "GPUS_PER_NODE",
    "SBATCH_ACCOUNT",
    "SBATCH_PARTITION",
    "SBATCH_TIMELIMIT",
    "SBATCH_GPUS_PER_NODE",
    "ADDITIONAL_SLURM_PARAMS",
    "LLMB_BACKEND",
    "HF_TOKEN",
    "LLMB_HF_FILE_TIMEOUT",
    "LLMB_HF_TIMEOUT",
    "ENABLE_PROFILE",
    "ENABLE_NCCLTRACE",
    "ENABLE_CHECKPOINT",
    "ENABLE_GPU_METRICS",
    "LOAD_CHECKPOINT_PATH",
    "CHECKPOINT_DIR",
    *(setting.variable for setting in SETTINGS),
)  # every cluster setting's variable (SBATCH_QOS, ...)


def _private_slurm(tmp_path_factory, accounting: bool, name: str | None = None, **cluster):
    """A private Slurm for a fixture to yield (``cluster``: PrivateSlurm's ``nodes``, ``wrappers``); skipped
    where the daemons are missing, except under CI, where that fails."""
    from private_slurm import PrivateSlurm, missing_daemons

    missing = missing_daemons(accounting)
    packages = "slurm-wlm munge" + (" mariadb-server slurmdbd" if accounting else "")
    if missing:
        if os.environ.get("CI"):
            pytest.fail(
                f"CI must run the Slurm tests, but {', '.join(missing)} is not installed (.ci/run installs "
                f"{packages})"
            )
        pytest.skip(f"not installed here: {', '.join(missing)} (apt-get install {packages})")
    private = PrivateSlurm(
        tmp_path_factory.mktemp(name or ("slurm-accounting" if accounting else "slurm")),
        accounting,
        **cluster,
    )
    try:
        private.up()
        yield private
    finally:
        private.down()


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A private Slurm (two nodes on 127.0.0.1) for the session; see tests/private_slurm.py."""
    yield from _private_slurm(tmp_path_factory, accounting=False)


@pytest.fixture(scope="session")
def slurm_accounting(tmp_path_factory):
    """Another, keeping accounting in slurmdbd (MariaDB), associations enforced."""
    yield from _private_slurm(tmp_path_factory, accounting=True)


@dataclass
class ProxyCertification:
    install: Path  # its $LLMB_INSTALL: the suite, the sweep, one local job and its run directory
    env: dict[str, str]  # what llmb_proc needs to see that install
    result: Result  # llmb certify ... --json
    suite: dict | None  # its --json, None when it failed


@pytest.fixture(scope="session")
def proxy_certification(llmb_proc, tmp_path_factory) -> ProxyCertification:
    """One real proxy certification on this machine, shared by the tests that read it (read only: copy
    the install to change anything): the local backend trains llama31 8b's tiny proxy on one rank (about
    20 s on 2 cores), judged by the certification gates."""
    pytest.importorskip("torch", reason="the torch engine needs torch")
    root = tmp_path_factory.mktemp("proxy-certification")
    suite = root / "suite.yaml"
    suite.write_text("llama31_8b: {dtypes: [bf16], scales: [1]}\n")
    env = {"LLMB_INSTALL": str(root / "install"), "LLMB_NO_CACHE": "1"}
    result = llmb_proc(
        "certify",
        "--file",
        str(suite),
        "--gpu",
        "h100",
        "--proxy",
        "tiny",
        "--json",
        env=env,
        timeout=900,
    )  # a hang guard only
    try:
        shown = json.loads(result.out)
    except ValueError:
        shown = None
    return ProxyCertification(root / "install", env, result, shown)


@pytest.fixture
def install_root(tmp_path, monkeypatch) -> Path:
    """A fresh $LLMB_INSTALL (not created yet) for this test, seen by ``cli``."""
    root = tmp_path / "install"
    monkeypatch.setenv("LLMB_INSTALL", str(root))
    return root


@pytest.fixture
def cli(host, monkeypatch, capsys, tmp_path_factory):
    """Run ``llmb`` in this process against the session's plugin host, with
    a private $LLMB_INSTALL unless the test set one."""
    from llmb.cli import main

    for var in _SEED_VARS:
        monkeypatch.delenv(var, raising=False)
    if "LLMB_INSTALL" not in os.environ:
        monkeypatch.setenv("LLMB_INSTALL", str(tmp_path_factory.mktemp("install")))

    def run(*args: str) -> Result:
        capsys.readouterr()
        try:
            main(list(args), host=host)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        else:  # pragma: no cover - main always exits
            code = 0
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def pytest_terminal_summary(terminalreporter, config):
    """The framework contract tests' counts (test_framework_contracts.py), one line per framework version."""
    from test_framework_contracts import COUNTS

    lines = sorted(
        value
        for report in terminalreporter.stats.get("passed", [])
        + terminalreporter.stats.get("failed", [])
        if report.when == "call"
        for name, value in report.user_properties
        if name == COUNTS
    )
    if lines:
        terminalreporter.section("framework contracts")
        for line in lines:
            terminalreporter.write_line(line)


# ------------------------------------------------------------------ under CI, a skip is a failure
# A test that skips because a package, a program or a permission is missing would let a broken CI
# pass (issue 36: without torch about a hundred tests skipped). With CI set, .ci/run has installed
# everything the suite needs, so every skip, at collection or at run time, fails with its reason.


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _fail_a_skip_under_ci(report) -> None:
    if report.skipped and os.environ.get("CI") and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under CI, which must run every test (.ci/run installs what the suite "
            f"needs): {_skip_reason(report)}"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_a_skip_under_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_a_skip_under_ci(outcome.get_result())
