"""The Slurm backend: submit, track, cancel, and resubmit when the core retries.

A job is one or more attempts, each a Slurm job of its own with its own
experiment run directory (a retry never overwrites what the failed attempt
left). ``job.details["slurm"]`` holds what every attempt is rendered from;
``job.details["attempts"]`` the Slurm job id, run directory and log of each.

Tracking, for any number of jobs: one ``squeue`` for the attempts Slurm
still holds, one ``sacct`` for those it has forgotten (when the cluster keeps
accounting), then the exit marker the batch script wrote. A job that has
ended is reported with its ``Ending`` (the Slurm state, reason, nodes, and an
infrastructure cause when there is one); the core records it once (result
parsed and stored, ``exit.json`` written), after which it costs no Slurm
call. A failed query leaves every state as it was: a job is never cancelled
or failed because Slurm did not answer.

Every submission carries a marker, ``sbatch --comment=llmb:<job id>:<attempt>``.
When sbatch's answer is lost (it timed out, was killed, printed no job id),
the job is looked up by that marker (``squeue``), or by the id the batch
script wrote on starting, and tracked as any other; until Slurm answers, the
job stays UNKNOWN and is looked up again at every poll. A job record with no
attempt (llmb stopped during its first sbatch) is looked up the same way.

Retries (``--retries N``) are the core's decision (``llmb.lifecycle.reconcile``):
for infrastructure failures (NODE_FAIL, BOOT_FAIL, PREEMPTED, a node lost
under srun, a launch that never started the worker: this backend names them)
and for flaky application failures. ``resubmit`` then submits a fresh Slurm
job for the fresh run directory the core made, excluding the nodes
``unhealthy_nodes`` found. Each retried attempt's record says why it ended
(``ended``).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace

from llmb import (
    RUN_FILE,
    SECRET_VARIABLES,
    TERMINAL,
    Ending,
    Job,
    JobStatus,
    LlmbError,
    NothingSubmitted,
    RunSpec,
    SubmitOptions,
    Unconfirmed,
    UsageError,
    cancel_requested,
    get_logger,
    image_path,
    install_dir,
    job_dir,
    now,
    read_json,
    read_tail,
    value_checks,
    write_json,
)

from llmb_backend_slurm import launch_plan
from llmb_backend_slurm.commands import AnswerLost, QueryFailed, Row, SlurmCommands, submission_env
from llmb_backend_slurm.launch_settings import Binding
from llmb_backend_slurm.script import EXITED, STARTED, BatchScript, Container, render
from llmb_backend_slurm.states import INFRASTRUCTURE, llmb_state, normalise

# after sbatch's answer was lost and squeue showed no such job: once more, later
LOOK_UP_AGAIN_S = 2.0
_HEALTHY = (
    "idle",
    "alloc",
    "allocated",
    "mix",
    "mixed",
    "comp",
    "completing",
    "plnd",
    "planned",
    "resv",
    "reserved",
)


def worker_pythonpath() -> str:
    """Where ``llmb install`` puts llmb's pure-Python packages for the container's Python."""
    return os.path.join(install_dir(), "python")


def submission_marker(job_id: str, attempt: int) -> str:
    """The comment every submission carries: how its Slurm job is found when sbatch's answer is lost."""
    return f"llmb:{job_id}:{attempt}"


def secret_names(submit: SubmitOptions) -> tuple[str, ...]:
    """Variables passed only through sbatch's environment: HF_TOKEN when set, and those named."""
    return tuple(
        dict.fromkeys([*(n for n in SECRET_VARIABLES if n in os.environ), *submit.secrets])
    )


