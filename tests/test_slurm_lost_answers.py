"""Submissions whose answer is lost, on the private Slurm: sbatch slower than
LLMB_SLURM_TIMEOUT (a wrapper that runs the real sbatch, then sleeps), Slurm
not answering the look-up either, an sbatch that never submits, and job
records holding no attempt. Every submission carries the marker
``--comment=llmb:<job id>:<attempt>``; llmb finds the job by it, tracks it and
cancels it, and never crashes on a record without a Slurm job id."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import test_slurm_runs
from private_slurm import wrapper
from test_slurm_runs import PROXY, job_record, run_json, slurm_id, status
from waiting import wait_for

pytestmark = pytest.mark.slurm
# the fixture: an install directory of the test's own, on the private Slurm
env = test_slurm_runs.env

SLOW_SBATCH = '"$REAL" "$@"\nexec sleep 120'  # submits, then answers nothing before llmb gives up
TIMEOUT = "5"


def slurm_jobs(slurm) -> dict[str, tuple[str, str]]:
    """Slurm job id -> (state, comment) of the jobs Slurm holds, asked directly."""
    shown = subprocess.run(
        ["squeue", "--noheader", "--states=all", "--format=%i|%T|%k"],
        capture_output=True,
        text=True,
        env={**os.environ, **slurm.env()},
        check=True,
    ).stdout
    return {
        i: (state, comment)
        for i, state, comment in (line.split("|", 2) for line in shown.splitlines())
    }


def live(slurm, sid: str) -> bool:
    """Whether Slurm still has the job pending or running (squeue's default states)."""
    return bool(
        subprocess.run(
            ["squeue", "--noheader", f"--jobs={sid}"],
            capture_output=True,
            text=True,
            env={**os.environ, **slurm.env()},
        ).stdout.strip()
    )


def test_a_submission_whose_answer_is_lost_is_found_by_its_marker_tracked_and_cancelled(
    llmb_proc, env, slurm, tmp_path
):
    wrapper(tmp_path / "shims", "sbatch", SLOW_SBATCH)
    slow = {
        **env,
        "PATH": f"{tmp_path / 'shims'}:{os.environ['PATH']}",
        "LLMB_SLURM_TIMEOUT": TIMEOUT,
    }
    result, started = run_json(
        llmb_proc, "run", *PROXY, "--gpus", "1", "--steps", "100000", "--detach", env=slow
    )
    assert result.code == 0, result.err
    job = started["job_id"]
    attempt = job_record(env, job)["details"]["attempts"][-1]
    assert attempt["lost"] == f"sbatch did not answer within {TIMEOUT} s"
    sid = attempt["slurm_id"]
    assert slurm_jobs(slurm)[sid][1] == f"llmb:{job}:1"  # the job Slurm holds, found by its marker
    assert f"Slurm job {sid} carries it, tracked as attempt 1" in Path(started["log"]).read_text()

    def both_running():
        shown = status(llmb_proc, job, slow)
        return shown["state"] == "RUNNING" and slurm_jobs(slurm)[sid][0] == "RUNNING" and shown

    wait_for(both_running, timeout=120, interval=1, what="llmb and Slurm to show the job running")
    cancelled = llmb_proc("cancel", job, "--json", env=slow)
    assert json.loads(cancelled.out) == {
        "job_id": job,
        "state": "CANCELLED",
        "reason": "cancelled",
        "ended": True,
    }
    assert not live(slurm, sid) and slurm_jobs(slurm)[sid][0] == "CANCELLED"


def test_when_slurm_cannot_say_whether_it_took_the_job_llmb_keeps_it_and_finds_it_later(
    llmb_proc, env, slurm, tmp_path
):
    shims, down = tmp_path / "shims", tmp_path / "controller-down"
    wrapper(shims, "sbatch", SLOW_SBATCH)
    wrapper(
        shims,
        "squeue",
        f'if [ -e {down} ]; then\n  echo "squeue: error: Unable to contact slurm controller '
        f'(connect failure)" >&2\n  exit 1\nfi\nexec "$REAL" "$@"',
    )
    # Held: a job that started would name its Slurm id itself (the batch script writes it beside the record).
    slow = {
        **env,
        "PATH": f"{shims}:{os.environ['PATH']}",
        "LLMB_SLURM_TIMEOUT": TIMEOUT,
        "ADDITIONAL_SLURM_PARAMS": "hold",
    }
    down.touch()
    result = llmb_proc("run", *PROXY, "--gpus", "1", "--detach", env=slow)
    assert result.code == 1 and "Traceback" not in result.err and "internal error" not in result.err
    assert "whether Slurm took the job is not known yet" in result.err
    [shown] = json.loads(llmb_proc("status", "--json", env=slow).out)
    job = shown["job_id"]
    assert f"llmb cancel {job} stops it" in result.err and f"llmb:{job}:1" in result.err
    assert shown["state"] == "UNKNOWN" and "sbatch's answer was lost" in shown["reason"]
    assert (
        "Unable to contact slurm controller" in shown["reason"]
        and "looks for it again" in shown["reason"]
    )
    # it was submitted
    [sid] = [i for i, (_, comment) in slurm_jobs(slurm).items() if comment == f"llmb:{job}:1"]

    refused = llmb_proc("cancel", job, env=slow)
    assert refused.code == 1 and "Traceback" not in refused.err
    assert (
        f"{job} was not cancelled" in refused.err
        and "Unable to contact slurm controller" in refused.err
    )
    assert live(slurm, sid)

    down.unlink()  # Slurm answers again: cancel finds the job by its marker and stops it
    cancelled = llmb_proc("cancel", job, "--json", env=slow)
    assert cancelled.code == 0 and json.loads(cancelled.out)["state"] == "CANCELLED", cancelled.err
    assert not live(slurm, sid) and slurm_id(env, job) == sid


def test_an_sbatch_that_never_answers_and_never_submitted_leaves_no_job(
    llmb_proc, env, slurm, tmp_path
):
    wrapper(tmp_path / "shims", "sbatch", "exec sleep 120")
    slow = {
        **env,
        "PATH": f"{tmp_path / 'shims'}:{os.environ['PATH']}",
        "LLMB_SLURM_TIMEOUT": TIMEOUT,
    }
    result = llmb_proc("run", *PROXY, "--gpus", "1", "--detach", env=slow)
    assert result.code == 1 and "Traceback" not in result.err
    assert f"sbatch did not answer within {TIMEOUT} s" in result.err
    assert "Slurm holds no job with that marker: nothing was submitted" in result.err
    assert json.loads(llmb_proc("status", "--json", env=env).out) == []


def test_a_job_record_without_attempts_is_found_by_its_marker_or_reported_and_cancelled_cleanly(
    llmb_proc, env, slurm
):
    """As llmb leaves a record when it stops during the first sbatch (or an older llmb after a lost answer)."""
    held = {**env, "ADDITIONAL_SLURM_PARAMS": "hold"}
    _, started = run_json(llmb_proc, "run", *PROXY, "--gpus", "1", "--detach", env=held)
    job = started["job_id"]
    sid = slurm_id(env, job)
    record_file = Path(env["LLMB_INSTALL"]) / "jobs" / job / "job.json"
    record = json.loads(record_file.read_text())
    record_file.write_text(json.dumps({**record, "attempts": 1, "details": {}}))
    found = status(llmb_proc, job, env)  # the Slurm job carrying llmb:<job>:1
    assert found["state"] == "QUEUED" and "JobHeldUser" in found["reason"]
    assert slurm_id(env, job) == sid
    assert json.loads(llmb_proc("cancel", job, "--json", env=env).out)["state"] == "CANCELLED"
    assert not live(slurm, sid)

    # A record with no attempt that no Slurm job carries the marker of.
    orphan = "slurm-0rphan"
    (record_file.parent.parent / orphan).mkdir()
    (record_file.parent.parent / orphan / "job.json").write_text(
        json.dumps(
            {
                **record,
                "id": orphan,
                "details": {"slurm": record["details"]["slurm"], "attempts": []},
            }
        )
    )
    shown = status(llmb_proc, orphan, env)
    assert shown["state"] == "UNKNOWN" and shown["reason"].startswith(
        "no Slurm job was recorded for it"
    )
    assert f"llmb:{orphan}:1" in shown["reason"] and "it was not submitted" in shown["reason"]
    text = llmb_proc("status", env=env)
    assert text.code == 0 and orphan in text.out and "Traceback" not in text.err
    cancelled = llmb_proc("cancel", orphan, "--json", env=env)
    assert cancelled.code == 0 and "Traceback" not in cancelled.err
    ended = json.loads(cancelled.out)
    assert ended["state"] == "CANCELLED" and ended["reason"].startswith(
        "nothing to stop: no Slurm job was recorded"
    )
    assert status(llmb_proc, orphan, env)["state"] == "CANCELLED"
