"""Text from logs and file names never reaches a terminal as escape
sequences or control characters: ``llmb results``, ``llmb compare`` and
``llmb logs`` run as real processes, on a pipe and on a pseudo-terminal,
and their output is checked byte by byte."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import tty
from pathlib import Path

import pytest
from conftest import _llmb_executable
from experiment_dirs import make_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402
from llmb.cli.output import terminal_safe  # noqa: E402

MB = "pretrain_llama3_8b_fp8_gpus8_tp1_pp1_cp1_vpNone_ep1_etpNone_mbs2_gbs128"
# A window title (OSC ... BEL), clear screen (CSI 2J), C1 CSI as a raw byte and
# as UTF-8 (U+009B), a DCS string, a bell, a carriage return that would overwrite the line.
ATTACK = (
    b"\x1b]0;pwned\x07\x1b[2J\x9b6n\xc2\x9b31mred\x1bP1$qm\x1b\\ ring\x07 "
    b"over\rwritten \x1b7\x1bc\x7f end"
)
# Anything a terminal acts on: C0 but tab and newline, DEL, and C1 (raw, or encoded in UTF-8).
CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


def assert_inert(output: bytes, human: bool = True) -> None:
    found = CONTROL.search(output)
    assert found is None, (found, output[max(0, found.start() - 60) : found.end() + 60])
    if human:
        assert b"pwned" not in output  # the title's text went with its sequence


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain text\twith a tab\n", "plain text\twith a tab\n"),
        ("\x1b]0;pwned\x07title", "title"),
        ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),
        ("\x1b[2J\x1b[1;31mred\x1b[0m", "red"),
        ("\x9b2Jc1", "c1"),
        ("\x9d0;pwned\x9cc1 osc", "c1 osc"),
        ("a\rb\r\nc", "a\nb\nc"),
        ("bell\x07 nul\x00 del\x7f c1\x85", "bell\\x07 nul\\x00 del\\x7f c1\\x85"),
        ("lone escape at the end\x1b", "lone escape at the end\\x1b"),
        ("\x1bc\x1b(Breset", "reset"),
        ("ünïcödé 日本 ✓", "ünïcödé 日本 ✓"),
    ],
)
def test_terminal_safe(text, shown):
    assert terminal_safe(text) == shown
    assert_inert(terminal_safe(text).encode())


def test_table_cells_stay_on_one_line():
    from llmb.cli.output import render_table

    assert render_table(["A", "B"], [["x\x1b[2J\ry\tz", 1]]).splitlines() == [
        "A      B",
        "-----  -",
        "x y z  1",
    ]


def run(argv: list[str], env: dict[str, str], on_tty: bool) -> tuple[int, bytes, bytes]:
    """``llmb argv``'s exit code, stdout and stderr, as bytes; stdout on a
    raw pseudo-terminal (no newline translation) when ``on_tty``."""
    full = [_llmb_executable(), *argv]
    if not on_tty:
        proc = subprocess.run(full, capture_output=True, env=env, timeout=120)
        return proc.returncode, proc.stdout, proc.stderr
    leader, follower = pty.openpty()
    tty.setraw(follower)
    proc = subprocess.Popen(
        full, stdin=subprocess.DEVNULL, stdout=follower, stderr=subprocess.PIPE, env=env
    )
    os.close(follower)
    out = b""
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 120)
            assert ready, "llmb wrote nothing for 120 s"
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            out += chunk
        err = proc.stderr.read()
        return proc.wait(timeout=120), out, err
    finally:
        os.close(leader)
        proc.stderr.close()


@pytest.fixture
def hostile(tmp_path):
    """$LLMB_INSTALL, and experiments whose logs and directory names carry escape sequences."""
    install = tmp_path / "install"
    root = tmp_path / "experiments"
    good = make_run(root, MB, loggen.megatron_bridge_lines(range(1, 51)), stamp="1000001")
    log = good / MB / f"log-{MB}.out"
    log.write_bytes(log.read_bytes() + b"[NeMo I] " + ATTACK + b"\n")
    failed = make_run(root, MB, None, stamp="1000002") / MB / f"log-{MB}.out"
    failed.write_bytes(
        "\n".join(loggen.megatron_bridge_lines(range(1, 20))).encode()
        + b"\n"
        + b"torch.OutOfMemoryError: CUDA out of memory. "
        + ATTACK
        + b"\n"
    )
    named = "exp_\x1b]0;pwned\x07\x1b[2J"  # a directory name is untrusted text too
    make_run(root, named, loggen.megatron_bridge_lines(range(1, 51)), stamp="1000003")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMB_")}
    env.update(LLMB_INSTALL=str(install), LLMB_LOG_FORMAT="json")
    return root, env, failed


@pytest.mark.parametrize("on_tty", [False, True], ids=["pipe", "tty"])
@pytest.mark.parametrize("fmt", ["table", "csv"])
def test_results_and_compare_print_no_escape_sequences(hostile, on_tty, fmt):
    root, env, _ = hostile
    code, out, err = run(["results", str(root), "--format", fmt], env, on_tty)
    assert code == 0, err
    assert_inert(out)
    # The text itself stays: the failure reason is the carriage-return-separated segment that holds the
    # error (a progress bar's redraws are not the message), so the attack's "written ... end" after its \r is not.
    assert b"CUDA out of memory. " in out and b"red" in out and b"ring" in out
    if fmt == "table":  # the cleaned name is what the columns are sized to
        header = out.splitlines()[0]
        # no llmb job ran it: JOB is "-", not the number its directory ends with
        row = next(line for line in out.splitlines() if line.startswith(b"exp_ "))
        assert re.match(rb"exp_\s+-\s+success\s", row), row
        assert row.index(b"success") == header.index(b"STATUS")
    else:
        assert b"\nexp__1000003," in out
    code, out, err = run(["compare", str(root)], env, on_tty)
    assert code == 1, err  # the failed run fails the gate
    assert_inert(out)
    assert b"CUDA out of memory" in out


def test_json_keeps_the_text_escaped(hostile):
    root, env, _ = hostile
    code, out, _ = run(["results", str(root), "--json"], env, on_tty=False)
    assert code == 0
    assert_inert(out, human=False)
    reasons = [r["failure_reason"] for r in json.loads(out) if r["failure_reason"]]
    assert any("\x1b]0;pwned\x07" in r for r in reasons)  # the data is intact, escaped by JSON


@pytest.mark.parametrize("on_tty", [False, True], ids=["pipe", "tty"])
def test_logs_print_no_escape_sequences(hostile, on_tty):
    _, env, log = hostile
    job_dir = Path(env["LLMB_INSTALL"]) / "jobs" / "local-0a1b2c"
    job_dir.mkdir(parents=True)
    (job_dir / "job.json").write_text(
        json.dumps(
            {
                "id": "local-0a1b2c",
                "backend": "local",
                "workload": "llama31",
                "experiment": MB,
                "run_dir": str(log.parent.parent),
                "log": str(log),
                "ranks": 1,
                "submitted_at": "2026-11-21T10:00:00+00:00",
            }
        )
    )
    for args in ([], ["--tail", "2"]):  # the carriage return began a line of its own
        code, out, err = run(["logs", "local-0a1b2c", *args], env, on_tty)
        assert code == 0, err
        assert_inert(out)
        assert b"torch.OutOfMemoryError: CUDA out of memory. " in out and b"written" in out
    assert b"iteration" in run(["logs", "local-0a1b2c"], env, on_tty)[1]


def _job_of(env: dict[str, str], log: Path) -> str:
    """An llmb job record whose run is ``log``'s; its id."""
    job_dir = Path(env["LLMB_INSTALL"]) / "jobs" / "local-0a1b2d"
    job_dir.mkdir(parents=True)
    (job_dir / "job.json").write_text(
        json.dumps(
            {
                "id": "local-0a1b2d",
                "backend": "local",
                "workload": "llama31",
                "experiment": MB,
                "run_dir": str(log.parent.parent),
                "log": str(log),
                "ranks": 1,
                "submitted_at": "2026-11-21T10:00:00+00:00",
            }
        )
    )
    return "local-0a1b2d"


