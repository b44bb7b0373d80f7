"""What a sweep or a certification would cost, said before it is spent (issue 43): each dry-run job's GPUs
and nodes for its time limit (the one asked for, else the one plan derives), and in all the GPU-hours, the
wall time one after another and the largest job."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from llmb.recipes.time_limit import slurm_minutes

SWEEP = ["sweep", "llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16"]
COST = re.compile(
    r"at their time limits: (?:at most ([\d,]+) GPU-hours|no GPUs \(CPU proxies\)) and at most "
    r"(\d+) h (\d\d) min of wall time one after another; the largest job (\d+) nodes? ?(?:\(([\d,]+) GPUs\))?\."
)


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("45", 45),
        ("45:30", 46),  # minutes:seconds, the seconds rounded up
        ("2:00:00", 120),
        ("1-12", 36 * 60),  # days-hours
        ("1-12:30", 36 * 60 + 30),
        ("1-00:00:01", 24 * 60 + 1),
        ("UNLIMITED", None),
        ("", None),
        (None, None),
        ("1:2:3:4", None),
        ("-5", None),
        ("x", None),
    ],
)
def test_slurm_time_forms_in_minutes(text, minutes):
    assert slurm_minutes(text) == minutes


def test_a_sweep_with_a_time_limit_costs_its_gpus_for_it(cli, monkeypatch):
    monkeypatch.setenv("LLMB_FORCE_CPU", "1")
    args = [*SWEEP, "--gpus", "8,16", "--backend", "slurm", "--time-limit", "1-00:00:00"]
    shown = cli(*args, "--dry-run")
    assert shown.code == 0, shown.err
    # 8 and 16 GPUs for a day each, one after the other; 16 GPUs are 2 nodes of 8
    assert (
        "at their time limits: at most 576 GPU-hours and at most 48 h 00 min of wall time one after "
        "another; the largest job 2 nodes (16 GPUs)." in shown.err
    ), shown.err
    jobs = json.loads(cli(*args, "--dry-run", "--json").out)
    assert [(j["ranks"], j["nodes"], j["time_limit_minutes"], j["gpu_hours"]) for j in jobs] == [
        (8, 1, 1440, 192.0),
        (16, 2, 1440, 384.0),
    ]


def test_a_certification_dry_run_totals_its_jobs_at_the_limits_plan_derives(cli, monkeypatch):
    monkeypatch.setenv("LLMB_FORCE_CPU", "1")
    shown = cli("certify", "--gpu", "h100", "--backend", "slurm", "--dry-run")
    assert shown.code == 0, shown.err
    [line] = [line for line in shown.err.splitlines() if line.startswith("at their time limits")]
    hours, wall_h, wall_min, nodes, gpus = COST.fullmatch(line).groups()
    jobs = json.loads(
        cli("certify", "--gpu", "h100", "--backend", "slurm", "--dry-run", "--json").out
    )
    jobs = jobs["jobs"] if isinstance(jobs, dict) else jobs
    assert all(
        j["time_limit_minutes"] >= 30 for j in jobs
    )  # plan's derived limits: 30 min at least
    assert int(hours.replace(",", "")) == round(
        sum(j["ranks"] * j["time_limit_minutes"] for j in jobs) / 60
    )
    assert int(wall_h) * 60 + int(wall_min) == sum(j["time_limit_minutes"] for j in jobs)
    largest = max(jobs, key=lambda j: (j["nodes"], j["ranks"]))
    assert (int(nodes), int(gpus)) == (largest["nodes"], largest["ranks"]) == (64, 512)
    # the README quotes this dry run's figures
    readme = re.sub(r"\s+", " ", (Path(__file__).resolve().parents[1] / "README.md").read_text())
    assert (
        f"at most {hours} GPU-hours and {wall_h} h {int(wall_min)} min one job after another for "
        f"H100; the largest job {nodes} nodes"
    ) in readme


def test_a_cpu_proxy_sweep_holds_no_gpus(cli, monkeypatch):
    monkeypatch.setenv("LLMB_FORCE_CPU", "1")
    shown = cli(*SWEEP, "--gpus", "1,2", "--proxy", "tiny", "--dry-run")
    assert shown.code == 0, shown.err
    assert re.search(
        r"at their time limits: no GPUs \(CPU proxies\) and at most \d+ h \d\d min of wall time one "
        r"after another; the largest job 1 node\.",
        shown.err,
    ), shown.err
