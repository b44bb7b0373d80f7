"""Human output fits the terminal: under a real pseudo-terminal (util-linux ``script``) with ``COLUMNS=80``,
no line of ``list``, ``plan`` (every published configuration), ``status``, ``results``, ``compare``,
``config show``, ``plugins`` or a run's summary is wider than 80 columns; a pipe gets whole lines.

The runs are real: two tiny-proxy runs in a private install (one ends before its statistics window, so
``results`` and ``compare`` have notes to put under their tables).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import _llmb_executable
from llmb.cli.output import Column, fit_text, output_width, render_table, shorten
from narrow_terminal import ESCAPES as _ESCAPES
from narrow_terminal import environment as _environment
from narrow_terminal import path_problems as _path_problems
from narrow_terminal import too_wide as _too_wide
from narrow_terminal import under_pty as _under_pty

pytestmark = pytest.mark.skipif(
    shutil.which("script") is None, reason="util-linux script is not installed"
)


@pytest.fixture(scope="module")
def install_with_runs(tmp_path_factory, llmb_executable):
    """An install with two real tiny-proxy runs, started under a pty with COLUMNS=80: the run summaries."""
    install = str(tmp_path_factory.mktemp("narrow"))
    summaries = []
    for extra in ([], ["--set", "steps=20", "--no-window-check"]):
        summaries.append(
            _under_pty(
                llmb_executable,
                [
                    "run",
                    "llama31",
                    "--size",
                    "8b",
                    "--gpu",
                    "h100",
                    "--dtype",
                    "bf16",
                    "--gpus",
                    "1",
                    "--proxy",
                    "tiny",
                    *extra,
                ],
                install,
            )
        )
    return install, summaries


@pytest.fixture(scope="module")
def llmb_executable():
    return _llmb_executable()


def test_a_runs_summary_fits_80_columns(install_with_runs):
    _, summaries = install_with_runs
    for lines in summaries:
        text = "\n".join(lines)
        assert "SUCCEEDED" in text and "run dir" in text and "llmb logs local-" in text, text
        assert "1T tokens" not in text, text  # a proxy model's time to train is not shown
        assert _too_wide(lines) == [], text
        # the run directory is whole on a line of its own (the terminal wraps it), never cut or broken
        start = next(n for n, line in enumerate(lines) if line.startswith("  run dir"))
        assert lines[start].strip() == "run dir", text
        run_dir = lines[start + 1].strip()
        assert lines[start + 1].startswith(" " * 14) and lines[start + 2].startswith("  log "), text
        named = re.fullmatch(
            r"\$LLMB_INSTALL/workloads/llama31/experiments/(pretrain_llama31_8b_bf16_gpus1_\S+)/\1_\d+",
            run_dir,
        )
        assert named, text
        # the name said at the start is the directory's (issue 43: it was a shortened one)
        said = " ".join(" ".join(lines).split())
        assert re.search(rf"local-\w+: {named.group(1)} \(1 rank, local\)", said), text


@pytest.mark.parametrize(
    "args",
    [
        ["list"],
        ["list", "llama4"],
        ["list", "nemotron4"],
        ["status"],
        ["results"],
        ["compare"],
        ["config", "show"],
        ["plugins"],
        ["results", "--window", "1:5"],
    ],
    ids=lambda a: "-".join(a),
)
def test_listings_fit_80_columns(install_with_runs, llmb_executable, args):
    install, _ = install_with_runs
    lines = _under_pty(llmb_executable, args, install)
    assert _too_wide(lines) == [], "\n".join(lines)
    assert any(line.strip() for line in lines)


def test_a_jobs_status_fits_80_columns(install_with_runs, llmb_executable):
    install, _ = install_with_runs
    listed = subprocess.run(
        [llmb_executable, "status", "--json"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "LLMB_INSTALL": install},
    ).stdout
    for job in json.loads(listed):
        lines = _under_pty(llmb_executable, ["status", job["job_id"]], install)
        assert _too_wide(lines) == [], "\n".join(lines)


def test_the_terminals_own_width_is_used_without_columns(install_with_runs, llmb_executable):
    install, _ = install_with_runs
    lines = _under_pty(llmb_executable, ["results"], install, columns=None, stty=72)
    assert _too_wide(lines, 72) == [], "\n".join(lines)
    assert any("left out at 72 columns" in line for line in lines), "\n".join(lines)


# Issue 43, item 3: at 80 columns what judges a run stays, no value a user types is cut, and every path
# is whole on a line of its own.


@pytest.fixture(scope="module")
def judged_runs(install_with_runs):
    """Beside the tiny runs (local job ids in JOB), three Nemotron-H 56B runs of the published
    configuration, at and around its published step time (NeMo 2's log format): runs that have an MFU
    and a VS PUBLISHED."""
    from experiment_dirs import nemotronh_56b_run

    install, _ = install_with_runs
    root = Path(install) / "workloads" / "nemotronh" / "experiments"
    if not root.exists():
        for n, step in enumerate((15.892, 16.5, 15.0)):
            nemotronh_56b_run(root, step, stamp=str(1766132151 + n))
    return install


def _header(lines: list[str], first: str) -> list[str]:
    return next(line.split() for line in lines if line.startswith(first))


def test_results_at_80_columns_keeps_mfu_and_vs_published(judged_runs, llmb_executable):
    lines = _under_pty(llmb_executable, ["results"], judged_runs)
    text = "\n".join(lines)
    header = " ".join(_header(lines, "EXPERIMENT"))
    assert "MFU %" in header and "VS PUBLISHED" in header and "STATUS" in header, text
    assert "+0.0%" in text and "26.86" in text, text  # the published run's own figures
    assert _too_wide(lines) == [], text


def test_no_value_a_user_types_is_cut_at_80_columns(judged_runs, llmb_executable):
    install = judged_runs
    # llmb list: each --variant, --size, --gpu and --dtype value whole
    listed = _under_pty(llmb_executable, ["list"], install)
    table = [line for line in listed if line.startswith(("llama31", "llama4", "nemotron", "qwen3"))]
    assert table and not any("\u2026" in line for line in table), "\n".join(listed)
    words = {word for line in table for word in line.split()}
    assert {"megatron-bridge", "nemo2", "405b-proxy", "gb300", "fp8,nvfp4"} <= words, table
    # certify --dry-run: each task's label whole, its variant too
    env = {"PATH": os.environ["PATH"]}
    certify = ["certify", "--gpu", "h100", "--backend", "slurm", "--dry-run"]
    tasks = json.loads(
        subprocess.run(
            [llmb_executable, *certify, "--json"],
            capture_output=True,
            text=True,
            env={**_environment(install), **env},
        ).stdout
    )
    shown = _under_pty(llmb_executable, certify, install, env=env)
    text = "\n".join(shown)
    table = [line for line in shown if re.match(r"\d+ +\S", line)]
    for n, task in enumerate(tasks, start=1):
        row = next(line for line in table if line.split()[0] == str(n))
        assert task["task"] in row and "\u2026" not in row.split(task["task"])[1].split()[0:1], (
            task,
            text,
        )
    assert _too_wide(shown) == [], text
    # status: the workload stays (with the job, its state and the experiment)
    status = _under_pty(llmb_executable, ["status"], install)
    assert {"JOB", "STATE", "WORKLOAD", "EXPERIMENT"} <= set(_header(status, "JOB")), status


def test_every_path_is_whole_on_a_line_of_its_own_at_80_columns(
    install_with_runs, llmb_executable, tmp_path
):
    install, summaries = install_with_runs
    for lines in summaries:
        assert _path_problems(lines, install) == [], "\n".join(lines)
    listed = subprocess.run(
        [llmb_executable, "status", "--json"],
        capture_output=True,
        text=True,
        check=True,
        env=_environment(install),
    ).stdout
    job = json.loads(listed)[0]["job_id"]
    archive = tmp_path / ("a-long-folder-name-so-that-the-path-is-longer-than-a-line" * 2)
    archive.mkdir()
    for args in (
        ["status", job],
        ["results", "--full-names"],
        ["archive", "--output", str(archive / "runs.tar.gz")],
        ["preflight", "--gpu", "h100", "--nodes", "1", "--gpus-per-node", "2"],
    ):
        lines = _under_pty(llmb_executable, args, install)
        assert any("/" in line for line in lines), (args, lines)
        assert _path_problems(lines, install) == [], "\n".join(lines)


def test_dry_runs_fit_80_columns(install_with_runs, llmb_executable):
    """run --dry-run's own lines (what the backend would execute follows, verbatim), sweep's and
    install's dry runs."""
    install, _ = install_with_runs
    run = ["run", "llama31", "--size", "8b", "--gpu", "b200", "--dtype", "nvfp4", "--gpus", "8"]
    lines = _under_pty(llmb_executable, [*run, "--dry-run"], install)
    own = [line for line in lines if not line.startswith("RANK=")]
    assert any("llmb run --dry-run: local would run" in line for line in own), lines
    assert _too_wide(own) == [], "\n".join(own)
    for args in (
        ["sweep", "llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "1,2"]
        + ["--repeats", "2", "--proxy", "tiny", "--dry-run"],
        ["install", "--dry-run", "--no-images"],
    ):
        lines = _under_pty(llmb_executable, args, install)
        assert _too_wide(lines) == [], "\n".join(lines)


def test_a_pipe_gets_whole_lines(install_with_runs, llmb_executable):
    """Nothing is cut or wrapped for a pipe: the whole short names, every column, the log path."""
    install, _ = install_with_runs
    env = _environment(install)
    out = subprocess.run(
        [llmb_executable, "results"], capture_output=True, text=True, env=env
    ).stdout
    assert "llama31_8b_bf16_gpus1_tp1_pp1_mbs1_gbs" in out and "\u2026" not in out, out
    assert "DAYS/1T" in out and "left out" not in out, out
    full = subprocess.run(
        [llmb_executable, "results", "--full-names"], capture_output=True, text=True, env=env
    ).stdout
    assert "$LLMB_INSTALL/workloads/llama31/experiments/pretrain_llama31_8b_bf16_gpus1_" in full, (
        full
    )


def _published_rows(llmb: str, install: str) -> list[list[str]]:
    matrix = json.loads(
        subprocess.run(
            [llmb, "list", "--json"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "LLMB_INSTALL": install},
        ).stdout
    )
    rows = []
    for e in matrix:
        gpus = e["min_gpus"] if e["range"] else e["tested_gpus"][0]
        args = [
            "plan",
            e["workload"],
            "--variant",
            e["variant"],
            "--size",
            e["size"],
            "--gpu",
            e["gpu"],
            "--dtype",
            e["dtypes"][0],
            "--gpus",
            str(gpus),
        ]
        rows.append(args + (["--strong-scaling"] if e["scaling"] == "strong" else []))
    return rows


def test_plan_of_every_published_configuration_fits_80_columns(tmp_path, llmb_executable):
    install = str(tmp_path)
    rows = _published_rows(llmb_executable, install)
    assert len({r[1] for r in rows}) >= 4  # every workload
    # one pty session for all of them: each plan's lines are checked
    script = "; ".join(shlex.join([llmb_executable, *r]) for r in rows)
    env = {**_environment(install), "COLUMNS": "80"}
    proc = subprocess.run(
        ["script", "-qefc", script, "/dev/null"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    lines = _ESCAPES.sub("", proc.stdout).replace("\r\n", "\n").split("\n")
    assert sum(1 for line in lines if line.startswith("  parallelism")) == len(rows), proc.stdout[
        -3000:
    ]
    assert _too_wide(lines) == [], "\n".join(_too_wide(lines))


# The mechanism itself, on its own: cells cut with an ellipsis, columns left out and named, text wrapped
# under its label, and no width for anything that is not a terminal.


def test_a_table_leaves_out_empty_columns_first_then_cuts_names_in_the_middle():
    rows = [
        [
            "pretrain_llama31_8b_bf16_gpus8_tp1_pp1_cp1_vpNone_ep1_mbs1_gbs128",
            "local-5dd36c",
            "-",
            "12.5",
        ]
    ]
    columns = [
        Column("EXPERIMENT", squeeze=20, cut="middle"),
        "JOB",
        Column("MFU %", drop=1),
        Column("STEP ms", drop=2),
    ]
    text = render_table(columns, rows, width=50)
    lines = text.split("\n")
    assert all(len(line) <= 50 for line in lines), text
    # the empty column went, the other stayed
    assert "MFU %" not in lines[0] and "STEP ms" in lines[0], text
    assert (
        lines[2].startswith("pretrain_llama31") and "\u2026" in lines[2] and "gbs128" in lines[2]
    ), text
    assert lines[3].startswith("(left out at 50 columns: MFU %;"), text
    assert render_table(columns, rows, width=None).count("\u2026") == 0


def test_text_wraps_under_its_label():
    line = "  memory       ~49.0 GB per GPU of 80 GB (stage 0: weights 8.0, gradients 16.0, optimizer 8.7)"
    wrapped = fit_text(line, 60).split("\n")
    assert len(wrapped) == 2 and all(len(w) <= 60 for w in wrapped)
    assert wrapped[1].startswith(" " * 15) and not wrapped[1].startswith(" " * 16)
    assert fit_text(line, None) == line
    assert (
        shorten("abcdefghij", 5, "middle") == "abc\u2026j"
        and shorten("abcdefghij", 5) == "abcd\u2026"
    )


def test_no_width_for_a_pipe_and_columns_wins(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    with open(os.devnull, "w") as sink:
        assert output_width(sink) is None
    monkeypatch.setenv("COLUMNS", "80")
    assert output_width() == 80
    monkeypatch.setenv("COLUMNS", "not a number")
    with open(os.devnull, "w") as sink:
        assert output_width(sink) is None


def test_a_path_column_marks_what_it_cannot_hold_and_prints_it_whole_after_the_table():
    long = "/lustre/fsw/" + "a-very-long-folder-name/" * 4 + "log-pretrain_llama31_8b.out"
    rows = [[long, "local-000001", "12.5"], ["/short/log.out", "local-000002", "13.0"]]
    columns = [Column("EXPERIMENT", squeeze=6, cut="path"), "JOB", "STEP ms"]
    lines = render_table(columns, rows, width=60).split("\n")
    assert lines[2].split() == ["[1]", "local-000001", "12.5"], lines
    assert lines[3].split() == ["/short/log.out", "local-000002", "13.0"], (
        lines
    )  # it fits: in place
    assert lines[4] == f"[1] {long}" and all(len(line) <= 60 for line in lines[:4]), lines
    # a table that fits holds every path in place, marks none
    assert "[1]" not in render_table(columns, rows, width=None)