@pytest.mark.parametrize("log_format", ["console", "json"])
def test_errors_quoting_a_failure_reason_print_no_escape_sequences(hostile, log_format):
    """``compare --baseline JOB`` of a failed job quotes the failure reason its log gives, in the error."""
    root, env, log = hostile
    env = {**env, "LLMB_LOG_FORMAT": log_format}
    code, out, err = run(["compare", str(root), "--baseline", _job_of(env, log)], env, False)
    assert code == 2, err
    assert out == b""
    assert err.startswith(
        b"llmb: error: --baseline local-0a1b2d: job local-0a1b2d has no successful run"
    )
    assert b"(failed: " in err and b"CUDA out of memory. " in err
    assert_inert(err)


@pytest.mark.parametrize("log_format", ["console", "json"])
def test_warnings_and_errors_naming_a_results_file_print_no_escape_sequences(hostile, log_format):
    """A results file's name is untrusted text: the warning for a row it skips, and the error refusing it."""
    root, env, _ = hostile
    env = {**env, "LLMB_LOG_FORMAT": log_format}
    code, out, err = run(["results", str(root), "--format", "json"], env, False)
    assert code == 0, err
    good = next(r for r in json.loads(out) if r["status"] == "success")
    named = root.parent / "base\x1b]0;pwned\x07\x1b[2J.json"
    named.write_text(json.dumps([{**good, "time_mean_ms": "abc"}, good]))
    code, out, err = run(["compare", str(root), "--baseline", str(named)], env, False)
    # the good row was read: it is the run of unknown configuration, which no other run is of (so they are
    # outside the question the baseline asks), and itself; nothing was compared (issue 40)
    assert code == 3, err
    assert_inert(out)
    assert b"time_mean_ms is" in err and b"that row is skipped" in err
    assert_inert(err, human=log_format == "console")
    named.write_text("not json \x1b[2J")
    code, out, err = run(["compare", str(root), "--baseline", str(named)], env, False)
    assert code == 2, err
    assert err.startswith(b"llmb: error: the baseline ") and b"is not a results file" in err
    assert_inert(err)


