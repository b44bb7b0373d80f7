"""The Run:ai backend: submit, track, cancel, read logs.

The job record keeps the workload's kind, id and name and the project and
cluster it runs in (``job.details["runai"]``), never a credential: every
later command authenticates again from the settings. Status is the
workload's ``actualPhase``; there is no logs endpoint, so the log is read
from the PVC, where the pods write it, when ``PVC_DIR`` is reachable here.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace

from llmb import (
    TERMINAL,
    Ending,
    Job,
    JobStatus,
    LlmbError,
    RunSpec,
    SubmitOptions,
    UsageError,
    cancel_requested,
    install_dir,
)

from llmb_backend_runai import settings as runai_settings
from llmb_backend_runai import workload
from llmb_backend_runai.client import RunaiClient, RunaiError

UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")

# actualPhase -> llmb state. Unknown is what Run:ai shows while pods start: not a failure.
PHASES = {
    "Creating": "QUEUED",
    "Initializing": "QUEUED",
    "Pending": "QUEUED",
    "Resuming": "QUEUED",
    "Unknown": "QUEUED",
    "Running": "RUNNING",
    "Updating": "RUNNING",
    "Degraded": "RUNNING",
    "Stopping": "RUNNING",
    "Terminating": "RUNNING",
    "Deleting": "RUNNING",
    "Completed": "SUCCEEDED",
    "Failed": "FAILED",
    "Stopped": "CANCELLED",
}


def llmb_state(phase: str | None) -> str:
    return PHASES.get(phase or "", "UNKNOWN")


class RunaiBackend:
    name = "runai"
    cancel_wait_s, cancel_poll_s = 120.0, 1.0  # how the core waits after a cancel

    def __init__(self, environ: dict | None = None):
        self.environ = os.environ if environ is None else environ
        self._client: RunaiClient | None = None

    def client(self, options: tuple[tuple[str, str], ...] = ()) -> RunaiClient:
        if self._client is None:
            self._client = RunaiClient(runai_settings.resolve(options, self.environ))
        return self._client

    # ------------------------------------------------------------ submit

    def _cluster(self, client: RunaiClient) -> str | None:
        """The cluster's id: RUNAI_CLUSTER as given when it is one, else looked up by name."""
        wanted = client.settings.cluster
        if wanted is None or UUID.match(wanted):
            return wanted
        clusters = client.clusters()
        for cluster in clusters:
            if cluster.get("name") == wanted:
                return str(cluster.get("uuid"))
        seen = ", ".join(f"{c.get('name')} ({c.get('uuid')})" for c in clusters) or "none"
        raise UsageError(
            f"Run:ai cluster {wanted!r} is not visible to application {client.settings.app_id!r}; the "
            f"clusters it can see: {seen}. Set RUNAI_CLUSTER to a name or id from these."
        )

    def _project(self, client: RunaiClient) -> tuple[str, str]:
        """(projectId, clusterId) of the named project; the error lists the projects the credentials see."""
        s = client.settings
        cluster = self._cluster(client)
        projects = client.projects()
        found = [
            p
            for p in projects
            if p.get("name") == s.project
            and (cluster is None or str(p.get("clusterId")) == cluster)
        ]
        if len(found) == 1:
            return str(found[0]["id"]), str(found[0]["clusterId"])
        seen = (
            ", ".join(f"{p.get('name')} (cluster {p.get('clusterId')})" for p in projects) or "none"
        )
        if not found:
            raise UsageError(
                f"Run:ai project {s.project!r}"
                + (f" on cluster {s.cluster}" if s.cluster else "")
                + f" is not visible to application {s.app_id!r}; the projects it can see: {seen}. "
                f"Set PROJECT_NAME (or --backend-opt project=NAME)."
            )
        raise UsageError(
            f"Run:ai project {s.project!r} exists on several clusters ({seen}); choose one with "
            f"RUNAI_CLUSTER=<name or id> (or --backend-opt cluster=...)."
        )

    def _image(self, spec: RunSpec, submit: SubmitOptions) -> str:
        if submit.image:
            return submit.image
        if spec.framework_config and spec.framework_config.get("container"):
            return spec.framework_config["container"]
        if not spec.container:
            raise UsageError(f"no container image is known for {spec.workload}: give --image.")
        return spec.container

    def _request(
        self,
        spec: RunSpec,
        submit: SubmitOptions,
        settings,
        project_id: str,
        cluster_id: str,
        mask: bool,
    ) -> tuple[RunSpec, str, dict]:
        if submit.bare or submit.mounts or submit.account or submit.partition or submit.additional:
            given = [
                f
                for f in submit.given()
                if f in ("--bare", "--mount", "--account", "--partition", "--additional")
            ]
            raise UsageError(
                f"the runai backend has no {', '.join(given)}: PVCs come from RUN_CONF_MOUNTS, "
                f"the project from PROJECT_NAME."
            )
        pod_spec = spec.relocated(install_dir(), settings.pvc_dir)  # paths as the pods see them
        kind, request = workload.body(
            pod_spec,
            settings,
            project_id,
            cluster_id,
            self._image(spec, submit),
            environ=self.environ,
            mask_secrets=mask,
        )
        return pod_spec, kind, request

    def submit(self, spec: RunSpec, job: Job, submit: SubmitOptions) -> Job:
        try:
            client = self.client(submit.extra)
            project_id, cluster_id = self._project(client)
            pod_spec, kind, request = self._request(
                spec, submit, client.settings, project_id, cluster_id, mask=False
            )
            created = client.create(kind, request)
        except (UsageError, RunaiError) as exc:  # nothing was created (the core removes the job)
            raise UsageError(str(exc)) from None
        workload_id = created.get("workloadId")
        if not workload_id:
            raise UsageError(
                client.hide(
                    f"Run:ai accepted the workload but answered no workloadId: {created}", 500
                )
            )
        details = {
            "runai": {
                "kind": kind,
                "workload_id": workload_id,
                "name": created.get("name") or request["name"],
                "project": client.settings.project,
                "project_id": project_id,
                "cluster_id": cluster_id,
                "base_url": client.settings.base_url,
                "settings": client.settings.public(),
            }
        }
        with open(spec.log, "a", encoding="utf-8") as handle:
            handle.write(
                f"[llmb] job {job.id}: Run:ai {kind} workload {details['runai']['name']} ({workload_id}) in "
                f"project {client.settings.project}; the pods write their log to {pod_spec.log}\n"
            )
        return replace(job, details=details, log=pod_spec.log)

    def describe(self, spec: RunSpec, job: Job, submit: SubmitOptions) -> dict:
        missing: list[str] = []  # a setting not given is shown by its name, and named a problem
        settings = runai_settings.resolve(submit.extra, self.environ, missing)
        project_id = f"<id of project {settings.project}>"
        cluster_id = settings.cluster or f"<cluster of project {settings.project}>"
        _, kind, request = self._request(spec, submit, settings, project_id, cluster_id, mask=True)
        grant = {
            "grantType": "client_credentials",
            "clientID": settings.app_id,
            "clientSecret": "***",
        }
        requests = [
            {"method": "POST", "url": f"{settings.base_url}/token", "body": grant},
            {"method": "GET", "url": f"{settings.base_url}/org-unit/projects"},
            {"method": "POST", "url": f"{settings.base_url}/workloads/{kind}", "body": request},
        ]
        import json

        text = "\n\n".join(
            f"{r['method']} {r['url']}"
            + (f"\n{json.dumps(r['body'], indent=2)}" if "body" in r else "")
            for r in requests
        )
        return {"backend": self.name, "requests": requests, "text": text, "problems": missing}

    # ------------------------------------------------------------ tracking

    def status(self, jobs: list[Job]) -> list[JobStatus]:
        return [self._status(job) for job in jobs]

    def _status(self, job: Job) -> JobStatus:
        info = job.details.get("runai") or {}
        try:
            client = self.client()
            found = client.workload(info["kind"], info["workload_id"])
        except (LlmbError, KeyError) as exc:
            return JobStatus(job, "UNKNOWN", f"cannot ask Run:ai ({exc}); the job is left alone")
        cancelled = cancel_requested(job.id)
        if found is None:  # deleted
            state, reason, phase = (
                "CANCELLED",
                "cancelled" if cancelled else "deleted outside llmb",
                "Deleted",
            )
        else:
            phase = found.get("actualPhase")
            state = llmb_state(phase)
            reason = found.get("phaseMessage") or None
            if phase == "Unknown":
                reason = "pods starting (Run:ai reports Unknown)"
            if state == "CANCELLED":
                reason = "cancelled" if cancelled else "stopped outside llmb"
        if state not in TERMINAL:
            return JobStatus(
                job,
                state,
                reason or (f"Run:ai: {phase}" if phase not in ("Running", None) else None),
            )
        if state == "FAILED":
            reason = self._failure(client, info, reason)
        return JobStatus(
            job,
            state,
            reason,
            ending=Ending(
                state,
                reason,
                record={
                    "runai_phase": phase,
                    "workload_id": info.get("workload_id"),
                    "log_reachable": os.path.exists(job.log),
                },
            ),
        )

    @staticmethod
    def _failure(client: RunaiClient, info: dict, message: str | None) -> str:
        """phaseMessage and the warning events: what Run:ai says went wrong."""
        try:
            message = message or client.phase_message(info["workload_id"])
            events = client.events(info["workload_id"])
        except LlmbError:
            events = []
        # Run:ai lists newest first
        events = sorted(events, key=lambda e: str(e.get("createdAt") or ""))
        warnings = [
            f"{e.get('reason')}: {e.get('message')}" for e in events if e.get("type") == "Warning"
        ]
        parts = [p for p in (message, *warnings[-3:]) if p]
        return "Run:ai: " + ("; ".join(parts) if parts else "the workload failed")

    # ------------------------------------------------------------ cancel, logs

    def cancel(self, job: Job) -> JobStatus:
        """Ask Run:ai to stop the workload (delete or suspend, as RUNAI_CANCEL says); the core left the
        cancel marker first (having found the job not ended), and waits until the workload ended."""
        info = job.details["runai"]
        client = self.client()
        if client.settings.cancel == "delete":
            client.delete(info["kind"], info["workload_id"])
        else:
            client.suspend(info["kind"], info["workload_id"])
        return JobStatus(job, "RUNNING")

    def log_path(self, job: Job) -> str | None:
        return job.log if os.path.exists(job.log) else None
