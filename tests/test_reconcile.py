"""The core owns a job's end (``llmb.lifecycle.reconcile``): a backend reports what it sees (a
``JobStatus`` with an ``Ending``), and the core records it once, retries it when the backend can
and the failure is worth it, and saves a record the backend updated. The backend here is a
minimal implementation of the contract (``llmb.backends.BackendImpl``) over real job records,
run directories and logs."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from llmb.backends import Backend
from llmb.lifecycle import reconcile
from llmb.plugins.host import PluginHost
from llmb.runs import experiment
from llmb.runs.jobs import (
    Ending,
    Job,
    JobStatus,
    job_dir,
    load_job,
    new_job_dir,
    now,
    read_exit,
    save_job,
)
from llmb.runs.runspec import RunSpec

NCCL = "Some NCCL operations have failed or timed out."


class Cluster:
    """A backend that reports the states a test gives it and records what the core asks of it."""

    name = "toy"
    cancel_wait_s, cancel_poll_s = 5.0, 0.01

    def __init__(self, retries: bool = True):
        self.seen: dict[str, JobStatus] = {}
        self.asked: list[list[str]] = []
        self.resubmitted: list[tuple[str, str, tuple[str, ...]]] = []
        self.cancelled: list[str] = []
        if not retries:
            self.resubmit = None

    def status(self, jobs):
        self.asked.append([job.id for job in jobs])
        return [self.seen.get(job.id) or JobStatus(job, "RUNNING") for job in jobs]

    def resubmit(self, job, spec, exclude):
        self.resubmitted.append((job.id, spec.log, exclude))
        return replace(job, attempts=job.attempts + 1, run_dir=spec.run_dir, log=spec.log)

    def unhealthy_nodes(self, nodes):
        return [n for n in nodes.split(",") if n == "node2"]

    def cancel(self, job):
        self.cancelled.append(job.id)
        self.seen[job.id] = JobStatus(
            job, "CANCELLED", ending=Ending("CANCELLED", "cancelled", prefer_log_reason=False)
        )
        return JobStatus(job, "RUNNING")

    def describe(self, spec, job, submit):
        return {}

    def log_path(self, job):
        return job.log


@pytest.fixture
def cluster(install_root) -> tuple[PluginHost, Cluster]:
    impl = Cluster()

    class Plugin:
        @staticmethod
        def llmb_backends():
            return [Backend("toy", "a test cluster", lambda: impl)]

    from llmb import hookimpl

    Plugin.llmb_backends = hookimpl(Plugin.llmb_backends)
    host = PluginHost(discover=False, extra_plugins=[("toy", Plugin)])
    return host, impl


def submitted(retries: int = 1, log_text: str = "") -> Job:
    """A job as the core's submit leaves it: record, run directory, run.json, log."""
    job_id, directory = new_job_dir("toy")
    where = experiment.create(
        "llama31", "pretrain_llama3.1_8b_h100_bf16_gpus1_tp1_pp1_cp1_vpNone_mbs1_gbs8"
    )
    spec = RunSpec(
        job_id=job_id,
        workload="llama31",
        variant="megatron_bridge",
        framework="megatron_bridge",
        engine="torch",
        size="8b",
        arch={},
        proxy="tiny",
        gpu="h100",
        dtype="bf16",
        compute_dtype="float32",
        device="cpu",
        ranks=1,
        mbs=1,
        ga=8,
        gbs=8,
        seq_len=64,
        steps=3,
        seed=0,
        compile=False,
        flops_per_sample=0.0,
        experiment=os.path.basename(os.path.dirname(where.run_dir)),
        run_dir=where.run_dir,
        inner_dir=where.inner,
        log=where.log,
    )
    experiment.write_json(os.path.join(directory, "run.json"), spec.to_dict())
    experiment.write_json(where.recipe_file, {"job_id": job_id})
    Path(where.log).write_text(log_text)
    job = Job(
        id=job_id,
        backend="toy",
        workload="llama31",
        experiment=spec.experiment,
        run_dir=where.run_dir,
        log=where.log,
        ranks=1,
        submitted_at=now(),
        proxy="tiny",
        retries=retries,
        details={"attempts": [{"attempt": 1, "cluster_id": "41"}]},
    )
    save_job(job)
    return job


def test_an_ending_is_recorded_once_and_then_costs_the_backend_nothing(cluster):
    host, impl = cluster
    job = submitted()
    impl.seen[job.id] = JobStatus(
        job, "SUCCEEDED", ending=Ending("SUCCEEDED", record={"nodes": "node1"})
    )
    first = reconcile.status(host, job)
    assert (first.state, first.exit["nodes"]) == ("SUCCEEDED", "node1")
    assert read_exit(job.id)["state"] == "SUCCEEDED"
    again = reconcile.statuses(host, [job])
    # the second look read exit.json only
    assert again[0].state == "SUCCEEDED" and impl.asked == [[job.id]]


