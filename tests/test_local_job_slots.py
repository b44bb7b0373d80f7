"""At most ``LLMB_LOCAL_JOBS`` local jobs run at once on a machine (default:
half its cores): more ``--detach`` runs than that wait, QUEUED, and start as
slots free, in order. Attacked with real processes: several detached runs
at once, a queued job cancelled, queued and running jobs killed (a slot is
a flocked file: a killed job never keeps one), a bad value of the variable."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
from conftest import _SEED_VARS, _llmb_executable
from llmb.backends import local_slots
from waiting import wait_for

# The cheapest real run: a 2-rank tiny proxy, one step (long: the default 50 steps, to hold a slot a while).
RUN = ["run", "nemotronh", "--gpus", "2", "--proxy", "tiny"]
ONE_STEP = ["--steps", "1", "--no-window-check"]
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
WAITING = "waiting for a local slot"


@pytest.fixture
def torch_engine():
    pytest.importorskip(
        "torch", reason="the torch engine needs torch (./dev.sh installs torch==2.13.0)"
    )


def environment(install: Path, limit: str | None) -> dict:
    env = {
        k: v for k, v in os.environ.items() if k not in (*_SEED_VARS, local_slots.LIMIT_VARIABLE)
    }
    env.update({"LLMB_LOG_FORMAT": "json", "LLMB_INSTALL": str(install), "LLMB_NO_CACHE": "1"})
    if limit is not None:
        env[local_slots.LIMIT_VARIABLE] = limit
    return env


def llmb(install: Path, *args, limit: str | None = "1", timeout: float = 120):
    proc = subprocess.run(
        [_llmb_executable(), *args],
        env=environment(install, limit),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


def detach(install: Path, *extra, limit: str = "1") -> str:
    code, out, err = llmb(install, *RUN, *extra, "--detach", "--json", limit=limit)
    assert code == 0, err[-3000:]
    return json.loads(out)["job_id"]


def status(install: Path, job_id: str) -> dict:
    return json.loads(llmb(install, "status", job_id, "--json")[1])


def waits(install: Path, job_id: str, ahead: int | None = None) -> dict:
    """Until ``llmb status`` says the job is QUEUED, waiting for a local slot (behind ``ahead`` jobs)."""

    def queued():
        now = status(install, job_id)
        reason = now["reason"] or ""
        behind = ahead is None or (
            f"{ahead} job" in reason if ahead else "queued before" not in reason
        )
        return now["state"] == "QUEUED" and reason.startswith(WAITING) and behind and now

    return wait_for(queued, what=f"{job_id} to wait for a local slot")


def ended(install: Path, job_id: str, timeout: float = 300) -> dict:
    return wait_for(
        lambda: (s := status(install, job_id))["state"] in TERMINAL and s,
        timeout=timeout,
        what=f"{job_id} to end",
    )


def jobs_dir(install: Path) -> Path:
    return install / "jobs"


def alive(pid: int, start_time: str | None = None) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] not in "ZX" and (start_time is None or fields[19] == start_time)


def tagged(install: Path) -> dict[str, list[tuple[int, str]]]:
    """The living processes of each job (pid, start time), by their ``LLMB_JOB_DIR``."""
    tags = {
        f"LLMB_JOB_DIR={os.path.realpath(d)}".encode(): d.name for d in jobs_dir(install).glob("*")
    }
    found: dict[str, list[tuple[int, str]]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                variables = handle.read().split(b"\0")
            with open(f"/proc/{name}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] in "ZX":
            continue
        for tag, job in tags.items():
            if tag in variables:
                found.setdefault(job, []).append((int(name), fields[19]))
    return found


def running_ranks(install: Path) -> set[str]:
    """The jobs with a rank alive now: every rank counted was still alive when the look ended (a look
    over /proc is not one instant, and one job's last rank may end as the next job's first starts)."""
    busy = set()
    for job, procs in tagged(install).items():
        supervisor = (
            json.loads((jobs_dir(install) / job / "supervisor.json").read_text())
            if (jobs_dir(install) / job / "supervisor.json").exists()
            else {}
        ).get("pid")
        if any(pid != supervisor and alive(pid, start) for pid, start in procs):
            busy.add(job)
    return busy


def slot_record(install: Path, job_id: str) -> dict:
    return json.loads((jobs_dir(install) / job_id / local_slots.SLOT_FILE).read_text())


def most_at_once(intervals: list[tuple[datetime, datetime]]) -> int:
    edges = sorted(
        [(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
        key=lambda e: (e[0], e[1]),
    )  # an end before a start at the same instant
    most = current = 0
    for _, step in edges:
        current += step
        most = max(most, current)
    return most


@contextlib.contextmanager
def slots_taken(install: Path, count: int):
    """Hold the first ``count`` slots of this machine for the install, as that many running jobs would."""
    directory = Path(local_slots.slots_dir(str(install)))
    directory.mkdir(parents=True, exist_ok=True)
    fds = []
    try:
        for index in range(count):
            fd = os.open(directory / f"slot-{index}.lock", os.O_RDONLY | os.O_CREAT)
            fds.append(fd)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield
    finally:
        for fd in fds:
            os.close(fd)


def slot_is_free(install: Path, index: int) -> bool:
    fd = os.open(Path(local_slots.slots_dir(str(install))) / f"slot-{index}.lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_the_default_limit_is_half_the_cores_and_at_least_one():
    assert [local_slots.default_limit(cores) for cores in (1, 2, 3, 4, 16, 64)] == [
        1,
        1,
        1,
        2,
        8,
        32,
    ]


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", "2 jobs", "1025", "\u0663"])
def test_a_bad_LLMB_LOCAL_JOBS_is_refused_before_anything_is_written(tmp_path, value):
    install = tmp_path / "install"
    for extra in ([], ["--dry-run"]):
        code, out, err = llmb(install, *RUN, *ONE_STEP, "--detach", *extra, limit=value)
        assert code == 2, (out, err)
        assert (
            f"LLMB_LOCAL_JOBS={value!r} is not valid" in err
            and "whole number from 1 to 1024" in err
        ), err
    assert not jobs_dir(install).exists()


def test_detached_runs_beyond_the_limit_wait_their_turn(tmp_path, torch_engine):
    """Five ``--detach`` runs with LLMB_LOCAL_JOBS=2: never more than two run at once (by their own records and
    by their processes, watched throughout), every one ends SUCCEEDED, and the waiting ones were QUEUED."""
    install, limit, count = tmp_path / "install", 2, 5
    jobs = []
    # two running local jobs: every run waits, whatever the machine's speed
    with slots_taken(install, limit):
        for ahead in range(count):
            jobs.append(detach(install, *ONE_STEP, limit=str(limit)))
            shown = waits(install, jobs[-1], ahead)
            assert (
                f"{limit} local jobs running" in shown["reason"]
                and "LLMB_LOCAL_JOBS=2" in shown["reason"]
            )
        assert running_ranks(install) == set()
    most, deadline = 0, time.monotonic() + 600
    while not all((jobs_dir(install) / job / "exit.json").exists() for job in jobs):
        assert time.monotonic() < deadline, "the jobs did not end in 600 s"
        most = max(most, len(running_ranks(install)))
        time.sleep(0.05)
    assert most <= limit
    finals = [ended(install, job) for job in jobs]
    assert [f["state"] for f in finals] == ["SUCCEEDED"] * count, finals
    records = [slot_record(install, job) for job in jobs]
    assert all(r["limit"] == limit and r["waiting"].startswith(WAITING) for r in records), records
    held = [
        (datetime.fromisoformat(r["acquired_at"]), datetime.fromisoformat(r["released_at"]))
        for r in records
    ]
    assert most_at_once(held) <= limit, records
    assert all(0 <= r["slot"] < limit for r in records), records
    taken = [start for start, _ in held]
    assert taken == sorted(taken)  # in the order they came
    assert all(slot_is_free(install, index) for index in range(limit))


def test_a_foreground_run_says_once_that_it_waits_then_runs(tmp_path, torch_engine):
    install = tmp_path / "install"
    with slots_taken(install, 1):
        runner = subprocess.Popen(
            [_llmb_executable(), *RUN, *ONE_STEP, "--json"],
            env=environment(install, "1"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            record = wait_for(
                lambda: list(jobs_dir(install).glob("*/job.json")), what="the job record"
            )
            waits(install, record[0].parent.name, 0)
            time.sleep(2)  # the run follows its job meanwhile, a few polls
        except BaseException:
            runner.kill()
            raise
    out, err = runner.communicate(timeout=300)
    assert runner.returncode == 0 and json.loads(out)["state"] == "SUCCEEDED", err[-3000:]
    said = [line for line in err.splitlines() if WAITING in line]
    assert len(said) == 1 and "1 local job running" in said[0], err


def test_cancelled_and_killed_jobs_never_keep_a_slot(tmp_path, torch_engine):
    """LLMB_LOCAL_JOBS=1: a queued job cancelled, a queued job killed, a running job whose supervisor is killed
    (its ranks keep the slot while they train) and then its ranks: each frees its place, and a later job runs."""
    install = tmp_path / "install"
    running = detach(install)  # 50 steps: it holds the slot for the whole test
    wait_for(
        lambda: (status(install, running)["progress"] or "").startswith("iteration"),
        what="training",
    )
    cancelled = detach(install, *ONE_STEP)
    waits(install, cancelled, 0)
    killed = detach(install, *ONE_STEP)
    waits(install, killed, 1)

    code, out, err = llmb(install, "cancel", cancelled, "--json")
    assert code == 0 and json.loads(out)["state"] == "CANCELLED" and json.loads(out)["ended"], (
        out,
        err,
    )
    assert tagged(install).get(cancelled) is None
    log = Path(status(install, cancelled)["log"]).read_text()
    assert WAITING in log and not re.search(r"iteration +\d+/", log)  # it never trained
    assert not (jobs_dir(install) / cancelled / "ranks.json").exists()
    waits(install, killed, 0)  # the cancelled job's place in the queue is gone

    directory = jobs_dir(install) / running
    supervisor = json.loads((directory / "supervisor.json").read_text())["pid"]
    ranks = [r["pid"] for r in json.loads((directory / "ranks.json").read_text())["ranks"]]
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: not alive(supervisor), timeout=30, what="the supervisor to die")
    assert status(install, running)["state"] == "RUNNING"
    time.sleep(1)  # a few of the queued job's looks for a free slot
    waits(install, killed, 0)  # the orphaned ranks still hold the slot

    killed_supervisor = json.loads((jobs_dir(install) / killed / "supervisor.json").read_text())[
        "pid"
    ]
    os.kill(killed_supervisor, signal.SIGKILL)
    assert ended(install, killed)["state"] == "FAILED"

    later = detach(install, *ONE_STEP)
    waits(install, later, 0)  # behind the orphaned ranks, not behind the killed job's ticket
    for pid in ranks:
        os.kill(pid, signal.SIGKILL)
    assert ended(install, later)["state"] == "SUCCEEDED"
    assert ended(install, running)["state"] == "FAILED"
    wait_for(lambda: tagged(install) == {}, timeout=60, what="every process of the jobs to end")
    assert slot_is_free(install, 0)
    queue = Path(local_slots.slots_dir(str(install))) / local_slots.QUEUE
    assert [p.name for p in queue.iterdir()] == []  # every ticket left or was cleared


def test_without_a_usable_slot_directory_a_job_runs_and_its_log_says_why(tmp_path, torch_engine):
    install = tmp_path / "install"
    install.mkdir()
    (install / local_slots.DIRECTORY).write_text("a file where the slots' directory goes\n")
    code, out, err = llmb(install, *RUN, *ONE_STEP, "--json", timeout=300)
    assert code == 0 and json.loads(out)["state"] == "SUCCEEDED", err[-3000:]
    log = Path(json.loads(out)["log"]).read_text()
    assert (
        "no local slot could be taken" in log and "runs without waiting for other local jobs" in log
    )


# ------------------------------------------------------------------ what stands where the slots go

UNENFORCED = "llmb: warning: the local job limit (1 at once; LLMB_LOCAL_JOBS) cannot be enforced: "


@pytest.fixture
def reaped(tmp_path):
    """The install; whatever of its jobs still lives when the test ends is killed (a job that hangs
    must not outlive its test)."""
    install = tmp_path / "install"
    yield install
    for procs in tagged(install).values() if jobs_dir(install).exists() else ():
        for pid, start in procs:
            if alive(pid, start):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)


def run_plainly(install: Path, timeout: float = 180) -> tuple[dict, str, str]:
    """A foreground one-step run with LLMB_LOCAL_JOBS=1, its warnings as plain lines: (its final
    state, its stderr, its log)."""
    env = environment(install, "1")
    env.pop("LLMB_LOG_FORMAT")
    proc = subprocess.run(
        [_llmb_executable(), *RUN, *ONE_STEP, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    final = json.loads(proc.stdout)
    return final, proc.stderr, Path(final["log"]).read_text()


def slots_path(install: Path) -> Path:
    path = Path(local_slots.slots_dir(str(install)))
    (path / local_slots.QUEUE).mkdir(parents=True, exist_ok=True)
    return path


def test_a_fifo_as_a_slot_file_neither_blocks_nor_goes_unsaid(reaped, torch_engine):
    """A FIFO where slot 0's lock file goes: opening it waited for a writer, forever, and every later
    local job queued behind it. It is no regular file: the job runs, and the terminal says the limit
    cannot be enforced, and why."""
    fifo = slots_path(reaped) / "slot-0.lock"
    os.mkfifo(fifo)
    final, err, log = run_plainly(reaped)
    assert final["state"] == "SUCCEEDED", err[-3000:]
    said = f"$LLMB_INSTALL/.local-jobs/{local_slots.host_key()}/slot-0.lock is a FIFO (named pipe)"
    assert f"{UNENFORCED}{said}, not a regular file; this job runs without waiting" in err, err
    assert f"no local slot could be taken in {fifo.parent} ({said}" in log
    assert fifo.is_fifo()  # left as it was


def test_a_fifo_in_the_queue_is_no_ticket(reaped, torch_engine):
    """A FIFO named as the oldest ticket: no job waited behind it forever. It is passed over, and the
    limit still holds (nothing to say)."""
    fifo = slots_path(reaped) / local_slots.QUEUE / f"{0:020d}-planted.lock"
    os.mkfifo(fifo)
    final, err, log = run_plainly(reaped)
    assert final["state"] == "SUCCEEDED", err[-3000:]
    assert "cannot be enforced" not in err and "no local slot could be taken" not in log
    assert slot_record(reaped, final["job_id"])["slot"] == 0
    assert fifo.is_fifo()


def test_a_symlinked_slot_file_makes_nothing_outside_the_install(reaped, tmp_path, torch_engine):
    """slot-0.lock, a symbolic link to a file outside the install that does not exist: the open
    made it there. No link is followed: nothing appears outside, and the terminal says why the
    limit cannot be enforced."""
    outside = tmp_path / "outside"
    outside.mkdir()
    link = slots_path(reaped) / "slot-0.lock"
    link.symlink_to(outside / "made-through-a-link")
    final, err, _ = run_plainly(reaped)
    assert final["state"] == "SUCCEEDED", err[-3000:]
    assert list(outside.iterdir()) == []
    assert "slot-0.lock is a symbolic link, not a regular file" in err and UNENFORCED in err, err
    assert link.is_symlink()


@pytest.fixture
def unwritable_slots(reaped):
    """The slots' directory, made so that no file can be made in it: immutable as root (root passes
    every file mode), mode 0o500 otherwise."""
    directory = slots_path(reaped)
    if os.geteuid() == 0:
        made = subprocess.run(["chattr", "+i", str(directory)], capture_output=True, text=True)
        if made.returncode != 0:
            pytest.skip(f"cannot make a directory immutable here: {made.stderr.strip()}")
        undo = ["chattr", "-i", str(directory)]
    else:
        directory.chmod(0o500)
        undo = ["chmod", "755", str(directory)]
    try:
        yield reaped, directory
    finally:
        subprocess.run(undo, check=True)


def test_an_unwritable_slot_directory_is_said_on_the_terminal(unwritable_slots, torch_engine):
    """Every job ran at once with nothing said but a line in each log: the terminal hears it too."""
    install, directory = unwritable_slots
    final, err, log = run_plainly(install)
    assert final["state"] == "SUCCEEDED", err[-3000:]
    shown = f"$LLMB_INSTALL/.local-jobs/{local_slots.host_key()}"
    assert f"{UNENFORCED}{shown} cannot be written; this job runs without waiting" in err, err
    assert "no local slot could be taken" in log
    assert [p.name for p in directory.iterdir()] == [local_slots.QUEUE]  # no slot file made


def test_a_file_where_the_slots_directory_goes_is_said_before_the_job_starts(tmp_path):
    """Said by a dry run too: nothing is written, and nothing needs to run."""
    install = tmp_path / "install"
    install.mkdir()
    (install / local_slots.DIRECTORY).write_text("a file where the slots' directory goes\n")
    env = environment(install, "1")
    env.pop("LLMB_LOG_FORMAT")
    proc = subprocess.run(
        [_llmb_executable(), *RUN, *ONE_STEP, "--dry-run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        f"{UNENFORCED}$LLMB_INSTALL/.local-jobs is a regular file, not a directory" in proc.stderr
    )
    assert sorted(p.name for p in install.iterdir()) == [local_slots.DIRECTORY]