# Issue 41, item 5: a plugin's own data is untrusted text too. Its document title (which plan cites
# on three lines), its description and its variant's description carry the attack.
TITLE = "Evil \x1b]0;pwned\x07recipe\x1b[2J \u009b31mred\x1bP1$qm\x1b\\ ring\x07 title \x1b7\x1bc\x7f end"
PROXY_PLAN = ["hostile", "--size", "1b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "2"]


@pytest.fixture
def hostile_plugin(tmp_path):
    """A real plugin distribution (found by entry-point discovery) whose data holds escape sequences."""
    from fake_plugins import install_plugin, site_env
    from workload_dicts import minimal_workload

    workload = minimal_workload("hostile")
    workload["description"] = f"A workload {TITLE}"
    workload["documents"] = {"doc.md": TITLE}
    workload["variants"][0]["description"] = f"variant {TITLE}"
    site = install_plugin(tmp_path / "site", "hostile", workload=workload)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMB_")}
    env.update(site_env(site), LLMB_INSTALL=str(tmp_path / "install"))
    return env


@pytest.mark.parametrize("on_tty", [False, True], ids=["pipe", "tty"])
@pytest.mark.parametrize(
    "argv",
    [
        ["plan", *PROXY_PLAN[:-1], "8"],
        ["plan", *PROXY_PLAN, "--proxy", "tiny"],  # with the proxy's own lines
        ["plan", *PROXY_PLAN, "--proxy", "tiny", "--steps", "3"],  # and the run's
    ],
    ids=["plan", "plan-proxy", "plan-run"],
)
def test_plan_prints_no_escape_sequences_of_a_plugins_document_title(hostile_plugin, on_tty, argv):
    code, out, err = run(argv, hostile_plugin, on_tty)
    assert code == 0, err
    assert_inert(out)
    assert_inert(err)
    assert out.count(b"Evil recipe red ring") >= 2, out  # cited, as text


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "hostile"],
        ["plugins"],
        ["run", *PROXY_PLAN, "--proxy", "tiny", "--dry-run"],
    ],
    ids=["list", "plugins", "run-dry-run"],
)
def test_the_other_commands_print_no_escape_sequences_of_a_plugins_data(hostile_plugin, argv):
    code, out, err = run(argv, hostile_plugin, on_tty=True)
    assert code == 0, err
    assert_inert(out)
    assert_inert(err)


def test_plans_json_keeps_a_plugins_title_escaped(hostile_plugin):
    code, out, err = run(["plan", *PROXY_PLAN, "--proxy", "tiny", "--json"], hostile_plugin, False)
    assert code == 0, err
    assert_inert(out, human=False)
    assert json.loads(out)["source"].startswith(TITLE)  # the data is intact, escaped by JSON
