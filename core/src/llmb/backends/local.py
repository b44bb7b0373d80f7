"""The local backend: one process per rank on this machine.

``submit`` starts a supervisor (``python -m llmb.backends.local_supervisor``)
in a session of its own, so its process group holds the job: the supervisor
and every rank it starts. The supervisor records its pid, the ranks' pids
and, when the job ends, ``exit.json`` in the job directory; ``status``,
``logs`` and ``cancel`` read those from any shell, after the launching
command has long exited.

States: RUNNING while the supervisor lives; then what ``exit.json`` says
(SUCCEEDED, FAILED with a reason, CANCELLED); FAILED if the supervisor
vanished without one (killed), CANCELLED if a cancel was asked for.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from llmb.experiment import read_json, write_json
from llmb.jobs import (
    Job,
    JobStatus,
    alive,
    cancel_requested,
    job_dir,
    last_iteration,
    now,
    read_exit,
    request_cancel,
    write_exit,
)
from llmb.runspec import RunSpec, SubmitOptions

SUPERVISOR_FILE = "supervisor.json"
RANKS_FILE = "ranks.json"
RUN_FILE = "run.json"
CANCEL_GRACE_S = 10.0


def _path(job: Job, name: str) -> str:
    return os.path.join(job_dir(job.id), name)


class LocalBackend:
    name = "local"

    def submit(self, spec: RunSpec, job: Job, submit: SubmitOptions) -> Job:  # noqa: ARG002 - no cluster options here
        write_json(_path(job, RUN_FILE), spec.to_dict())
        output = open(_path(job, "supervisor.out"), "ab")  # the supervisor's own errors, if any
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        subprocess.Popen(
            [sys.executable, "-m", "llmb.backends.local_supervisor", job_dir(job.id)],
            stdin=subprocess.DEVNULL, stdout=output, stderr=output, env=env,
            start_new_session=True, close_fds=True,
        )
        output.close()
        deadline = time.monotonic() + 30
        while not os.path.exists(_path(job, SUPERVISOR_FILE)) and time.monotonic() < deadline:
            time.sleep(0.02)  # the supervisor writes its pid first thing
        return job

    def describe(self, spec: RunSpec, job: Job, submit: SubmitOptions) -> dict:  # noqa: ARG002
        argv = [*spec.wrapper, sys.executable, "-m", "llmb.worker", _path(job, RUN_FILE)]
        lines = [f"RANK={r} WORLD_SIZE={spec.ranks} " + " ".join(argv) for r in range(spec.ranks)]
        return {"backend": "local", "ranks": [[*argv] for _ in range(spec.ranks)], "env": spec.env,
                "run_spec": spec.to_dict(), "text": "\n".join(lines)}

    def _status(self, job: Job) -> JobStatus:
        ended = read_exit(job.id)
        if ended is not None:
            return JobStatus(job, ended.get("state", "UNKNOWN"), ended.get("reason"),
                             last_iteration(job.log), ended)
        supervisor = read_json(_path(job, SUPERVISOR_FILE))
        if supervisor is None:
            return JobStatus(job, "QUEUED", "the supervisor is starting")
        if alive(supervisor.get("pid"), supervisor.get("start_time")):
            return JobStatus(job, "RUNNING", None, last_iteration(job.log))
        if cancel_requested(job.id):
            return JobStatus(job, "CANCELLED", "cancelled", last_iteration(job.log))
        return JobStatus(job, "FAILED", "the job's supervisor ended without recording an exit (was it killed?)",
                         last_iteration(job.log))

    def status(self, jobs: list[Job]) -> list[JobStatus]:
        return [self._status(job) for job in jobs]

    def _processes(self, job: Job) -> list[tuple[int, int | None]]:
        found = []
        supervisor = read_json(_path(job, SUPERVISOR_FILE)) or {}
        if supervisor.get("pid"):
            found.append((supervisor["pid"], supervisor.get("start_time")))
        ranks = read_json(_path(job, RANKS_FILE)) or {}
        found += [(r["pid"], r.get("start_time")) for r in ranks.get("ranks", [])]
        return found

    def cancel(self, job: Job) -> JobStatus:
        current = self._status(job)
        if current.state not in ("QUEUED", "RUNNING"):
            return current
        request_cancel(job.id)
        supervisor = read_json(_path(job, SUPERVISOR_FILE)) or {}
        pgid = supervisor.get("pgid")
        self._signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + CANCEL_GRACE_S
        while time.monotonic() < deadline and any(alive(p, s) for p, s in self._processes(job)):
            time.sleep(0.1)
        if any(alive(p, s) for p, s in self._processes(job)):
            self._signal_group(pgid, signal.SIGKILL)
            for pid, start in self._processes(job):
                if alive(pid, start):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            time.sleep(0.2)
        survivors = [p for p, s in self._processes(job) if alive(p, s)]
        if read_exit(job.id) is None and not survivors:
            write_exit(job.id, {"state": "CANCELLED", "reason": "cancelled", "ended_at": now(), "exit_codes": {}})
        status = self._status(job)
        if survivors:
            return JobStatus(job, status.state, f"processes still alive after SIGKILL: {survivors}", status.progress)
        return status

    @staticmethod
    def _signal_group(pgid: int | None, sig: int) -> None:
        if not pgid:
            return
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def log_path(self, job: Job) -> str | None:
        return job.log
