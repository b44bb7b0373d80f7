"""The Kubernetes backend: submit, track, cancel, bring the log home.

The job record keeps the JobSet's name, namespace and context and how the log comes here
(``job.details["kubernetes"]``), never a credential: every later command loads the kubeconfig
again. State comes from the JobSet's conditions and its pods' phases:

    JobSet / pods                                                     llmb
    spec.suspend (Kueue has not admitted it) or no pod yet            QUEUED (Kueue's or the scheduler's reason)
    a pod Pending (unschedulable, pulling its image, ...)             QUEUED (the scheduler's reason)
    pods Running                                                      RUNNING
    condition Completed                                               SUCCEEDED
    condition Failed; a pod ImagePullBackOff / ErrImagePull / ...     FAILED, the pod's reason named (OOMKilled,
                                                                      Evicted, the image, a node lost)
    gone (deleted by llmb cancel, or outside llmb)                    CANCELLED

With ``log: volume`` the pods append to the experiment's log, which this machine sees on the
install volume; with ``log: api`` each status copies what the leader pod has logged since into it.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

from llmb import (
    SECRET_VARIABLES,
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
    load_user_yaml_file,
)

from llmb_backend_kubernetes import manifest as manifests
from llmb_backend_kubernetes import settings as kube_settings


def yaml_dumper():
    import yaml

    return yaml.SafeDumper


JOBSET_GV = "jobset.x-k8s.io/v1alpha2"
KUEUE_GROUP = "kueue.x-k8s.io"
JOBSET_INSTALL = (
    "install the JobSet controller (kubectl apply --server-side -f "
    "https://github.com/kubernetes-sigs/jobset/releases/download/v0.12.0/manifests.yaml, JobSet's "
    "installation guide), then submit again; docs/kubernetes.md lists what the cluster needs"
)
KUEUE_INSTALL = (
    "install Kueue (Kueue's installation guide) and create the LocalQueue, or submit without a "
    "queue; docs/kubernetes.md lists what the cluster needs"
)
# a container waiting for one of these will not start by itself
IMAGE_PROBLEMS = ("ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull")
# what the node lifecycle controller and the kubelet say of a pod they ended (infrastructure)
NODE_LOST = ("NodeLost", "DeletionByTaintManager", "DeletionByPodGC", "TerminationByKubelet")


class KubernetesBackend:
    name = "kubernetes"
    cancel_wait_s, cancel_poll_s = 120.0, 1.0

    def __init__(self, environ: dict | None = None):
        self.environ = os.environ if environ is None else environ
        self._clients: dict = {}

    # ------------------------------------------------------------ settings, client

    def settings(self, options: tuple[tuple[str, str], ...] = (), missing=None):
        """The settings, the cluster file's ``kubernetes:`` section among their sources (the core has
        checked the file's keys when the run read it: docs/cluster-config.md)."""
        path = os.path.join(install_dir(), "cluster.yaml")
        import yaml

        section = {}
        try:
            data = load_user_yaml_file(path) if os.path.isfile(path) else None
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise UsageError(f"cannot read the cluster file {path}: {exc}") from None
        if isinstance(data, dict) and isinstance(data.get("kubernetes"), dict):
            section = data["kubernetes"]
        return kube_settings.resolve(options, self.environ, tuple(section.items()), path, missing)

    def client(self, settings):
        from llmb_backend_kubernetes.client import KubeClient

        key = repr(settings)
        if key not in self._clients:
            self._clients[key] = KubeClient(settings, self.environ)
        return self._clients[key]

    def _client_of(self, job: Job):
        info = job.details["kubernetes"]
        saved = dict(info.get("settings") or {})
        options = tuple(
            (k, str(v))
            for k, v in {
                "context": info.get("context")
                if info.get("context") != "in-cluster service account"
                else None,
                "namespace": info.get("namespace"),
                "volume": saved.get("volume"),
                # request_timeout: this command's (its variable, else the default)
                "allow_http": "1" if saved.get("allow_http") else None,
            }.items()
            if v
        )
        return self.client(kube_settings.resolve(options, self.environ, (), "the job record"))

    # ------------------------------------------------------------ submit

    def _image(self, spec: RunSpec, submit: SubmitOptions) -> str:
        if submit.image:
            return submit.image
        if spec.framework_config and spec.framework_config.get("container"):
            return spec.framework_config["container"]
        if not spec.container:
            raise UsageError(f"no container image is known for {spec.workload}: give --image.")
        return spec.container

    def _manifest(self, spec, submit, settings, namespace: str) -> tuple[RunSpec, dict]:
        if submit.bare:
            raise UsageError(
                "the kubernetes backend has no --bare: every pod runs the container image (--image)."
            )
        local = install_dir()
        pod_spec = spec.relocated(local, manifests.install_path(settings, local))
        name = manifests.jobset_name(spec)
        body = manifests.jobset(
            pod_spec,
            submit,
            settings,
            name=name,
            namespace=namespace,
            image=self._image(spec, submit),
            local_install=local,
            environ=self.environ,
        )
        return pod_spec, body

    def discover(self, client, settings) -> None:
        """Whether the server serves JobSets (and Kueue's LocalQueue, when a queue is asked for)."""
        served = client.resources(JOBSET_GV)
        if served is None or "jobsets" not in served:
            raise UsageError(
                f"the Kubernetes API server at {client.where} serves no JobSet resource "
                f"(jobsets.{JOBSET_GV.replace('/', ' ')}): {JOBSET_INSTALL}."
            )
        if settings.queue:
            versions = client.group_versions(KUEUE_GROUP)
            version = next(
                (
                    v
                    for v in versions or ()
                    if "localqueues" in (client.resources(f"{KUEUE_GROUP}/{v}") or ())
                ),
                None,
            )
            if version is None:
                raise UsageError(
                    f"queue {settings.queue!r} asks for Kueue, but the API server at {client.where} serves "
                    f"no Kueue LocalQueue ({KUEUE_GROUP}): {KUEUE_INSTALL}."
                )
            path = f"/apis/{KUEUE_GROUP}/{version}/namespaces/{client.namespace}/localqueues"
            if client.request("GET", f"{path}/{settings.queue}", ok=(200, 404)) is None:
                known = client.request("GET", path, ok=(200, 404)) or {}
                names = [
                    (q.get("metadata") or {}).get("name")
                    for q in known.get("items") or []
                    if isinstance(q, dict)
                ]
                raise UsageError(
                    f"Kueue has no LocalQueue {settings.queue!r} in namespace {client.namespace}; its "
                    f"LocalQueues there: {', '.join(n for n in names if n) or 'none'}. Set queue to one of "
                    f"them (kubectl get localqueues -n {client.namespace})."
                )

    def submit(self, spec: RunSpec, job: Job, submit: SubmitOptions) -> Job:
        from llmb_backend_kubernetes.client import KubeError

        try:
            settings = self.settings(submit.extra)
            client = self.client(settings)
            self.discover(client, settings)
            pod_spec, body = self._manifest(spec, submit, settings, client.namespace)
            created = client.create_jobset(body)
        except (UsageError, KubeError) as exc:  # nothing was created (the core removes the job)
            raise UsageError(str(exc)) from None
        name = (created.get("metadata") or {}).get("name") or body["metadata"]["name"]
        mode = manifests.log_mode(settings, install_dir())
        details = {
            "kubernetes": {
                "jobset": name,
                "namespace": client.namespace,
                "context": client.context_name,
                "server": client.host,
                "uid": (created.get("metadata") or {}).get("uid"),
                "log_from": mode,
                "pod_log": pod_spec.log,
                "settings": settings.public(),
            }
        }
        with open(spec.log, "a", encoding="utf-8") as handle:
            handle.write(
                f"[llmb] job {job.id}: Kubernetes JobSet {name} in namespace {client.namespace} "
                f"({client.where})"
                + (f", queue {settings.queue}" if settings.queue else "")
                + (
                    f"; the pods write their log to {pod_spec.log}\n"
                    if mode == "volume"
                    else "; the leader pod's log is copied here\n"
                )
            )
        return replace(job, details=details, log=pod_spec.log if mode == "volume" else job.log)

    def describe(self, spec: RunSpec, job: Job, submit: SubmitOptions) -> dict:
        """The manifest (YAML in ``text``, the object in ``manifest``); asks the server nothing."""
        import yaml

        missing: list[str] = []
        settings = self.settings(submit.extra, missing)
        namespace = settings.namespace
        if namespace is None:  # the context's, read from the kubeconfig here (nothing is sent)
            try:
                namespace = self.client(settings).namespace
            except LlmbError as exc:
                missing.append(str(exc))
                namespace = "<the context's namespace>"
        _, body = self._manifest(spec, submit, settings, namespace)
        notes = [
            f"# {name} is set here, but no Kubernetes Secret is named (secret:) to take it from: the\n"
            f"# pods run without it (llmb never puts a secret's value in a manifest).\n"
            for name in SECRET_VARIABLES
            if self.environ.get(name) and not settings.secret
        ]
        text = yaml.dump(body, Dumper=_Dumper, sort_keys=False, width=100)
        return {
            "backend": self.name,
            "manifest": body,
            "text": f"# kubectl create -f - (namespace {namespace})\n{''.join(notes)}{text}",
            "problems": missing,
        }

    # ------------------------------------------------------------ tracking

    def status(self, jobs: list[Job]) -> list[JobStatus]:
        return [self._status(job) for job in jobs]

    def _status(self, job: Job) -> JobStatus:
        info = job.details.get("kubernetes") or {}
        try:
            client = self._client_of(job)
            found = client.get_jobset(info["jobset"])
            pods = client.pods(info["jobset"]) if found is not None else []
        except (LlmbError, KeyError) as exc:
            return JobStatus(
                job, "UNKNOWN", f"cannot ask Kubernetes ({exc}); the job is left alone"
            )
        if info.get("log_from") == "api" and pods:
            self._copy_log(client, job, pods)
        if found is None or (found.get("metadata") or {}).get("deletionTimestamp"):
            if found is not None:
                return JobStatus(job, "RUNNING", "the JobSet is being deleted")
            cancelled = cancel_requested(job.id)
            reason = "cancelled" if cancelled else "the JobSet was deleted outside llmb"
            return self._ended(job, "CANCELLED", reason, {"jobset": info.get("jobset")})
        state, reason, infrastructure, culprit = judge(found, pods)
        if state == "FAILED" and reason and any(p in reason for p in IMAGE_PROBLEMS):
            # the kubelet would retry the pull for ever, holding the other pods' GPUs: end it
            try:
                client.delete_jobset(info["jobset"])
                reason += "; llmb deleted the JobSet (its pods held their GPUs)"
            except LlmbError:
                pass
        if state not in TERMINAL:
            return JobStatus(job, state, reason)
        return self._ended(
            job,
            state,
            reason,
            {"jobset": info.get("jobset"), "conditions": _conditions(found)},
            infrastructure,
            nodes=culprit
            or ",".join(sorted({p.get("spec", {}).get("nodeName") or "" for p in pods} - {""})),
        )

    def _ended(self, job, state, reason, record, infrastructure=None, nodes="") -> JobStatus:
        record = {**record, "log_reachable": os.path.exists(job.log)}
        return JobStatus(
            job,
            state,
            reason,
            ending=Ending(
                state,
                reason,
                infrastructure=infrastructure,
                nodes=nodes,
                label=f"JobSet {record.get('jobset')}",
                cluster_id=record.get("jobset"),
                record=record,
            ),
        )

    def _copy_log(self, client, job: Job, pods: list[dict]) -> None:
        """Append to the local log what the leader pod has logged beyond what was copied already."""
        leader = _leader(pods)
        if leader is None:
            return
        try:
            data = client.pod_log(leader["metadata"]["name"], manifests.CONTAINER)
        except LlmbError:
            return  # the next status tries again; what was copied stays
        if not data:
            return
        marker = job.log + ".copied"
        try:
            with open(marker, encoding="utf-8") as handle:
                copied = json.load(handle)
        except (OSError, ValueError):
            copied = {}
        pod = leader["metadata"]["name"]
        done = int(copied.get("bytes") or 0) if copied.get("pod") == pod else 0
        if len(data) <= done:
            return
        with open(job.log, "ab") as handle:
            handle.write(data[done:])
        tmp = marker + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump({"pod": pod, "bytes": len(data)}, handle)
        os.replace(tmp, marker)

    # ------------------------------------------------------------ cancel, logs

    def cancel(self, job: Job) -> JobStatus:
        """Delete the JobSet and, with it, its pods (propagation Foreground); the core left the
        cancel marker first and waits until the JobSet is gone."""
        client = self._client_of(job)
        client.delete_jobset(job.details["kubernetes"]["jobset"])
        return JobStatus(job, "RUNNING", "deleting the JobSet")

    def log_path(self, job: Job) -> str | None:
        return job.log if os.path.exists(job.log) else None


