"""The local backend under attack with real processes: its supervisor
killed, a cancel during start-up, ``llmb run`` interrupted (or killed)
while it submits. The state must follow the living processes, a cancel
must end every one of them, and an interrupted submission must leave no
phantom job and no temporary file."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import _SEED_VARS, _llmb_executable
from waiting import wait_for

pytest.importorskip(
    "torch", reason="the torch engine needs torch (./dev.sh installs torch==2.13.0)"
)

# The cheapest real run: a 2-rank tiny proxy (50 steps by default: long enough to attack while it trains).
RUN = ["run", "nemotronh", "--gpus", "2", "--proxy", "tiny"]


@pytest.fixture
def install(tmp_path):
    return {"LLMB_INSTALL": str(tmp_path / "install"), "LLMB_NO_CACHE": "1"}


def jobs_dir(install) -> Path:
    return Path(install["LLMB_INSTALL"]) / "jobs"


def environment(install) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _SEED_VARS}
    env.update({"LLMB_LOG_FORMAT": "json", **install})
    return env


def start(install, *args) -> subprocess.Popen:
    return subprocess.Popen(
        [_llmb_executable(), *args],
        env=environment(install),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def llmb(install, *args, timeout=300):  # hang guards: a loaded 2-core box runs 10-100x slower
    proc = subprocess.run(
        [_llmb_executable(), *args],
        env=environment(install),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc.returncode, proc.stdout, proc.stderr


def status(install, job_id=None):
    code, out, err = llmb(install, "status", *([job_id] if job_id else []), "--json")
    assert "Traceback" not in err and "internal error" not in err, err
    return json.loads(out)


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def processes_of(directory: Path) -> list[int]:
    """Every living process that carries the job's directory in its environment."""
    tag = f"LLMB_JOB_DIR={os.path.realpath(directory)}".encode()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and alive(name):
            try:
                with open(f"/proc/{name}/environ", "rb") as handle:
                    if tag in handle.read().split(b"\0"):
                        found.append(int(name))
            except OSError:
                continue
    return found


def all_job_processes(install) -> list[int]:
    return [pid for d in jobs_dir(install).glob("*") for pid in processes_of(d)]


def iterations_logged(install, job_id) -> list[str]:
    log = json.loads((jobs_dir(install) / job_id / "job.json").read_text())["log"]
    try:
        return [
            line
            for line in Path(log).read_text().splitlines()
            if "iteration" in line and "/" in line
        ]
    except FileNotFoundError:
        return []


def detach(install, *extra) -> str:
    code, out, err = llmb(install, *RUN, *extra, "--detach", "--json")
    assert code == 0, err[-3000:]
    return json.loads(out)["job_id"]


def test_a_killed_supervisor_leaves_the_job_running_and_cancel_ends_every_rank(install):
    job = detach(install)
    wait_for(
        lambda: (status(install, job)["progress"] or "").startswith("iteration"),
        what="the first iteration",
    )
    directory = jobs_dir(install) / job
    supervisor = json.loads((directory / "supervisor.json").read_text())["pid"]
    ranks = [r["pid"] for r in json.loads((directory / "ranks.json").read_text())["ranks"]]
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: not alive(supervisor), timeout=120, what="the supervisor to die")

    after = status(install, job)
    assert after["state"] == "RUNNING", after  # both ranks train on
    assert (
        f"the supervisor (pid {supervisor}) is gone" in after["reason"]
        and f"llmb cancel {job}" in after["reason"]
    )
    assert all(alive(p) for p in ranks)
    listed = {row["job_id"]: row for row in status(install)}
    assert listed[job]["state"] == "RUNNING"

    code, out, err = llmb(install, "cancel", job, "--json")
    cancelled = json.loads(out)
    assert code == 0 and cancelled["state"] == "CANCELLED" and cancelled["ended"] is True, (
        out,
        err,
    )
    assert not any(alive(p) for p in ranks)
    assert processes_of(directory) == []
    assert status(install, job)["state"] == "CANCELLED"


