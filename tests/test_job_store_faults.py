"""The job store under faults: corrupt ``job.json`` and ``exit.json``, a
job directory deleted, read-only or on a full disk. Each gives a truthful
state with its cause, never a traceback, and one bad job never hides the
others from ``llmb status`` (table and ``--json``)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from test_local_process_faults import (
    RUN,
    alive,
    detach,
    jobs_dir,
    llmb,
    processes_of,
    start,
    status,
)
from waiting import wait_for

pytest.importorskip(
    "torch", reason="the torch engine needs torch (./dev.sh installs torch==2.13.0)"
)

SHORT = ["--steps", "3", "--no-window-check"]  # a real job that ends soon
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One real finished job (its directory is copied to make good and bad ones)."""
    install = {
        "LLMB_INSTALL": str(tmp_path_factory.mktemp("store") / "install"),
        "LLMB_NO_CACHE": "1",
    }
    code, out, err = llmb(install, *RUN, "--steps", "1", "--no-window-check", "--json", timeout=600)
    assert code == 0, err[-3000:]
    return jobs_dir(install) / json.loads(out)["job_id"]


@pytest.fixture
def install(tmp_path):
    return {"LLMB_INSTALL": str(tmp_path / "install"), "LLMB_NO_CACHE": "1"}


def clone(finished: Path, install, job_id: str) -> Path:
    target = jobs_dir(install) / job_id
    shutil.copytree(finished, target)
    record = json.loads((target / "job.json").read_text())
    (target / "job.json").write_text(json.dumps({**record, "id": job_id}))
    return target


def no_traceback(err: str) -> None:
    assert "Traceback" not in err and "internal error" not in err, err


def good_job_record(finished):
    return json.loads((finished / "job.json").read_text())


JOB_RECORDS = {
    "garbage bytes": (
        lambda record: b"\x00\xff\xfe\x13garbage\x1b[2J",
        "job.json is not valid JSON",
    ),
    "truncated JSON": (
        lambda record: json.dumps(record).encode()[:40],
        "job.json is not valid JSON",
    ),
    "empty": (lambda record: b"", "job.json is empty"),
    "a list": (lambda record: b"[1, 2]", "job.json holds a list, not an object"),
    "wrong type": (
        lambda record: json.dumps({**record, "ranks": "two"}).encode(),
        "job.json's field 'ranks' is a string ('two'), not an integer",
    ),
    "missing field": (
        lambda record: json.dumps({k: v for k, v in record.items() if k != "log"}).encode(),
        "job.json lacks the field 'log'",
    ),
}


@pytest.mark.parametrize("damage", JOB_RECORDS)
def test_a_corrupt_job_record_is_shown_with_its_problem_and_hides_no_other_job(
    finished, install, damage
):
    make, problem = JOB_RECORDS[damage]
    clone(finished, install, "local-000001")
    bad = clone(finished, install, "local-000002")
    (bad / "job.json").write_bytes(make(good_job_record(finished)))

    code, out, err = llmb(install, "status", "--json")
    no_traceback(err)
    rows = {row["job_id"]: row for row in json.loads(out)}
    assert code == 0 and rows["local-000001"]["state"] == "SUCCEEDED"
    assert rows["local-000002"]["state"] == "UNKNOWN" and problem in rows["local-000002"]["reason"]

    code, out, err = llmb(install, "status")
    no_traceback(err)
    assert code == 0 and "local-000001" in out and "SUCCEEDED" in out
    assert f"local-000002: its record is unreadable: {problem}" in out

    code, out, err = llmb(install, "status", "local-000002", "--json")
    no_traceback(err)
    assert (
        code == 1 and json.loads(out)["state"] == "UNKNOWN" and problem in json.loads(out)["reason"]
    )

    code, out, err = llmb(install, "cancel", "local-000002")
    no_traceback(err)
    assert code == 1 and problem in err and "nothing to stop" in err


