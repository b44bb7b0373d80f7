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

import pytest
from conftest import _SEED_VARS, _llmb_executable
from llmb.cli.output import Column, fit_text, output_width, render_table, shorten

pytestmark = pytest.mark.skipif(
    shutil.which("script") is None, reason="util-linux script is not installed"
)

_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def _environment(install: str) -> dict[str, str]:
    """This process's environment without what would change the output: a width, a log format, or a
    variable that picks a recipe; the install given."""
    drop = {"COLUMNS", "LINES", "LLMB_LOG_FORMAT", *_SEED_VARS}
    return {
        **{k: v for k, v in os.environ.items() if k not in drop},
        "LLMB_INSTALL": install,
        "TERM": "dumb",
    }


def _under_pty(
    llmb: str,
    args: list[str],
    install: str,
    columns: int | None = 80,
    stty: int | None = None,
    timeout: float = 300,
) -> list[str]:
    """The lines a terminal shows for ``llmb ARGS`` run under a pseudo-terminal (stdout and stderr both)."""
    command = shlex.join([llmb, *args])
    if stty:
        command = f"stty cols {stty} rows 50; {command}"
    env = _environment(install)
    if columns:
        env["COLUMNS"] = str(columns)
    proc = subprocess.run(
        ["script", "-qefc", command, "/dev/null"],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    text = _ESCAPES.sub("", proc.stdout)
    lines = []
    for raw in text.replace("\r\n", "\n").split("\n"):
        lines.append(raw.rsplit("\r", 1)[-1])  # what a carriage return leaves on the screen
    assert "Traceback" not in text, text
    return lines


def _too_wide(lines: list[str], width: int = 80) -> list[str]:
    return [f"{len(line)}: {line}" for line in lines if len(line) > width]


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
        # the run directory is wrapped whole, never cut: its lines joined are the path
        start = next(n for n, line in enumerate(lines) if line.startswith("  run dir     "))
        run_dir = lines[start][14:]
        for line in lines[start + 1 :]:
            if not line.startswith(" " * 14):
                break
            run_dir += line.strip()
        assert re.fullmatch(
            r"\$LLMB_INSTALL/workloads/llama31/experiments/(pretrain_llama31_8b_bf16_gpus1_\S+)/\1_\d+",
            run_dir,
        ), text


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