@pytest.mark.parametrize(
    "when", ["right after llmb run returns", "while llmb run is still submitting"]
)
def test_a_cancel_during_start_up_stops_the_job_before_any_rank_trains(install, when):
    if when == "right after llmb run returns":
        job = detach(install)
        runner = None
    else:  # cancel as soon as the job's record exists, racing the submission itself
        runner = start(install, *RUN, "--detach", "--json")

        def record():
            found = glob.glob(str(jobs_dir(install) / "*" / "job.json"))
            if not found and runner.poll() is not None:  # llmb run ended without a job: say why
                out, err = runner.communicate()
                raise AssertionError(f"llmb run exited {runner.returncode} with no job: {out}{err}")
            return found

        # a hang guard only: on a loaded 2-core machine the submission can take minutes
        found = wait_for(record, timeout=600, interval=0.005, what="the job record")
        job = Path(found[0]).parent.name
    code, out, err = llmb(install, "cancel", job, "--json")
    cancelled = json.loads(out)
    assert code == 0 and cancelled["state"] == "CANCELLED" and cancelled["ended"], (out, err)
    if runner is not None:
        runner.communicate(timeout=300)
    directory = jobs_dir(install) / job
    # No rank may start later (the supervisor reads the cancel marker) or train a step.
    for _ in range(50):  # 10 s of watching: a rank started late would have been seen by then
        assert processes_of(directory) == []
        time.sleep(0.2)
    assert iterations_logged(install, job) == []
    assert status(install, job)["state"] == "CANCELLED"


def watch_for(install, target: str, timeout: float = 600):
    """Wait (tightly) until a file of the submission appears: ``target`` is a glob under the jobs directory."""
    return wait_for(
        lambda: glob.glob(str(jobs_dir(install) / target)),
        timeout=timeout,
        interval=0.001,
        what=target,
    )


def check_no_phantom(install, temporaries: bool = True) -> list[str]:
    """After an interrupted llmb run: no temporary file, no job listed as queued or running with nothing of
    it alive (a phantom), nothing running unlisted. An interrupt that came once the submission had
    completed leaves a real job (its supervisor starting the ranks, or the ranks training): it is
    listed, and stopped here. The ids of those real jobs."""
    if temporaries and jobs_dir(install).exists():
        assert [p for p in jobs_dir(install).rglob("*") if p.name.endswith(".tmp")] == []
    live = [row for row in status(install) if row["state"] in ("QUEUED", "RUNNING")]
    for row in live:
        assert processes_of(jobs_dir(install) / row["job_id"]), f"a phantom job: {row}"
        code, out, _ = llmb(install, "cancel", row["job_id"], "--json")
        assert code == 0 and json.loads(out)["state"] == "CANCELLED"
    assert all_job_processes(install) == []
    return [row["job_id"] for row in live]


@pytest.mark.parametrize(
    "moment", ["50ms", "job directory", "job record", "run spec", "supervisor record"]
)
def test_sigint_during_submission_leaves_no_phantom_job_and_no_temporary_file(install, moment):
    runner = start(install, *RUN)
    targets = {
        "job directory": "*",
        "job record": "*/job.json",
        "run spec": "*/run.json",
        "supervisor record": "*/supervisor.json",
    }
    if moment == "50ms":
        time.sleep(0.05)
    else:
        watch_for(install, targets[moment])
    runner.send_signal(signal.SIGINT)
    _, err = runner.communicate(timeout=300)
    # Python may still be starting (importing site or llmb): its own KeyboardInterrupt report
    if moment == "50ms":
        assert runner.returncode != 0
    else:
        assert "Traceback" not in err and runner.returncode == 130, err
    for job in check_no_phantom(install):  # interrupted after the submission: the user was told
        assert f"detached from {job}; it keeps running" in err, err


PREFLIGHT = ["preflight", "--gpu", "h100", "--nodes", "1", "--gpus-per-node", "2"]


@pytest.mark.parametrize("command", [RUN, PREFLIGHT], ids=["run", "preflight"])
def test_ctrl_c_while_following_detaches_and_names_the_job(install, command):
    """Once the job exists, Ctrl-C leaves it running and says which job it is and how to reach it."""
    runner = start(install, *command)
    announced = ""
    while "its log: llmb logs" not in announced:  # the line llmb prints as it starts following
        line = runner.stderr.readline()
        assert line, f"llmb ended before following its job (exit {runner.wait()})"
        announced = line
    runner.send_signal(signal.SIGINT)
    _, err = runner.communicate(timeout=300)
    job = announced.split(":")[0]
    assert runner.returncode == 130 and "Traceback" not in err, err
    assert f"detached from {job}; it keeps running" in err and f"llmb cancel {job}" in err, err
    if status(install, job)["state"] in ("QUEUED", "RUNNING"):  # a preflight may end meanwhile
        code, out, _ = llmb(install, "cancel", job, "--json")
        assert code == 0 and json.loads(out)["state"] == "CANCELLED"
    assert all_job_processes(install) == []


