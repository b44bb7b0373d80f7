"""The local backend: one process per rank on this machine.

``submit`` starts a supervisor (``python -m llmb.backends.local_supervisor``)
in a session of its own and records it (pid, start time, session) at once;
the supervisor starts every rank in that session and records the ranks'
pids as it starts them, then ``exit.json`` when the job ends. Every process
of the job carries ``LLMB_JOB_DIR`` in its environment
(``local_processes``), so ``status`` and ``cancel`` find them from any
shell, even when the supervisor is gone or a record is missing.

States: QUEUED while the job is being submitted, waits for a local slot
(``local_slots``: at most ``LLMB_LOCAL_JOBS`` local CPU jobs run at once)
or for its GPUs (``local_gpus``: one local job per GPU), or its supervisor
starts the ranks; RUNNING while any process of the job
lives (the reason says so when the supervisor is gone but ranks train
on); then what ``exit.json`` says (SUCCEEDED, FAILED with a reason,
CANCELLED); FAILED with the reason when every process ended without
recording an exit (killed, or the job directory was deleted, read-only or
full), CANCELLED if a cancel was asked for. An unreadable ``exit.json`` gives UNKNOWN with what is wrong with it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

from llmb.backends.local_processes import (
    JOB_DIR_VARIABLE,
    Proc,
    job_processes,
    job_tag,
    signal_process,
)
from llmb.backends.local_slots import SLOT_FILE, queued_reason
from llmb.runs.experiment import read_json, write_json
from llmb.runs.jobs import (
    RUN_FILE,
    Ending,
    Job,
    JobStatus,
    alive,
    cancel_requested,
    describe_os_error,
    job_dir,
    last_iteration,
    now,
    process_start_time,
    read_exit_checked,
    request_cancel,
    store_error,
    store_trouble,
    submitter_alive,
    write_exit,
)
from llmb.runs.runspec import RunSpec, SubmitOptions

SUPERVISOR_FILE = "supervisor.json"
RANKS_FILE = "ranks.json"
SUPERVISOR_OUTPUT = "supervisor.out"
CANCEL_GRACE_S = 10.0  # from SIGTERM to SIGKILL
KILL_WAIT_S = 10.0  # for SIGKILLed processes to vanish


def _path(job: Job | str, name: str) -> str:
    return os.path.join(job_dir(job if isinstance(job, str) else job.id), name)


def supervisor_record(pid: int) -> dict:
    """What ``supervisor.json`` holds: the supervisor's identity and its session (the job's)."""
    return {
        "pid": pid,
        "pgid": pid,
        "session": pid,
        "start_time": process_start_time(pid),
        "started_at": now(),
    }


def stop_processes(find, grace: float = CANCEL_GRACE_S) -> list[Proc]:
    """SIGTERM every process ``find()`` returns (again for any that appear
    meanwhile), SIGKILL what is left after ``grace`` seconds; the survivors."""
    signalled: set[Proc] = set()
    deadline = time.monotonic() + grace
    while (living := find()) and time.monotonic() < deadline:
        for proc in living:
            if proc not in signalled:
                signal_process(proc, signal.SIGTERM)
                signalled.add(proc)
        time.sleep(0.1)
    deadline = time.monotonic() + KILL_WAIT_S
    while living and time.monotonic() < deadline:
        for proc in living:
            signal_process(proc, signal.SIGKILL)
        time.sleep(0.1)
        living = find()
    return living


def _last_line(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 4096))
            lines = [
                line.strip()
                for line in handle.read().decode("utf-8", "replace").splitlines()
                if line.strip()
            ]
    except OSError:
        return None
    return lines[-1] if lines else None


class LocalBackend:
    name = "local"
    cancel_is_final = True  # cancel returns once every process is gone (or says which survive)

    def __init__(self) -> None:
        # The supervisors started here, kept referenced: a Popen collected at once would run its
        # __del__ right after submit, where a Ctrl-C would be swallowed ("Exception ignored in").
        self.started: list[subprocess.Popen] = []

    def submit(self, spec: RunSpec, job: Job, submit: SubmitOptions) -> Job:  # noqa: ARG002 - no cluster options here
        directory = job_dir(job.id)
        proc = None
        try:
            write_json(_path(job, RUN_FILE), spec.to_dict())
            env = dict(os.environ)
            env.setdefault("PYTHONUNBUFFERED", "1")
            env[JOB_DIR_VARIABLE] = job_tag(directory)
            # the supervisor's own errors, if any
            with open(_path(job, SUPERVISOR_OUTPUT), "ab") as output:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "llmb.backends.local_supervisor", directory],
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=output,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                )
            self.started.append(proc)
            write_json(_path(job, SUPERVISOR_FILE), supervisor_record(proc.pid))
        except BaseException as exc:
            self._undo_submit(job, proc, exc)
            if isinstance(exc, OSError):
                raise store_error(f"cannot start job {job.id} in {directory}", exc) from None
            raise
        return job

    @staticmethod
    def _undo_submit(job: Job, proc: subprocess.Popen | None, exc: BaseException) -> None:
        """An interrupted or failed submission leaves nothing running, and says so."""
        if proc is not None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)  # our unreaped child: its pid is still its own
            proc.wait()
        interrupted = isinstance(exc, KeyboardInterrupt)
        reason = (
            "the submission was interrupted"
            if interrupted
            else f"the job could not be started: {describe_os_error(exc) if isinstance(exc, OSError) else exc}"
        )
        with contextlib.suppress(OSError):
            write_exit(
                job.id,
                {
                    "state": "CANCELLED" if interrupted else "FAILED",
                    "reason": reason,
                    "ended_at": now(),
                    "exit_codes": {},
                },
            )

    def describe(self, spec: RunSpec, job: Job, submit: SubmitOptions) -> dict:  # noqa: ARG002
        argv = [*spec.wrapper, sys.executable, "-m", "llmb.worker", _path(job, RUN_FILE)]
        lines = [f"RANK={r} WORLD_SIZE={spec.ranks} " + " ".join(argv) for r in range(spec.ranks)]
        return {
            "backend": "local",
            "ranks": [[*argv] for _ in range(spec.ranks)],
            "env": spec.env,
            "text": "\n".join(lines),
        }

    @staticmethod
    def _supervisor(job: Job) -> dict:
        found = read_json(_path(job, SUPERVISOR_FILE)) or {}
        return found if isinstance(found.get("pid"), int) else {}

    def _living(self, job: Job, supervisor: dict | None = None) -> list[Proc]:
        supervisor = self._supervisor(job) if supervisor is None else supervisor
        session = supervisor.get("session") or supervisor.get("pgid")
        ranks = (read_json(_path(job, RANKS_FILE)) or {}).get("ranks")
        recorded = [supervisor, *(ranks if isinstance(ranks, list) else [])]
        known = tuple((r.get("pid"), r.get("start_time")) for r in recorded if isinstance(r, dict))
        return job_processes(job_dir(job.id), session if isinstance(session, int) else None, known)

    def _status(self, job: Job) -> JobStatus:
        progress = last_iteration(job.log)
        ended, problem = read_exit_checked(job.id)
        if ended is not None:
            return JobStatus(job, ended["state"], ended.get("reason"), progress, ended)
        supervisor = self._supervisor(job)
        living = self._living(job, supervisor)
        if problem:
            what = f"its exit record is unreadable: {problem}"
            return JobStatus(job, "RUNNING" if living else "UNKNOWN", what, progress)
        if living:
            if alive(supervisor.get("pid"), supervisor.get("start_time")):
                ranks = [p for p in living if p.pid != supervisor["pid"]]
                if not ranks and not os.path.exists(_path(job, RANKS_FILE)):
                    waiting = queued_reason(read_json(_path(job, SLOT_FILE)))
                    return JobStatus(
                        job, "QUEUED", waiting or "the supervisor is starting the ranks", progress
                    )
                return JobStatus(job, "RUNNING", None, progress)
            gone = (
                f"the supervisor (pid {supervisor['pid']}) is gone"
                if supervisor
                else "no supervisor is recorded"
            )
            trouble = store_trouble(job.id)
            return JobStatus(
                job,
                "RUNNING",
                f"{gone}; {len(living)} process(es) of the job still run"
                + (f"; {trouble}" if trouble else "")
                + f" (llmb cancel {job.id} stops them)",
                progress,
            )
        # Nothing lives: the job may have recorded its exit and ended since it was read above.
        ended, problem = read_exit_checked(job.id)
        if ended is not None:
            return JobStatus(
                job, ended["state"], ended.get("reason"), last_iteration(job.log), ended
            )
        if problem:
            return JobStatus(job, "UNKNOWN", f"its exit record is unreadable: {problem}", progress)
        if cancel_requested(job.id):
            return JobStatus(job, "CANCELLED", "cancelled", progress)
        trouble = store_trouble(job.id)
        if not supervisor and not trouble:
            if submitter_alive(job.id):
                return JobStatus(job, "QUEUED", "being submitted", progress)
            return JobStatus(
                job, "FAILED", "its submission was interrupted before the job started", progress
            )
        who = f"the supervisor (pid {supervisor['pid']})" if supervisor else "the job"
        reason = f"{who} ended without recording an exit and no process of the job is left"
        if trouble:
            reason += f": {trouble}"
        elif said := _last_line(_path(job, SUPERVISOR_OUTPUT)):
            reason += f" (its last words: {said[:200]})"
        else:
            reason += " (was it killed?)"
        return JobStatus(job, "FAILED", reason, progress)

    def status(self, jobs: list[Job]) -> list[JobStatus]:
        found = []
        for job in jobs:  # one job's trouble never hides the others
            try:
                found.append(self._status(job))
            except OSError as exc:
                found.append(
                    JobStatus(job, "UNKNOWN", f"its state cannot be read: {describe_os_error(exc)}")
                )
        return found

    def cancel(self, job: Job) -> JobStatus:
        current = self._status(job)
        if current.state not in ("QUEUED", "RUNNING"):
            return current
        problems = []
        try:
            request_cancel(job.id)  # a supervisor still starting sees it and starts no rank
        except OSError as exc:
            problems.append(f"the cancel marker could not be left: {describe_os_error(exc)}")
        survivors = stop_processes(lambda: self._living(job))
        if survivors:
            return JobStatus(
                job,
                current.state,
                f"processes still alive after SIGKILL: {[p.pid for p in survivors]}",
                current.progress,
            )
        ended, _ = read_exit_checked(job.id)
        if (
            ended is None
        ):  # the supervisor was gone, or never got to record it: the core records the cancel
            reason = "; ".join(["cancelled", *problems])
            ending = Ending("CANCELLED", reason, prefer_log_reason=False, record={"exit_codes": {}})
            return JobStatus(job, "CANCELLED", reason, current.progress, ending=ending)
        status = self._status(job)
        if problems:
            return JobStatus(
                job,
                status.state,
                "; ".join([status.reason or status.state.lower(), *problems]),
                status.progress,
                status.exit,
            )
        return status

    def withdraw(self, job: Job) -> bool:
        """Stop whatever an interrupted submission of ``job`` started, recording
        nothing (its record is removed next); whether nothing of it is left."""
        with contextlib.suppress(OSError):
            request_cancel(job.id)  # a supervisor still starting starts no rank
        return not self.stop_unrecorded(job.id)[1]

    @staticmethod
    def unrecorded_processes(job_id: str) -> list[Proc]:
        """The living processes of a job, found without its records (gone or unreadable)."""
        return job_processes(job_dir(job_id))

    def stop_unrecorded(self, job_id: str) -> tuple[int, list[Proc]]:
        """Stop the processes of a job whose record is gone or unreadable:
        (how many there were, the survivors)."""
        found = self.unrecorded_processes(job_id)
        if not found:
            return 0, []
        return len(found), stop_processes(lambda: self.unrecorded_processes(job_id))

    def log_path(self, job: Job) -> str | None:
        return job.log

    @staticmethod
    def check(submit: SubmitOptions) -> list[str]:
        """Before anything of a run is written (``llmb.lifecycle.prepare``): a bad ``LLMB_LOCAL_JOBS`` is
        refused (``UsageError``); the warnings: the cluster options given, which this backend ignores,
        and why the local job limit (on a machine with GPUs: one job per GPU) cannot be kept (the job's
        supervisor, detached, only tells its log)."""
        from llmb.backends import local_gpus
        from llmb.backends.local_slots import LIMIT_VARIABLE, job_limit, unenforceable
        from llmb.paths import install_dir
        from llmb.runs.capability import detect

        limit = job_limit()
        given = submit.given()
        warnings = (
            [f"the local backend ignores {', '.join(given)} (cluster options)."] if given else []
        )
        # on a machine with GPUs a job waits for its GPUs (those it may be given), not for a slot
        gpus = detect().gpus
        if gpus and (
            why := local_gpus.unenforceable(
                install_dir(), local_gpus.job_gpus("cuda", gpus, os.environ)
            )
        ):
            warnings.append(
                f"one local job per GPU cannot be enforced: {why}; "
                f"this job runs without waiting for other local jobs."
            )
        elif not gpus and (why := unenforceable(install_dir(), limit)):
            warnings.append(
                f"the local job limit ({limit} at once; {LIMIT_VARIABLE}) cannot be enforced: {why}; "
                f"this job runs without waiting for other local jobs."
            )
        return warnings