EXIT_RECORDS = {
    "garbage bytes": (b"\x89PNG\r\n\x1a\n\x00\x00", "exit.json is not valid JSON"),
    "truncated JSON": (b'{"state": "SUCCEEDED", "reas', "exit.json is not valid JSON"),
    "a number": (b"42", "exit.json holds an integer, not an object"),
    "state of the wrong type": (b'{"state": 5}', "exit.json's state is 5, not one of"),
    "unknown state": (b'{"state": "DONE"}', "exit.json's state is 'DONE', not one of"),
    "reason of the wrong type": (
        b'{"state": "FAILED", "reason": [1]}',
        "exit.json's reason is a list, not a string",
    ),
}


@pytest.mark.parametrize("damage", EXIT_RECORDS)
def test_a_corrupt_exit_record_gives_unknown_with_its_problem(finished, install, damage):
    content, problem = EXIT_RECORDS[damage]
    clone(finished, install, "local-000001")
    bad = clone(finished, install, "local-000002")
    (bad / "exit.json").write_bytes(content)

    rows = {row["job_id"]: row for row in status(install)}
    assert rows["local-000001"]["state"] == "SUCCEEDED"
    assert rows["local-000002"]["state"] == "UNKNOWN"
    assert rows["local-000002"]["reason"].startswith(f"its exit record is unreadable: {problem}")
    code, out, err = llmb(install, "status", "local-000002")
    no_traceback(err)
    assert code == 0 and "local-000002: UNKNOWN" in out and problem in out


def wait_ended(install, job_id, timeout=300):
    return wait_for(
        lambda: (s := status(install, job_id))["state"] in TERMINAL and s,
        timeout=timeout,
        what=f"{job_id} to end",
    )


def wait_started(install, job_id):
    """Until both ranks are recorded (the supervisor has reserved room for its exit record by then)."""
    ranks = jobs_dir(install) / job_id / "ranks.json"
    wait_for(
        lambda: ranks.exists() and len(json.loads(ranks.read_text())["ranks"]) == 2,
        what="both ranks",
    )


def wait_training(install, job_id):
    """Until the first iteration is logged (the ranks have read their run spec by then)."""
    wait_for(
        lambda: (status(install, job_id)["progress"] or "").startswith("iteration"),
        what="the first iteration",
    )


def test_a_deleted_job_directory_while_the_job_runs(install):
    job = detach(install)
    wait_training(install, job)
    directory = jobs_dir(install) / job
    running = processes_of(directory)
    assert len(running) == 3  # the supervisor and both ranks
    shutil.rmtree(directory)

    code, out, err = llmb(install, "status", job)
    no_traceback(err)
    assert code == 2 and f"no job '{job}'" in err
    assert status(install) == []  # the listing does not break

    code, out, err = llmb(install, "cancel", job, "--json")
    no_traceback(err)
    assert code == 0, (out, err)
    answer = json.loads(out)
    assert answer["state"] == "CANCELLED" and "its job directory is gone" in answer["reason"]
    assert not any(alive(p) for p in running)


def test_llmb_run_reports_a_job_directory_deleted_under_it(install):
    runner = start(install, *RUN, *SHORT, "--json")
    job = wait_for(lambda: list(jobs_dir(install).glob("*/job.json")), what="the job record")[
        0
    ].parent.name
    wait_training(install, job)
    shutil.rmtree(jobs_dir(install) / job)
    out, err = runner.communicate(timeout=300)
    no_traceback(err)
    final = json.loads(out)
    assert runner.returncode == 1 and final["state"] == "FAILED"
    assert "without recording an exit" in final["reason"] and "was deleted" in final["reason"]


# ---------------------------------------------------------------- read-only and full file systems


def _mount(*args: str) -> str | None:
    """Run mount(8); None when it worked, else why not."""
    try:
        done = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)
    except OSError as exc:
        return str(exc)
    return None if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")


@contextlib.contextmanager
def read_only(path: Path):
    """``path`` read-only for everyone, root included: a read-only bind mount of itself."""
    problem = _mount("--bind", str(path), str(path))
    if problem:
        pytest.skip(f"a read-only bind mount needs root and mount(8): {problem}")
    try:
        problem = _mount("-o", "remount,ro,bind", str(path))
        if problem:
            pytest.skip(f"cannot remount read-only: {problem}")
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