@pytest.mark.parametrize("moment", ["job record", "run spec"])
def test_a_killed_submission_is_marked_failed_not_queued(install, moment):
    """SIGKILL cannot be caught: the record stays, and its state says what happened."""
    runner = start(install, *RUN)
    watch_for(install, {"job record": "*/job.json", "run spec": "*/run.json"}[moment])
    runner.kill()
    runner.communicate(timeout=300)
    for row in status(install):
        if row["state"] == "FAILED":
            assert row["reason"] == "its submission was interrupted before the job started"
    # a write cut by SIGKILL may leave its temporary file
    check_no_phantom(install, temporaries=False)


def start_time_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[19])


@pytest.mark.parametrize("record", ["the pids, another start time", "the session only"])
def test_a_reused_pid_is_never_taken_for_the_job_nor_signalled(install, tmp_path, record):
    """What the job recorded (its supervisor's and rank's pids, or only its session
    id) now names an unrelated process, leader of its own session."""
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        directory = jobs_dir(install) / "local-0000aa"
        directory.mkdir(parents=True)
        (directory / "job.json").write_text(
            json.dumps(
                {
                    "id": "local-0000aa",
                    "backend": "local",
                    "workload": "nemotronh",
                    "experiment": "e",
                    "run_dir": str(tmp_path),
                    "log": str(tmp_path / "log.out"),
                    "ranks": 1,
                    "submitted_at": "then",
                }
            )
        )
        gone = subprocess.Popen(["true"])
        gone.wait()  # a pid that named a process that has ended
        pid = stranger.pid if record == "the pids, another start time" else gone.pid
        who = {
            "pid": pid,
            "pgid": stranger.pid,
            "session": stranger.pid,
            "start_time": start_time_of(stranger.pid) - 1,
        }
        (directory / "supervisor.json").write_text(json.dumps(who))
        (directory / "ranks.json").write_text(json.dumps({"ranks": [{"rank": 0, **who}]}))

        now = status(install, "local-0000aa")
        assert now["state"] == "FAILED" and "ended without recording an exit" in now["reason"]
        code, out, _ = llmb(install, "cancel", "local-0000aa", "--json")
        assert json.loads(out)["state"] == "FAILED"
        time.sleep(0.5)
        assert stranger.poll() is None  # never signalled
    finally:
        stranger.kill()
        stranger.wait()


def test_a_job_that_ends_while_its_state_is_read_is_not_taken_for_killed(
    install, tmp_path, monkeypatch
):
    """The supervisor records its exit and ends between status reading ``exit.json``
    (not there yet) and looking for the job's processes (none left): the job
    ended as it recorded, it was not killed. A sweep polling a busy machine
    met this interleaving; it is forced here by ending the job at that moment."""
    from llmb.backends.local import LocalBackend
    from llmb.runs.jobs import Job, write_exit

    monkeypatch.setenv("LLMB_INSTALL", install["LLMB_INSTALL"])
    job = Job(
        id="local-0000ab",
        backend="local",
        workload="nemotronh",
        experiment="e",
        run_dir=str(tmp_path),
        log=str(tmp_path / "log.out"),
        ranks=1,
        submitted_at="then",
    )
    (jobs_dir(install) / job.id).mkdir(parents=True)
    (jobs_dir(install) / job.id / "supervisor.json").write_text(
        json.dumps({"pid": 2**22 + 1, "start_time": 1})
    )
    backend = LocalBackend()

    def ends_now(job_, supervisor=None):
        write_exit(
            job_.id,
            {"state": "SUCCEEDED", "reason": None, "ended_at": "now", "exit_codes": {"0": 0}},
        )
        return []

    monkeypatch.setattr(backend, "_living", ends_now)
    assert backend.status([job])[0].state == "SUCCEEDED"