class SlurmBackend:
    name = "slurm"
    # how the core waits after a cancel
    cancel_wait_s, cancel_poll_s, cancel_after = 60.0, 0.5, "scancel"

    def __init__(self, commands: SlurmCommands | None = None):
        self.slurm = commands or SlurmCommands()

    # ------------------------------------------------------------ submit

    def settings(
        self, spec: RunSpec, submit: SubmitOptions, problems: list[str] | None = None
    ) -> dict:
        """Everything every attempt is rendered from (JSON, kept in the job record; no secret values).
        With ``problems`` (a dry run), what would stop a submission is listed there instead of raised."""
        secrets = secret_names(submit)
        run_file = os.path.join(job_dir(spec.job_id), RUN_FILE)
        if submit.bare:
            python = os.environ.get("LLMB_SLURM_PYTHON") or sys.executable
            worker = [*spec.wrapper, python, "-m", "llmb.worker", run_file]
            container = None
        else:
            reference = (
                submit.image or (spec.framework_config or {}).get("container") or spec.container
            )
            if not reference:
                raise UsageError(
                    f"no container image is known for {spec.workload}: give --image, or --bare to run "
                    f"from the nodes' Python environment."
                )
            # --image's check, wherever it came from
            reference = value_checks.image(reference, "the container image")
            if reference.endswith(".sqsh"):
                image = reference
            else:
                imported = image_path(reference)
                image = imported if os.path.exists(imported) else reference
            library = worker_pythonpath()
            if not os.path.isdir(library):
                problem = (
                    f"container mode runs llmb's worker from {library}, which does not exist: run "
                    f"llmb install first, or use --bare to run from the nodes' Python environment."
                )
                if problems is None:
                    raise UsageError(problem)
                problems.append(problem)
            install = install_dir()
            mounts = [
                f"{install}:{install}",
                *(value_checks.mount(m, "a container mount") for m in submit.mounts),
            ]
            container = {"image": image, "mounts": mounts, "env_names": [*secrets, "PYTHONPATH"]}
            worker = [*spec.wrapper, "python3", "-m", "llmb.worker", run_file]
        # the seeds: set it where the cluster uses gres
        gpus_per_node = os.environ.get("SBATCH_GPUS_PER_NODE") or None
        return {
            "account": submit.account,
            "partition": submit.partition,
            "time_limit": submit.time_limit
            and value_checks.time_limit(submit.time_limit, "--time-limit"),
            "gpus_per_node": gpus_per_node,
            "requeue": submit.requeue,
            "exclusive": True,
            "mem": "0",
            "container": container,
            "worker": worker,
            "retries": submit.retries,
            "secrets": list(secrets),
            "pythonpath": None if submit.bare else worker_pythonpath(),
            **launch_plan.plan(spec, submit, self.slurm, secrets, container is not None, problems),
        }

    def submit(self, spec: RunSpec, job: Job, submit: SubmitOptions) -> Job:
        # a UsageError: nothing was submitted (the core removes the job)
        settings = self.settings(spec, submit)
        job = replace(job, attempts=0, details={"slurm": settings, "attempts": []})
        for warning in settings["warnings"]:
            get_logger("llmb.slurm").warning(warning)  # about the cluster, not the job: said once
            _note(spec.log, f"warning: {warning}")
        return self._submit_attempt(job, spec, first=True)

    def _script(self, job: Job, spec: RunSpec, attempt: int) -> BatchScript:
        s = job.details["slurm"]
        # the run's own variables (the recipe's, --env) win
        env = {**s.get("rank_env", {}), **spec.env}
        if s.get("pythonpath"):
            env["PYTHONPATH"] = s["pythonpath"]
        container = (
            Container(
                s["container"]["image"],
                tuple(s["container"]["mounts"]),
                tuple(s["container"]["env_names"]),
            )
            if s.get("container")
            else None
        )
        return BatchScript(
            job_id=job.id,
            attempt=attempt,
            experiment=spec.experiment,
            nodes=spec.nodes,
            tasks_per_node=spec.ranks_per_node or spec.ranks,
            output=os.path.join(spec.inner_dir, f"sbatch_{spec.experiment}.out"),
            log=spec.log,
            job_dir=job_dir(job.id),
            worker=tuple(s["worker"]),
            env=env,
            account=s.get("account"),
            partition=s.get("partition"),
            time_limit=s.get("time_limit"),
            gpus_per_node=s.get("gpus_per_node"),
            gres=s.get("gres"),
            exclusive=s.get("exclusive", True),
            mem=s.get("mem"),
            requeue=s.get("requeue", False),
            segment=s.get("segment"),
            nodelist=s.get("nodelist"),
            exclude=tuple(s.get("exclude", ())),
            reservation=s.get("reservation"),
            qos=s.get("qos"),
            constraint=s.get("constraint"),
            additional=tuple((k, v) for k, v in s.get("additional", ())),
            container=container,
            mpi=s.get("mpi"),
            binding=Binding(**s["binding"]) if s.get("binding") else None,
        )

    def describe(self, spec: RunSpec, job: Job, submit: SubmitOptions) -> dict:
        problems: list[str] = []
        settings = self.settings(spec, submit, problems)
        job = replace(job, attempts=0, details={"slurm": settings, "attempts": []})
        for warning in settings["warnings"]:
            get_logger("llmb.slurm").warning(warning)  # about the cluster, not the job: said once
        script_path = os.path.join(spec.run_dir, f"sbatch_{spec.experiment}.sh")
        try:
            text = render(self._script(job, spec, 1))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        command = ["sbatch", "--parsable", f"--comment={submission_marker(job.id, 1)}", script_path]
        return {
            "backend": self.name,
            "script_path": script_path,
            "script": text,
            "command": command,
            "secrets": settings["secrets"],
            "warnings": settings["warnings"],
            "problems": problems,
            "text": text,
        }

    def _submit_attempt(self, job: Job, spec: RunSpec, first: bool) -> Job:
        attempt = job.attempts + 1
        write_json(os.path.join(job_dir(job.id), RUN_FILE), spec.to_dict())
        script_path = os.path.join(spec.run_dir, f"sbatch_{spec.experiment}.sh")
        try:
            text = render(self._script(job, spec, attempt))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        with open(script_path, "w", encoding="utf-8") as handle:
            handle.write(text)
        marker = submission_marker(job.id, attempt)
        lost = None
        try:
            slurm_id = self.slurm.sbatch(
                script_path, submission_env(tuple(job.details["slurm"]["secrets"])), marker
            )
        except AnswerLost as exc:
            slurm_id, lost = None, str(exc)
        except UsageError as exc:
            raise UsageError(f"{exc} (the script is kept: {script_path})") from None
        record = {
            "attempt": attempt,
            "slurm_id": slurm_id,
            "marker": marker,
            "run_dir": spec.run_dir,
            "log": spec.log,
            "submitted_at": now(),
            "exclude": list(job.details["slurm"].get("exclude", [])),
        }
        if lost:
            record["lost"] = lost
        details = {**job.details, "attempts": [*job.details["attempts"], record]}
        job = replace(job, attempts=attempt, details=details, run_dir=spec.run_dir, log=spec.log)
        return self._find_lost(job, script_path, first) if lost else job

    def _find_lost(self, job: Job, script_path: str, first: bool) -> Job:
        """The job whose sbatch answer was lost, with the Slurm id its marker finds; when Slurm
        does not answer either, saved as it is (status looks again); when Slurm holds no such
        job, an error: nothing was submitted."""
        why = self._unconfirmed(job)
        for pause in (0.0, LOOK_UP_AGAIN_S):
            time.sleep(pause)
            try:
                slurm_id = self._look_up([job])[job.id]
            except QueryFailed as exc:
                if not first:
                    return job
                raise Unconfirmed(
                    f"{why}, and {exc}: whether Slurm took the job is not known yet. llmb keeps it as "
                    f"{job.id} and finds its Slurm job by that marker once Slurm answers: llmb status "
                    f"{job.id} shows it, llmb cancel {job.id} stops it.",
                    job,
                ) from None
            if slurm_id:
                _note(
                    job.log,
                    f"{why}; Slurm job {slurm_id} carries it, tracked as attempt {job.attempts}",
                )
                return self._with_slurm_id(job, slurm_id)
        error = NothingSubmitted if first else LlmbError  # the core removes a first attempt's job
        raise error(
            f"{why}, and Slurm holds no job with that marker: nothing was submitted (the script is kept: "
            f"{script_path}). Submit again; LLMB_SLURM_TIMEOUT (now {self.slurm.timeout:.0f} s) is how "
            f"long llmb waits for Slurm's commands."
        )

    # ------------------------------------------------------------ tracking

    def status(self, jobs: list[Job]) -> list[JobStatus]:
        out: dict[str, JobStatus] = {}
        live, unconfirmed = [], []
        for job in jobs:  # the core asks only for jobs whose end is not recorded
            if self._current(job).get("slurm_id"):
                live.append(job)
            else:
                unconfirmed.append(job)
        if unconfirmed:
            try:
                found = self._look_up(unconfirmed)
            except QueryFailed as exc:
                for job in unconfirmed:
                    out[job.id] = JobStatus(
                        job,
                        "UNKNOWN",
                        f"{self._unconfirmed(job)}; {exc}, so llmb looks for it "
                        f"again at the next poll",
                    )
            else:
                for job in unconfirmed:
                    if found[job.id]:
                        live.append(self._adopt(job, found[job.id]))
                    else:
                        out[job.id] = self._not_found(job)
        if live:
            ids = [self._current(job)["slurm_id"] for job in live]
            try:
                rows = self.slurm.squeue(ids)
                gone = [i for i in ids if i not in rows]
                accounting = self.slurm.sacct(gone) if gone else {}
            except QueryFailed as exc:
                for job in live:
                    out[job.id] = JobStatus(job, "UNKNOWN", f"{exc}; the job is left alone")
            else:
                for job in live:
                    out[job.id] = self._decide(job, rows, accounting)
        return [out[job.id] for job in jobs]

    @staticmethod
    def _current(job: Job) -> dict:
        """The current attempt; for a record that holds none (llmb stopped during its first
        sbatch), the first, its Slurm job id unknown."""
        attempts = job.details.get("attempts") or []
        if attempts:
            return attempts[-1]
        return {
            "attempt": 1,
            "slurm_id": None,
            "marker": submission_marker(job.id, 1),
            "run_dir": job.run_dir,
            "log": job.log,
            "unrecorded": True,
        }

    # ------------------------------------------------------------ attempts whose Slurm job id is not known

    def _unconfirmed(self, job: Job) -> str:
        """Why the current attempt's Slurm job id is not known, and the marker that finds it."""
        attempt = self._current(job)
        marker = attempt.get("marker") or submission_marker(job.id, attempt["attempt"])
        if attempt.get("unrecorded"):
            return (
                f"no Slurm job was recorded for it (llmb stopped while submitting it?); its marker (sbatch "
                f"--comment): {marker}"
            )
        return (
            f"sbatch's answer was lost ({attempt.get('lost') or 'no job id'}); the job's marker (sbatch "
            f"--comment): {marker}"
        )

    def _look_up(self, jobs: list[Job]) -> dict[str, str | None]:
        """Job id -> the Slurm job id of its current attempt, or None when Slurm holds no job with its
        marker: the id the batch script wrote on starting, else one squeue for all of them."""
        found: dict[str, str | None] = {}
        ask: dict[str, str] = {}
        for job in jobs:
            attempt = self._current(job)
            started = read_json(
                os.path.join(job_dir(job.id), STARTED.format(attempt=attempt["attempt"]))
            )
            slurm_id = str((started or {}).get("slurm_job_id", ""))
            if slurm_id.isdigit():
                found[job.id] = slurm_id
            else:
                ask[attempt.get("marker") or submission_marker(job.id, attempt["attempt"])] = job.id
        if ask:
            marked = self.slurm.marked(list(ask))
            found.update({job_id: marked.get(marker) for marker, job_id in ask.items()})
        return found

    def _with_slurm_id(self, job: Job, slurm_id: str) -> Job:
        attempt = {k: v for k, v in self._current(job).items() if k != "unrecorded"}
        attempt.update(
            slurm_id=slurm_id,
            marker=attempt.get("marker") or submission_marker(job.id, attempt["attempt"]),
        )
        attempts = job.details.get("attempts") or []
        attempts = [*attempts[:-1], attempt]
        return replace(
            job,
            attempts=max(job.attempts, attempt["attempt"]),
            details={**job.details, "attempts": attempts},
        )

    def _adopt(self, job: Job, slurm_id: str) -> Job:
        """The job record, with the Slurm job id found for its current attempt (a note in the log); the
        core saves the record."""
        why = self._unconfirmed(job)
        found = self._with_slurm_id(job, slurm_id)
        _note(
            found.log,
            f"{why}; Slurm job {slurm_id} carries it, tracked as attempt {found.attempts}",
        )
        return found

    def _not_found(self, job: Job) -> JobStatus:
        """Slurm answered and holds no job with the marker, and none started."""
        why = self._unconfirmed(job)
        # perhaps submitted by an llmb that did not mark its jobs
        if self._current(job).get("unrecorded"):
            return JobStatus(
                job,
                "UNKNOWN",
                f"{why}, and Slurm holds no job with that marker: it was not "
                f"submitted, or not with a marker (squeue --name={job.experiment} lists "
                f"jobs of its name)",
            )
        state = "CANCELLED" if cancel_requested(job.id) else "INFRA_FAILED"
        reason = f"{why}, and Slurm holds no job with that marker, nor did one start: it was not submitted"
        return JobStatus(
            job,
            state,
            reason,
            ending=Ending(
                state,
                reason,
                prefer_log_reason=False,
                record={"slurm_state": "", "slurm_id": None, "nodes": "", "attempts": job.attempts},
            ),
        )

    def _decide(
        self, job: Job, rows: dict[str, Row], accounting: dict[str, Row] | None
    ) -> JobStatus:
        attempt = self._current(job)
        slurm_id = attempt["slurm_id"]
        row = rows.get(slurm_id) or (accounting or {}).get(slurm_id)
        if row is not None:
            slurm_state = normalise(row.state)
            state = llmb_state(slurm_state)
            nodes = row.nodes
            reason = None if row.reason in ("", "None") else row.reason
            if row.exit_code not in (None, "", "0:0"):
                reason = f"exit code {row.exit_code}"  # sacct's ExitCode, code:signal
        else:
            slurm_state, state, reason, nodes = self._from_marker(job, attempt, accounting is None)
        if state not in TERMINAL:
            if state == "QUEUED" and reason:
                reason = f"Slurm: {reason}"
            return JobStatus(job, state, reason)
        ending = self._ending(job, attempt, slurm_state, state, reason, nodes)
        return JobStatus(job, state, ending.reason, ending=ending)

    def _from_marker(
        self, job: Job, attempt: dict, no_accounting: bool
    ) -> tuple[str, str, str | None, str]:
        """The batch script's own record, when Slurm has forgotten the job."""
        directory = job_dir(job.id)
        started = read_json(os.path.join(directory, STARTED.format(attempt=attempt["attempt"])))
        exited = read_json(os.path.join(directory, EXITED.format(attempt=attempt["attempt"])))
        nodes = (started or {}).get("nodes", "")
        why = "Slurm no longer knows the job" + (
            " and keeps no accounting" if no_accounting else ""
        )
        if exited is None:
            return "", "UNKNOWN", f"{why}, and it left no exit marker", nodes
        if exited.get("exit_code") == 0:
            return "COMPLETED", "SUCCEEDED", None, nodes
        if exited.get("signal"):
            if cancel_requested(job.id):
                return "CANCELLED", "CANCELLED", "cancelled", nodes
            return (
                "",
                "FAILED",
                f"stopped by SIG{exited['signal']} ({why}: cancelled outside llmb, or its time "
                f"limit)",
                nodes,
            )
        return "FAILED", "FAILED", f"exit code {exited.get('exit_code')}", nodes

    def _ending(
        self, job: Job, attempt: dict, slurm_state: str, state: str, reason: str | None, nodes: str
    ) -> Ending:
        """How the attempt ended, as Slurm and the log tell it: an infrastructure cause when there is one
        (the core retries or records it), else the reason in Slurm's words."""
        cause = slurm_state if slurm_state in INFRASTRUCTURE else None
        if cause is None and state == "FAILED":
            cause = node_failure(job.log) or (
                None if worker_started(job.log) else "the launch never started the worker"
            )
        if cause is None:
            if state == "CANCELLED":
                reason = (
                    "cancelled" if cancel_requested(job.id) else "cancelled outside llmb (scancel)"
                )
            elif state == "TIMEOUT":
                limit = job.details.get("slurm", {}).get("time_limit")
                reason = f"time limit reached ({limit})" if limit else "time limit reached"
            elif state == "FAILED":
                reason = f"Slurm: {slurm_state or 'the job failed'}" + (
                    f", {reason}" if reason else ""
                )
        return Ending(
            state,
            reason,
            infrastructure=cause,
            nodes=nodes,
            label=f"Slurm job {attempt['slurm_id']}",
            cluster_id=attempt["slurm_id"],
            record={
                "slurm_state": slurm_state,
                "slurm_id": attempt["slurm_id"],
                "nodes": nodes,
                "attempts": job.attempts,
            },
        )

    # ------------------------------------------------------------ retries

    def resubmit(self, job: Job, spec: RunSpec, exclude: tuple[str, ...]) -> Job:
        """A fresh Slurm job for ``spec`` (the core made its run directory), kept off ``exclude`` too."""
        slurm = dict(job.details["slurm"])
        slurm["exclude"] = sorted({*slurm.get("exclude", []), *exclude})
        job = replace(job, details={**job.details, "slurm": slurm})
        return self._submit_attempt(job, spec, first=False)

    def unhealthy_nodes(self, nodelist: str) -> list[str]:
        """The allocation's nodes Slurm now reports unhealthy (down, drained, failing): asked before a retry."""
        try:
            names = self.slurm.hostnames(nodelist)
            if not names:
                return []
            result = self.slurm.run(
                ["sinfo", "--noheader", "--Node", f"--nodes={','.join(names)}", "--format=%N %t"]
            )
        except QueryFailed:
            return []
        bad = set()
        for line in result.stdout.splitlines():
            name, _, node_state = line.partition(" ")
            if node_state.strip().rstrip("*~#!%$@^-").lower() not in _HEALTHY:
                bad.add(name.strip())
        return sorted(bad)

    # ------------------------------------------------------------ cancel, logs

    def cancel(self, job: Job) -> JobStatus:
        """scancel the job's current attempt (the core left the cancel marker first, and waits until it ended)."""
        slurm_id = self._current(job).get("slurm_id")
        try:
            if not slurm_id:
                slurm_id = self._look_up([job])[job.id]
                job = self._adopt(job, slurm_id) if slurm_id else job
            if not slurm_id:
                return self._nothing_to_cancel(job)
            self.slurm.scancel([slurm_id])
        # the core takes its cancel marker back: an end that follows is no cancel
        except QueryFailed as exc:
            raise LlmbError(
                f"{job.id} was not cancelled: {exc}. Run llmb cancel {job.id} again once Slurm "
                f"answers."
            ) from None
        return JobStatus(job, "RUNNING")

    def _nothing_to_cancel(self, job: Job) -> JobStatus:
        """A job Slurm holds nothing of: cancelling it stops nothing and ends its record."""
        reason = (
            f"nothing to stop: {self._unconfirmed(job)}, and Slurm holds no job with that marker"
        )
        return JobStatus(
            job,
            "CANCELLED",
            reason,
            None,
            ending=Ending(
                "CANCELLED",
                reason,
                prefer_log_reason=False,
                record={"slurm_state": "", "slurm_id": None, "nodes": "", "attempts": job.attempts},
            ),
        )

    def log_path(self, job: Job) -> str | None:
        return job.log