@contextlib.contextmanager
def small_disk(path: Path, size: str = "64k"):
    """A tmpfs of ``size`` at ``path`` (root only); ``fill()`` fills it."""
    path.mkdir(parents=True, exist_ok=True)
    problem = _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    if problem:
        pytest.skip(f"a small tmpfs for a full disk needs root: {problem}")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def fill(path: Path) -> None:
    """Write into ``path`` until the file system is full."""
    with open(path / "filler", "ab", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def stop_all(install) -> None:
    """Leave nothing running (a failed test must not leave ranks training)."""
    for directory in jobs_dir(install).glob("*"):
        for pid in processes_of(directory):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_submitting_into_a_read_only_jobs_directory_says_so(install):
    jobs_dir(install).mkdir(parents=True)
    with read_only(jobs_dir(install)):
        code, out, err = llmb(install, *RUN, *SHORT)
        no_traceback(err)
        assert (
            code == 1 and "read-only file system" in err and "cannot create a job directory" in err
        )
        assert status(install) == []


def test_a_job_whose_directory_turns_read_only_ends_failed_with_the_cause(install):
    job = detach(install, *SHORT)
    wait_started(install, job)
    directory = jobs_dir(install) / job
    try:
        with read_only(directory):
            final = wait_ended(install, job)
            assert final["state"] == "FAILED"
            assert (
                "without recording an exit" in final["reason"]
                and "read-only file system" in final["reason"]
            )
    finally:
        stop_all(install)


def test_cancel_of_a_job_in_a_read_only_directory_stops_it_and_says_what_was_not_recorded(install):
    job = detach(install)
    wait_started(install, job)
    directory = jobs_dir(install) / job
    running = processes_of(directory)
    try:
        with read_only(directory):
            code, out, err = llmb(install, "cancel", job, "--json")
            no_traceback(err)
            answer = json.loads(out)
            assert code == 0 and answer["state"] == "CANCELLED" and answer["ended"]
            assert "read-only file system" in answer["reason"]
            assert not any(alive(p) for p in running)
    finally:
        stop_all(install)


def test_submitting_on_a_full_disk_names_it_and_leaves_nothing_behind(install):
    with small_disk(jobs_dir(install)):
        fill(jobs_dir(install))
        code, out, err = llmb(install, *RUN, *SHORT)
        no_traceback(err)
        assert code == 1 and "no space left on device" in err
        # no job, no temporary file
        assert sorted(p.name for p in jobs_dir(install).iterdir()) == ["filler"]
        assert status(install) == []


@pytest.mark.parametrize("end", ["runs to its end", "is cancelled"])
def test_a_job_that_ends_on_a_full_disk_still_records_its_end(install, end):
    with small_disk(jobs_dir(install)):
        job = detach(install, *(SHORT if end == "runs to its end" else ()))
        try:
            wait_started(install, job)
            fill(jobs_dir(install))
            if end == "is cancelled":
                code, out, err = llmb(install, "cancel", job, "--json")
                no_traceback(err)
                assert code == 0 and json.loads(out)["state"] == "CANCELLED"
            final = wait_ended(install, job)
            assert final["state"] == ("SUCCEEDED" if end == "runs to its end" else "CANCELLED"), (
                final
            )
            # written into the room kept for it
            assert (jobs_dir(install) / job / "exit.json").exists()
            assert not list(jobs_dir(install).rglob("*.tmp"))
        finally:
            stop_all(install)


def test_following_a_job_whose_exit_record_is_unreadable_ends_with_the_cause(
    finished, install, monkeypatch
):
    from llmb.backends.local import LocalBackend
    from llmb.lifecycle.follow import follow
    from llmb.runs.jobs import load_job

    monkeypatch.setenv("LLMB_INSTALL", install["LLMB_INSTALL"])
    bad = clone(finished, install, "local-000003")
    (bad / "exit.json").write_bytes(b'{"state": "SUCC')
    job = load_job("local-000003")
    final = follow(
        job,
        lambda: LocalBackend().status([job])[0],
        lambda line: None,
        interval=0.05,
        unknown_limit=1,
    )
    assert final.state == "UNKNOWN"
    assert final.reason.startswith("its exit record is unreadable: exit.json is not valid JSON")
    assert "still so after 1 s" in final.reason
