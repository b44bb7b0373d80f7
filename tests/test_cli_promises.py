"""Promises tested where users meet them, through the command (issue 36, item 3): the scale warning
and the refusal below the tested range in ``llmb plan``, and where llmb keeps its files by default
and how it shows their paths (``~/...``, ``$LLMB_INSTALL/...``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import loggen
from conftest import _llmb_executable
from experiment_dirs import make_run

MB = "pretrain_llama3_8b_bf16_gpus8_tp1_pp1_cp1_vpNone_ep1_mbs4_gbs128"
PLAN = ("plan", "llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus")


def test_plan_tags_a_scale_above_the_tested_range_not_validated(llmb_proc):
    result = llmb_proc(*PLAN, "256")
    assert result.code == 0, result.err
    [source] = [line for line in result.out.splitlines() if line.startswith("source:")]
    assert source.endswith("[NOT VALIDATED at this scale]")
    assert "256 GPUs is above the largest scale the published recipe tests" in result.out
    tested = llmb_proc(*PLAN, "128")
    assert tested.code == 0 and "NOT VALIDATED" not in tested.out


NEMOTRON4_B200 = (
    "plan",
    "nemotron4",
    "--size",
    "340b",
    "--gpu",
    "b200",
    "--dtype",
    "fp8",
    "--gpus",
)


def test_a_count_between_the_tested_ones_is_not_tested_in_text_and_json(llmb_proc):
    """Issue 40, item 6: the Nemotron-4 340B recipe tests 128, 256, 512 and 1024 B200 GPUs. 192 still
    resolves (the series' layout and GBS rule), but it is not tested, so not validated."""
    shown = llmb_proc(*NEMOTRON4_B200, "192", "--json")
    assert shown.code == 0, shown.err
    plan = shown.json()
    assert (plan["validated"], plan["scale_status"]) == (False, "not tested")
    assert any(
        "192 GPUs is between the counts the published recipe tests" in w
        and "128, 256, 512, 1024 GPUs" in w
        and "not tested" in w
        for w in plan["warnings"]
    ), plan["warnings"]

    text = llmb_proc(*NEMOTRON4_B200, "192")
    assert text.code == 0, text.err
    [source] = [line for line in text.out.splitlines() if line.startswith("source:")]
    assert source.endswith("[NOT TESTED at this scale]")
    assert "not tested" in text.out and "validated" not in text.out.replace("not validated", "")


def test_a_count_the_recipe_lists_is_validated(llmb_proc):
    plan = llmb_proc(*NEMOTRON4_B200, "256", "--json")
    assert plan.code == 0, plan.err
    assert (plan.json()["validated"], plan.json()["scale_status"]) == (True, "tested")
    text = llmb_proc(*NEMOTRON4_B200, "256")
    assert text.code == 0 and "NOT TESTED" not in text.out and "not tested" not in text.out


def test_plan_refuses_a_scale_below_the_tested_range_with_exit_2(llmb_proc):
    result = llmb_proc(*PLAN, "4")
    assert result.code == 2 and "Traceback" not in result.err
    assert "needs at least 8 GPUs; 4 is below the smallest tested scale (tested: 8-128 GPUs)" in (
        result.err
    )


def _results(home: Path, **env: str) -> str:
    """``llmb results --full-names`` as a user with ``home`` and ``env`` (no LLMB_INSTALL unless given)."""
    clean = {
        k: v for k, v in os.environ.items() if k not in ("LLMB_INSTALL", "XDG_DATA_HOME", "COLUMNS")
    }
    proc = subprocess.run(
        [_llmb_executable(), "results", "--full-names"],
        env={**clean, "HOME": str(home), "COLUMNS": "400", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _a_run_under(install: Path) -> None:
    make_run(
        install / "workloads" / "llama31" / "experiments",
        MB,
        loggen.megatron_bridge_lines(range(1, 51)),
    )


def test_the_default_install_is_under_the_home_directory_and_shown_from_it(tmp_path):
    home = tmp_path / "home"
    _a_run_under(home / ".local" / "share" / "llmb")
    shown = _results(home)
    assert f"~/.local/share/llmb/workloads/llama31/experiments/{MB}/" in shown
    assert str(home) not in shown


def test_xdg_data_home_moves_the_default_install(tmp_path):
    home, elsewhere = tmp_path / "home", tmp_path / "data"
    _a_run_under(home / "xdg" / "llmb")
    assert f"~/xdg/llmb/workloads/llama31/experiments/{MB}/" in _results(
        home, XDG_DATA_HOME=str(home / "xdg")
    )
    _a_run_under(elsewhere / "llmb")  # outside the home directory: shown whole
    assert f"{elsewhere}/llmb/workloads/llama31/experiments/{MB}/" in _results(
        home, XDG_DATA_HOME=str(elsewhere)
    )


def test_an_explicit_install_is_shown_from_llmb_install(tmp_path):
    home, install = tmp_path / "home", tmp_path / "home" / "bench"
    _a_run_under(install)
    shown = _results(home, LLMB_INSTALL=str(install))
    assert f"$LLMB_INSTALL/workloads/llama31/experiments/{MB}/" in shown