def worker_started(log: str) -> bool:
    """Whether the log holds anything from the worker (beyond llmb's own notes, the ranks' binding
    lines, and the errors of srun and slurmstepd, e.g. ``slurmstepd-node1: error: execve(): ...``)."""
    try:
        with open(log, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.strip() and not line.startswith(
                    (
                        "[llmb] warning:",
                        "[llmb] job ",
                        "[llmb] retry ",
                        "[llmb] rank ",
                        "[llmb] attempt ",
                        "srun: ",
                        "slurmstepd",
                        'Try "srun --help"',
                    )
                ):
                    return True
    except OSError:
        return False
    return False


NODE_FAILURE_LINES = ("srun: error: Node failure on ", "DUE TO NODE FAILURE")
NODE_FAILURE_TAIL = 64 * 1024  # srun's last words are at the end of the log


def node_failure(log: str) -> str | None:
    """Whether srun or slurmstepd wrote, at the end of the log, that a node was
    lost under the job step: the batch script can exit (FAILED) before
    slurmctld records NODE_FAIL, and it is the same infrastructure failure."""
    tail = read_tail(log, NODE_FAILURE_TAIL).decode("utf-8", errors="replace")
    for line in tail.splitlines():
        if line.startswith(("srun: ", "slurmstepd")) and any(
            words in line for words in NODE_FAILURE_LINES
        ):
            return "node failure (reported by srun)"
    return None


def _note(log: str, text: str) -> None:
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(f"[llmb] {text}\n")