class _Dumper(yaml_dumper()):
    """YAML with the pods' script as a literal block (readable, and the same string)."""


def _literal(dumper, data: str):
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _literal)


# ---------------------------------------------------------------- judging


def _conditions(jobset: dict) -> dict[str, dict]:
    return {
        c.get("type"): c
        for c in (jobset.get("status") or {}).get("conditions") or []
        if isinstance(c, dict) and c.get("status") == "True"
    }


def _leader(pods: list[dict]) -> dict | None:
    def index(p):
        meta = p.get("metadata") or {}
        return str(
            (meta.get("annotations") or {}).get("batch.kubernetes.io/job-completion-index")
            or (meta.get("labels") or {}).get("batch.kubernetes.io/job-completion-index")
            or ""
        )

    named = [p for p in pods if index(p) == "0"]
    return (
        (named or sorted(pods, key=lambda p: (p.get("metadata") or {}).get("name") or ""))[0]
        if pods
        else None
    )


def pod_problem(pod: dict) -> tuple[str | None, str | None]:
    """(what went wrong with the pod, in words; the infrastructure cause or None)."""
    name = (pod.get("metadata") or {}).get("name")
    status = pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    on = f" on node {node}" if node else ""
    if status.get("reason") == "Evicted":
        said = status.get("message") or "the kubelet evicted it"
        return f"pod {name} was evicted{on}: {said}", f"pod {name} evicted ({said})"
    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            why = condition.get("reason") or "DisruptionTarget"
            said = f"{why}: {condition.get('message') or 'the node stopped answering'}"
            if why in NODE_LOST or status.get("reason") in NODE_LOST:
                return (
                    f"pod {name}: its node{(' ' + node) if node else ''} was lost ({said})",
                    f"pod {name}: its node lost ({said})",
                )
            return f"pod {name} was disrupted{on} ({said})", f"pod {name} disrupted ({said})"
    if status.get("reason") in NODE_LOST:
        said = status.get("message") or status.get("reason")
        return (
            f"pod {name}: its node{(' ' + node) if node else ''} was lost ({said})",
            f"pod {name}: its node lost ({said})",
        )
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in IMAGE_PROBLEMS:
            return (
                f"pod {name} cannot pull its image {container.get('image') or ''} ({waiting['reason']}: "
                f"{waiting.get('message') or 'the pull failed'})".replace("  ", " "),
                None,
            )
        terminated = state.get("terminated") or {}
        if terminated and terminated.get("exitCode", 0) != 0:
            why = terminated.get("reason") or "Error"
            words = (
                "was killed for running out of memory (OOMKilled)"
                if why == "OOMKilled"
                else f"exited with {terminated.get('exitCode')} ({why})"
            )
            return f"pod {name}{on}: container {container.get('name')} {words}", None
    if status.get("phase") == "Failed":
        return (
            f"pod {name} failed{on}: {status.get('message') or status.get('reason') or 'no reason given'}",
            None,
        )
    return None, None


