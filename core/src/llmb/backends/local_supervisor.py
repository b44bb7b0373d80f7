"""The local job's supervisor: ``python -m llmb.backends.local_supervisor JOB_DIR``.

Runs in a session of its own (its session is the job). It starts one
worker per rank, once it holds a local slot (``local_slots``: at most
``LLMB_LOCAL_JOBS`` CPU jobs run at once), or for a job on GPUs the locks of
its GPUs (``local_gpus``: one job per GPU); until then the job waits, QUEUED,
with the usual rendezvous variables (MASTER_ADDR,
MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE), all appending
to the run's log, and records each rank's pid as it starts it. A cancel
marker left before a rank starts (``llmb cancel`` during start-up) means no
rank starts. When a rank fails, the others are stopped; on SIGTERM (``llmb
cancel``) all are. At the end it hands the job's end to the core
(``llmb.lifecycle.reconcile.record_end``), which parses the log, stores the
result in the results database and writes ``exit.json`` (into space
reserved at the start, should the disk have filled meanwhile).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import traceback

from llmb.backends import local_gpus, local_slots
from llmb.backends.local import RANKS_FILE, SUPERVISOR_FILE, supervisor_record
from llmb.backends.local_processes import JOB_DIR_VARIABLE, job_tag
from llmb.errors import UsageError
from llmb.lifecycle.reconcile import record_end
from llmb.paths import install_dir
from llmb.runs.experiment import read_json, write_json
from llmb.runs.jobs import (
    JOB_FILE,
    RUN_FILE,
    Ending,
    cancel_requested,
    describe_os_error,
    job_from_dict,
    now,
    process_start_time,
    read_record,
    reserve_exit_space,
    write_exit,
)
from llmb.runs.runspec import RunSpec

STOP_GRACE_S = 10.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def describe_exit(code: int, peak_kb: int | None = None, out_of_memory: bool = False) -> str:
    """``exited with code 1``, ``was killed by SIGTERM``; a rank the kernel's out-of-memory killer ended
    (a SIGKILL while the kernel counted an OOM kill, ``oom_kills``) is said to be that, with the memory
    it had at its peak (``peak_kb``: its ru_maxrss) and what this machine has."""
    if code == -signal.SIGKILL and out_of_memory:
        from llmb.runs.capability import host_memory

        had = f" at a peak of {peak_kb / (1 << 20):.1f} GiB resident" if peak_kb else ""
        host = host_memory()
        of = f" (of {host.describe()})" if host is not None else ""
        return f"was killed by the kernel's out-of-memory killer (SIGKILL){had}{of}"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def oom_kills() -> int | None:
    """How many processes the kernel's out-of-memory killer has ended since boot (``/proc/vmstat``'s
    oom_kill, Linux 4.13 and later); None where it is not counted."""
    try:
        with open("/proc/vmstat", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


class Supervisor:
    def __init__(self, directory: str, host):
        self.directory = directory
        # () -> the process's plugin host, made once the ranks ended: the job's end is recorded with it
        self.host = host
        record, problem = read_record(os.path.join(directory, JOB_FILE))
        self.job, problem = (
            job_from_dict(record) if record else (None, problem or "job.json is missing")
        )
        if self.job is None:
            raise SystemExit(f"llmb supervisor: cannot start the job in {directory}: {problem}")
        self.spec = RunSpec.from_dict(read_json(os.path.join(directory, RUN_FILE)))
        self.procs: list[subprocess.Popen] = []
        self.cancelled = False
        # (rank, exit code) of the first rank seen failing
        self.first_failure: tuple[int, int] | None = None
        # each ended rank's peak resident memory (ru_maxrss, KiB), and the kernel's OOM kills before them
        self.peak_kb: dict[int, int] = {}
        self.oom_kills_before: int | None = None
        # a local slot (a CPU job) or the locks of the job's GPUs (local_gpus)
        self.slot: local_slots.Slot | local_gpus.GpuLocks | None = None
        self.slot_record: dict = {}

    def note(self, text: str) -> None:
        """A line in the run's log, from llmb itself (and in supervisor.out when the log cannot take it)."""
        try:
            with open(self.spec.log, "a", encoding="utf-8") as handle:
                handle.write(f"[llmb] {text}\n")
        except OSError as exc:
            print(
                f"[llmb] {text} (the log could not take this line: {describe_os_error(exc)})",
                file=sys.stderr,
            )

    def cancel_seen(self) -> bool:
        self.cancelled = self.cancelled or cancel_requested(self.job.id)
        return self.cancelled

    def on_signal(self, signum, frame) -> None:  # noqa: ARG002 - signal handler signature
        self.cancelled = True
        self.stop(signal.SIGTERM)

    def stop(self, sig: int) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    proc.send_signal(sig)
                except OSError:
                    pass

    def start_ranks(self) -> None:
        spec = self.spec
        port = free_port()
        with open(spec.log, "ab") as log:
            for rank in range(spec.ranks):
                if self.cancel_seen():
                    return  # cancelled during start-up: no further rank starts
                env = dict(os.environ)
                env.update(spec.env)
                env.update(
                    {
                        "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(port),
                        "WORLD_SIZE": str(spec.ranks),
                        "RANK": str(rank),
                        "LOCAL_RANK": str(rank),
                        "LOCAL_WORLD_SIZE": str(spec.ranks),
                        "GROUP_RANK": "0",
                        "LLMB_JOB_ID": spec.job_id,
                        "PYTHONUNBUFFERED": "1",
                        JOB_DIR_VARIABLE: job_tag(
                            self.directory
                        ),  # how llmb status and cancel know the job's processes
                    }
                )
                wrapper = [part.replace("{rank}", str(rank)) for part in spec.wrapper]
                argv = [
                    *wrapper,
                    sys.executable,
                    "-m",
                    "llmb.worker",
                    os.path.join(self.directory, RUN_FILE),
                ]
                # The ranks hold the slot (or the GPUs) too: it stays taken while any of them lives, the
                # supervisor or not.
                held = self.slot.fds if self.slot else ()
                self.procs.append(
                    subprocess.Popen(
                        argv,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=log,
                        env=env,
                        pass_fds=held,
                    )
                )
                self.record_ranks()
                if self.cancelled:  # SIGTERM arrived while this rank was starting
                    self.stop(signal.SIGTERM)

    def record_slot(self, **changes) -> None:
        self.slot_record.update(changes)
        try:
            write_json(os.path.join(self.directory, local_slots.SLOT_FILE), self.slot_record)
        except OSError:
            pass  # a record for llmb status only: the job runs on without it

    def take_slot(self, gpus: list[str]) -> None:
        """Wait for a local slot, or for the job's GPUs (``gpus``) when it computes on GPUs (a cancel
        ends the wait); without a usable slot directory the job runs unqueued, and its log says so."""
        if gpus:
            self.take_gpus(gpus)
            return
        try:
            limit = local_slots.job_limit()  # checked by llmb run already
        except UsageError:
            limit = local_slots.default_limit()
        self.slot_record = {"limit": limit}

        try:
            self.slot = local_slots.take(
                install_dir(), self.job.id, limit, self.cancel_seen, self.waiting
            )
        except OSError as exc:
            self.note(
                f"no local slot could be taken in {local_slots.slots_dir(install_dir())} "
                f"({local_slots.why(exc)}); the job runs without waiting for other local jobs"
            )
            return
        if self.slot is not None:
            self.record_slot(slot=self.slot.index, acquired_at=self.slot.acquired_at)

    def waiting(self, reason: str) -> None:
        """Why the job waits (for a slot or a GPU): noted in its log the first time, recorded for
        ``llmb status`` every time, with when it started to wait."""
        if "queued_at" not in self.slot_record:
            self.note(reason)
        self.record_slot(
            waiting=reason, queued_at=self.slot_record.get("queued_at") or local_slots.stamp()
        )

    def take_gpus(self, gpus: list[str]) -> None:
        """Wait until no other local job holds one of ``gpus`` (``local_gpus``), then hold them all."""
        self.slot_record = {"gpus": gpus}

        try:
            self.slot = local_gpus.take(
                install_dir(), self.job.id, gpus, self.cancel_seen, self.waiting
            )
        except OSError as exc:
            self.note(
                f"{local_gpus.shown_gpus(gpus)} could not be locked in "
                f"{local_slots.slots_dir(install_dir())} ({local_slots.why(exc)}); the job runs "
                f"without waiting for other local jobs"
            )
            return
        if self.slot is not None:
            self.record_slot(acquired_at=self.slot.acquired_at)

    def release_slot(self) -> None:
        if self.slot is not None:
            self.record_slot(released_at=local_slots.stamp())
            self.slot.release()
            self.slot = None

    def record_ranks(self) -> None:
        try:
            write_json(
                os.path.join(self.directory, RANKS_FILE),
                {
                    "ranks": [
                        {"rank": r, "pid": p.pid, "start_time": process_start_time(p.pid)}
                        for r, p in enumerate(self.procs)
                    ]
                },
            )
        except OSError as exc:  # status and cancel still find the ranks by their environment
            self.note(f"could not record the ranks' pids: {describe_os_error(exc)}")

    def poll(self, rank: int) -> int | None:
        """The rank's exit code once it ended (None before), reaped with its resource use: its peak
        resident memory is kept (``peak_kb``)."""
        proc = self.procs[rank]
        if proc.returncode is not None:
            return proc.returncode
        try:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere (Popen.poll): its code, without its usage
            return proc.poll()
        if pid == 0:
            return None
        proc.returncode = os.waitstatus_to_exitcode(status)
        self.peak_kb[rank] = usage.ru_maxrss
        return proc.returncode

    def why(self, rank: int, code: int) -> str:
        """``rank 0 was killed by ...``: how the rank ended, out of memory where the kernel says so."""
        after = oom_kills()
        out_of_memory = (
            self.oom_kills_before is not None
            and after is not None
            and after > self.oom_kills_before
        )
        return f"rank {rank} {describe_exit(code, self.peak_kb.get(rank), out_of_memory)}"

    def wait(self) -> dict[int, int]:
        """Exit codes by rank. The first rank to fail stops the others."""
        failed_at = None
        while True:
            codes = {r: self.poll(r) for r in range(len(self.procs))}
            bad = [r for r, c in codes.items() if c not in (None, 0)]
            if bad and self.first_failure is None:
                self.first_failure = (bad[0], codes[bad[0]])
            if all(c is not None for c in codes.values()):
                return codes
            if bad and failed_at is None and not self.cancelled:
                failed_at = time.monotonic()
                rank = bad[0]
                self.note(
                    f"{self.why(rank, codes[rank])} (pid {self.procs[rank].pid}); stopping the other "
                    f"ranks"
                )
                self.stop(signal.SIGTERM)
            if failed_at is not None and time.monotonic() - failed_at > STOP_GRACE_S:
                self.stop(signal.SIGKILL)
            time.sleep(0.1)

    def finish(self, codes: dict[int, int]) -> None:
        cancelled = self.cancelled or cancel_requested(self.job.id)
        failed = {r: c for r, c in codes.items() if c != 0}
        state = "CANCELLED" if cancelled else ("FAILED" if failed else "SUCCEEDED")
        if cancelled:
            self.note("cancelled; every rank was stopped")
        # The rank that failed first is the cause; the others were stopped because of it.
        first = self.first_failure or (min(failed.items()) if failed else None)
        reason = "cancelled" if cancelled else None
        if state == "FAILED" and first is not None:
            reason = self.why(*first)
        try:
            written = record_end(
                self.host(),
                self.job,
                Ending(
                    state,
                    reason,
                    prefer_log_reason=first is not None and first[1] > 0,
                    record={"exit_codes": {str(r): c for r, c in codes.items()}},
                ),
            )
        except OSError as exc:
            self.note(
                f"the job ended {state}, but that could not be recorded in {self.directory}: "
                f"{describe_os_error(exc)}"
            )
            raise SystemExit(1) from None
        if written.get("result_error"):
            self.note(written["result_error"])

    def refuse(self, reason: str) -> None:
        """End the job FAILED before any rank starts, saying why in its log and its end."""
        self.note(f"the job does not start: {reason}")
        try:
            write_exit(
                self.job.id,
                {"state": "FAILED", "ended_at": now(), "exit_codes": {}, "reason": reason},
            )
        except OSError as error:
            self.note(f"could not record the failure: {describe_os_error(error)}")
            raise SystemExit(1) from None

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        try:  # llmb run wrote it already, unless it was killed first
            write_json(
                os.path.join(self.directory, SUPERVISOR_FILE), supervisor_record(os.getpid())
            )
        except OSError as exc:
            self.note(f"could not record the supervisor's pid: {describe_os_error(exc)}")
        reserve_exit_space(self.job.id)
        try:
            gpus = local_gpus.job_gpus(
                self.spec.device, self.spec.ranks, {**os.environ, **self.spec.env}
            )
        except local_gpus.GpuNameError as exc:
            # no lock is the GPU's own: the job must not start (llmb run refuses it before this)
            self.refuse(str(exc))
            return
        try:
            self.take_slot(gpus)
            self.oom_kills_before = oom_kills()
            self.start_ranks()
            codes = self.wait()
            self.release_slot()  # every rank has ended: the next local job may start
        except Exception as exc:  # noqa: BLE001
            self.stop(signal.SIGKILL)
            self.note("supervisor error:\n" + traceback.format_exc())
            try:
                write_exit(
                    self.job.id,
                    {
                        "state": "FAILED",
                        "ended_at": now(),
                        "exit_codes": {},
                        "reason": f"the supervisor failed: {type(exc).__name__}: {exc}",
                    },
                )
            except OSError as error:
                self.note(f"could not record the failure: {describe_os_error(error)}")
                raise SystemExit(1) from None
            return
        self.finish(codes)


def main() -> None:
    from llmb.plugins.host import process_host

    Supervisor(sys.argv[1], process_host).run()


if __name__ == "__main__":
    main()