def test_a_flaky_failure_is_resubmitted_by_the_core_into_a_fresh_run_directory(cluster):
    host, impl = cluster
    job = submitted(retries=1, log_text=f"RuntimeError: {NCCL}\n")
    impl.seen[job.id] = JobStatus(
        job,
        "FAILED",
        ending=Ending(
            "FAILED", "exit code 1", nodes="node1,node2", label="toy job 41", cluster_id="41"
        ),
    )
    status = reconcile.status(host, job)
    assert status.state == "QUEUED" and status.reason == (
        f"flaky failure: {NCCL!r} on node1,node2; retried as attempt 2"
    )
    ((job_id, new_log, exclude),) = impl.resubmitted
    assert exclude == ("node2",) and new_log != job.log and read_exit(job.id) is None
    saved = load_job(job.id)
    assert saved.attempts == 2 and saved.details["attempts"][0]["ended"] == status.reason
    fresh_recipe = json.loads(Path(saved.run_dir, "recipe.json").read_text())
    assert (fresh_recipe["attempt"], fresh_recipe["retry_of"]) == (2, "41")
    assert (
        f"attempt 1 (toy job 41) ended: {status.reason}, a fresh job, excluding node2: {new_log}"
        in Path(job.log).read_text()
    )
    assert (
        Path(new_log).read_text().startswith("[llmb] retry of attempt 1 (toy job 41, flaky failure")
    )


def test_the_last_allowed_attempt_is_recorded_with_its_cause(cluster):
    host, impl = cluster
    job = replace(submitted(retries=1, log_text=f"RuntimeError: {NCCL}\n"), attempts=2)
    save_job(job)
    impl.seen[job.id] = JobStatus(
        job, "FAILED", ending=Ending("FAILED", "exit code 1", nodes="node1")
    )
    status = reconcile.status(host, job)
    assert (
        status.state == "FAILED"
        and status.reason == f"flaky failure: {NCCL!r} on node1 (after 1 retry)"
    )
    assert not impl.resubmitted and read_exit(job.id)["reason"] == status.reason


def test_an_infrastructure_failure_without_retries_left_is_infra_failed(cluster):
    host, impl = cluster
    job = submitted(retries=0)
    impl.seen[job.id] = JobStatus(
        job, "FAILED", ending=Ending("FAILED", "x", infrastructure="NODE_FAIL", nodes="node3")
    )
    status = reconcile.status(host, job)
    assert (status.state, status.reason) == ("INFRA_FAILED", "NODE_FAIL on node3")


def test_a_backend_that_cannot_resubmit_gets_its_own_reason_recorded(install_root):
    impl = Cluster(retries=False)

    class Plugin:
        pass

    from llmb import hookimpl

    Plugin.llmb_backends = staticmethod(
        hookimpl(lambda: [Backend("toy", "no retries", lambda: impl)])
    )
    host = PluginHost(discover=False, extra_plugins=[("toy", Plugin)])
    job = submitted(retries=3, log_text=f"RuntimeError: {NCCL}\n")
    impl.seen[job.id] = JobStatus(
        job, "FAILED", ending=Ending("FAILED", "exit code 1", prefer_log_reason=False)
    )
    status = reconcile.status(host, job)
    assert (status.state, status.reason) == ("FAILED", "exit code 1") and not impl.resubmitted


def test_a_record_the_backend_updated_is_saved_unless_another_shell_changed_it(cluster):
    host, impl = cluster
    job = submitted()
    found = replace(job, details={**job.details, "found": "42"})
    impl.seen[job.id] = JobStatus(found, "RUNNING")
    assert reconcile.status(host, job).job == found and load_job(job.id) == found
    other = replace(found, details={**found.details, "other": True})
    save_job(other)  # another shell's update
    impl.seen[job.id] = JobStatus(replace(found, details={"mine": 1}), "RUNNING")
    assert reconcile.status(host, found).job == other and load_job(job.id) == other


def test_an_ending_another_shell_recorded_meanwhile_is_not_recorded_again(cluster):
    host, impl = cluster
    job = submitted()
    impl.seen[job.id] = JobStatus(job, "SUCCEEDED", ending=Ending("SUCCEEDED"))
    from llmb.runs.jobs import write_exit

    stale = impl.status  # the backend answered before the other shell wrote exit.json

    def answer_then_record(jobs):
        seen = stale(jobs)
        write_exit(job.id, {"state": "CANCELLED", "reason": "by the other shell"})
        return seen

    impl.status = answer_then_record
    status = reconcile.status(host, job)
    assert (status.state, status.reason) == ("CANCELLED", "by the other shell")


def test_cancel_waits_until_the_core_sees_the_job_ended(cluster):
    host, impl = cluster
    job = submitted()
    status = reconcile.cancel(host, job)
    assert impl.cancelled == [job.id] and (status.state, status.reason) == (
        "CANCELLED",
        "cancelled",
    )
    assert read_exit(job.id)["state"] == "CANCELLED"
    assert os.path.isdir(job_dir(job.id))


def test_a_running_job_without_a_step_says_what_its_log_last_said(cluster):
    """Issue 34: ``status JOB`` showed nothing for a running job until its first step (start-up can
    take minutes: containers, data, compilation). Its progress is the log's last line until then,
    terminal escapes removed; an iteration replaces it."""
    host, _ = cluster
    job = submitted(
        log_text="[llmb] rank 0: building the model\n\x1b]0;title\x07compiling layer 3\n\n"
    )
    status = reconcile.status(host, job)
    assert status.state == "RUNNING"
    assert status.progress == "starting, no step yet; the log's last line: compiling layer 3"
    Path(job.log).write_text("")
    assert reconcile.status(host, job).progress == "starting: the log is empty so far"
    Path(job.log).write_text(" iteration        2/      50 | consumed samples: 16 |\n")
    assert reconcile.status(host, job).progress == "iteration 2/50"
