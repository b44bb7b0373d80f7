"""Logs that are not readable files: each is that run's status and reason,
and every other run still shows. ``llmb results`` runs as a real process
with a timeout, the hang guard for the FIFO and /dev/zero."""

from __future__ import annotations

import glob
import json
import os
import re
import sys
from pathlib import Path

import pytest
from experiment_dirs import make_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402
from llmb.runs.experiment import compact_name  # noqa: E402

MB = "pretrain_llama3_8b_fp8_gpus8_tp1_pp1_cp1_vpNone_ep1_etpNone_mbs2_gbs128"
NEMO = "pretrain_llama3.1_8b_fp8_8"
GOOD = {f"{MB}_1000001": "success", f"{NEMO}_1000009": "success"}


def _write_only_file() -> str | None:
    """A regular file that even root cannot open for reading: a write-only sysfs attribute."""
    found = glob.glob("/sys/bus/pci/rescan") + glob.glob("/sys/devices/pci*/*/rescan")
    return next(
        (path for path in found if os.path.isfile(path) and not os.access(path, os.R_OK)), None
    ) or next((path for path in found if os.path.isfile(path) and _open_fails(path)), None)


def _open_fails(path: str) -> bool:
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
    except OSError:
        return True
    return False


def _bad_run(root: Path, stamp: str) -> Path:
    """A run directory whose log is left for the test to create; returns the log's path."""
    run = make_run(root, MB, None, stamp=stamp)
    return run / MB / f"log-{MB}.out"


@pytest.fixture
def experiments(tmp_path):
    """Two good runs among runs whose log is each kind of bad file; returns
    (directory, {short name: expected reason pattern})."""
    root = tmp_path / "experiments"
    make_run(root, MB, loggen.megatron_bridge_lines(range(1, 51)), stamp="1000001")
    make_run(root, NEMO, loggen.nemo2_lines(range(0, 50)), stamp="1000009")
    name = f"log-{MB}.out"
    bad = {}

    _bad_run(root, "1000002").symlink_to("/nonexistent/log.out")
    bad["1000002"] = rf"{name} is a symbolic link to /nonexistent/log.out, which does not exist"
    _bad_run(root, "1000003").symlink_to(name)  # itself
    bad["1000003"] = rf"{name} is a symbolic link to {name} that cannot be followed: the links loop"
    os.mkfifo(_bad_run(root, "1000004"))
    bad["1000004"] = (
        rf"{name} is a FIFO \(named pipe\), not a regular file; only regular files are read"
    )
    _bad_run(root, "1000005").symlink_to("/dev/zero")
    bad["1000005"] = (
        rf"{name} is a symbolic link to /dev/zero, which is a character device, not a regular file"
    )
    _bad_run(root, "1000006").mkdir()
    bad["1000006"] = rf"{name} is a directory, not a regular file"

    unreadable = _bad_run(root, "1000007")
    if os.geteuid() != 0:
        unreadable.write_text("\n".join(loggen.megatron_bridge_lines(range(1, 51))) + "\n")
        unreadable.chmod(0)
        bad["1000007"] = rf"cannot read {name}: Permission denied"
    # root reads any mode; not a write-only attribute
    elif (target := _write_only_file()) is not None:
        unreadable.symlink_to(target)
        bad["1000007"] = rf"cannot read {name}: Permission denied"
    else:
        unreadable.parent.rmdir()
        unreadable.parent.parent.rmdir()

    # A good log whose recipe.json is a FIFO: the recipe is skipped, the log read.
    recipe_fifo = make_run(root, MB, loggen.megatron_bridge_lines(range(1, 51)), stamp="1000008")
    os.mkfifo(recipe_fifo / "recipe.json")
    return (
        root,
        {f"{MB}_{stamp}": reason for stamp, reason in bad.items()},
        {**GOOD, f"{MB}_1000008": "success"},
    )


def test_bad_logs_are_reported_and_the_good_runs_still_show(llmb_proc, experiments, tmp_path):
    root, bad, good = experiments
    assert len(bad) >= 5
    result = llmb_proc(
        "results", str(root), "--json", "--db", str(tmp_path / "r.sqlite"), timeout=120
    )
    assert result.code == 0, result.err
    rows = {r["filename"]: r for r in json.loads(result.out)}
    assert {name: rows[name]["status"] for name in good} == good
    for name, reason in bad.items():
        assert rows[name]["status"] == "unreadable", rows[name]
        assert re.fullmatch(reason + ".*", rows[name]["failure_reason"]), (
            reason,
            rows[name]["failure_reason"],
        )
    assert len(rows) == len(good) + len(bad)

    table = llmb_proc("results", str(root), "--db", str(tmp_path / "r.sqlite"), timeout=120)
    assert table.code == 0, table.err

    # each run by its experiment's short form; no llmb job ran them, so JOB is "-" (not the number
    # their directories end with)
    lines = table.out.split("\n\n")[0].splitlines()[2:]
    shown = sorted(tuple(line.split()[:3]) for line in lines)
    expected = [
        (compact_name(name.rsplit("_", 1)[0]), "-", status)
        for name, status in [*good.items(), *dict.fromkeys(bad, "unreadable").items()]
    ]
    assert shown == sorted(expected), table.out
    for name, reason in bad.items():
        # several runs share the short name: each note names its run's directory
        assert re.search(rf"^{name}: unreadable: {reason}", table.out, re.M), name


def test_unreadable_logs_are_not_stored(llmb_proc, experiments, tmp_path):
    """The next look may succeed: only what was read goes into the database."""
    root, bad, good = experiments
    db = str(tmp_path / "r.sqlite")
    assert llmb_proc("results", str(root), "--db", db, timeout=120).code == 0
    stored = json.loads(llmb_proc("results", "--from-db", "--json", "--db", db).out)
    assert sorted(r["status"] for r in stored) == ["success"] * len(good)
    fixed = root / MB / f"{MB}_1000004" / MB / f"log-{MB}.out"  # the FIFO, replaced by its log
    fixed.unlink()
    fixed.write_text("\n".join(loggen.megatron_bridge_lines(range(1, 51))) + "\n")
    rows = {
        r["filename"]: r
        for r in json.loads(llmb_proc("results", str(root), "--json", "--db", db, timeout=120).out)
    }
    assert rows[f"{MB}_1000004"]["status"] == "success"


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_log_given_by_name_that_is_not_a_file(llmb_proc, tmp_path, kind):
    log = tmp_path / f"log-{MB}.out"
    os.mkfifo(log) if kind == "fifo" else log.symlink_to("/dev/zero")
    result = llmb_proc(
        "results", str(log), "--json", "--db", str(tmp_path / "r.sqlite"), timeout=60
    )
    assert result.code == 0, result.err
    [row] = json.loads(result.out)
    assert row["status"] == "unreadable" and "not a regular file" in row["failure_reason"]