def _pending_reason(pod: dict) -> str:
    name = (pod.get("metadata") or {}).get("name")
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return (
                f"pod {name} is not scheduled: {condition.get('reason') or 'Pending'}: "
                f"{condition.get('message') or ''}"
            ).rstrip(": ")
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return f"pod {name} is starting ({waiting['reason']})"
    return f"pod {name} is Pending"


def judge(jobset: dict, pods: list[dict]) -> tuple[str, str | None, str | None, str | None]:
    """(llmb state, reason, infrastructure cause, the node it happened on) from the JobSet and its
    pods. The cause, when there is one, names the pod and what happened to it (the core adds where)."""
    conditions = _conditions(jobset)
    problems = [
        (*found, (pod.get("spec") or {}).get("nodeName"))
        for pod in pods
        if (found := pod_problem(pod))[0]
    ]
    # the infrastructure's first: a pod that failed after its node was lost says less
    problems.sort(key=lambda p: p[1] is None)
    if "Completed" in conditions:
        return "SUCCEEDED", None, None, None
    if "Failed" in conditions:
        said = conditions["Failed"]
        base = f"JobSet failed ({said.get('reason') or 'Failed'}: {said.get('message') or ''})".replace(
            ": )", ")"
        )
        if problems:
            reason, cause, node = problems[0]
            return "FAILED", f"{reason}; {base}", cause, node if cause else None
        return "FAILED", base, None, None
    image = [p for p in problems if any(s in p[0] for s in IMAGE_PROBLEMS)]
    if image:
        return "FAILED", image[0][0], None, None
    suspended = (jobset.get("spec") or {}).get("suspend") or "Suspended" in conditions
    if suspended:
        queue = ((jobset.get("metadata") or {}).get("labels") or {}).get(manifests.QUEUE_LABEL)
        said = conditions.get("Suspended", {}).get("message")
        return (
            "QUEUED",
            f"waiting for Kueue to admit it (queue {queue})"
            if queue
            else f"suspended{': ' + said if said else ''}",
            None,
            None,
        )
    if not pods:
        return "QUEUED", "waiting for the JobSet's pods to be created", None, None
    pending = [p for p in pods if (p.get("status") or {}).get("phase") in (None, "Pending")]
    if problems and not pending:
        return "RUNNING", f"{problems[0][0]}; waiting for the JobSet to end", None, None
    if pending:
        return "QUEUED", _pending_reason(pending[0]), None, None
    return "RUNNING", None, None, None
