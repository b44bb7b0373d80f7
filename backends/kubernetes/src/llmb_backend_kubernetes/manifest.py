"""The JobSet a run becomes (``jobset.x-k8s.io/v1alpha2``, JobSet's API reference).

One replicated job, ``node``, of one Indexed Job with as many pods as the run has nodes
(``parallelism = completions = nodes``, ``backoffLimit`` 0, ``restartPolicy`` Never, the JobSet's
``failurePolicy.maxRestarts`` 0: a benchmark that failed is not retried in place). Each pod asks for
the node's GPUs (``nvidia.com/gpu``) and the RDMA resources the settings name, and runs ``torchrun``
over its GPUs, node rank ``$JOB_COMPLETION_INDEX`` (the Indexed Job's), rendezvous at the leader
pod's stable DNS name ``<jobset>-node-0-0.<jobset>``: JobSet names a pod's hostname
``<jobset>-<replicatedJob>-<job index>-<pod index>`` and puts it in the headless service named as
the JobSet (``network.enableDNSHostnames``, the subdomain's default).

The run spec travels inside the command (zlib, base64), with its paths as the pods see the install
directory; the worker is imported from ``<install path>/python`` (``llmb install``). The ranks'
environment is the Slurm backend's (the reference launcher's, ``llmb_backend_slurm.launch_settings``)
with the cluster file's ``env`` and the run's own; a secret is never a value here, only a reference
to a Kubernetes Secret by name.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shlex
import zlib

from llmb import SECRET_VARIABLES, RunSpec, SubmitOptions, UsageError, env_name_problem

from llmb_backend_kubernetes.settings import KubeSettings

API_VERSION = "jobset.x-k8s.io/v1alpha2"
REPLICATED_JOB = "node"
CONTAINER = "llmb"
PORT = 29500
RUN_FILE_IN_POD = "/tmp/llmb-run.json"  # noqa: S108 - inside the pod
NAME_LIMIT = 40  # the longest pod name (name-node-0-<index>-xxxxx) stays a 63-character DNS label
NAME_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
JOB_LABEL = "llmb.nvidia.com/job"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def docker_image(reference: str) -> str:
    """``nvcr.io#nvidia/nemo:25.04.01`` (the seeds' pyxis form) -> ``nvcr.io/nvidia/nemo:25.04.01``."""
    if reference.endswith(".sqsh") or reference.startswith("/"):
        raise UsageError(
            f"image {reference!r} is an enroot squashfs file, which Kubernetes cannot run: give the "
            f"registry image (registry#repo:tag or registry/repo:tag) with --image or the cluster file's "
            f"images."
        )
    return reference.replace("#", "/", 1)


def jobset_name(spec: RunSpec) -> str:
    """``llmb-<workload>-<job id>-<random>``: a DNS-1035 label of at most 40 characters, new for
    each submission (a name llmb can look the JobSet up by when the answer to the POST is lost)."""
    job = re.sub(r"[^a-z0-9-]+", "-", spec.job_id.split("-")[-1].lower()).strip("-")[:10]
    tail = f"{job}-{''.join(secrets.choice(NAME_ALPHABET) for _ in range(5))}".lstrip("-")
    head = re.sub(r"[^a-z0-9-]+", "-", f"llmb-{spec.workload}".lower()).strip("-")
    return f"{head[: NAME_LIMIT - len(tail) - 1].rstrip('-')}-{tail}"


def leader_host(name: str) -> str:
    return f"{name}-{REPLICATED_JOB}-0-0.{name}"


def install_path(settings: KubeSettings, local_install: str) -> str:
    return settings.install_path or local_install


def log_mode(settings: KubeSettings, local_install: str) -> str:
    """``volume`` (the pods append to the log in the experiment directory, which this machine sees
    at the same path) or ``api`` (the pods write to their container log; llmb copies the leader's)."""
    if settings.log:
        return settings.log
    return "volume" if install_path(settings, local_install) == local_install else "api"


def pod_script(spec: RunSpec, settings: KubeSettings, name: str, to_file: bool) -> str:
    """What every pod runs: unpack the run spec, then torchrun over its GPUs."""
    packed = base64.b64encode(
        zlib.compress(json.dumps(spec.to_dict(), separators=(",", ":")).encode(), 9)
    ).decode()
    q = shlex.quote
    python = q(settings.python)
    per_pod = spec.ranks_per_node or spec.ranks
    unpack = "import sys, zlib, base64; sys.stdout.buffer.write(zlib.decompress(base64.b64decode(sys.stdin.read())))"
    out = f" >> {q(spec.log)} 2>&1" if to_file else " 2>&1"
    lines = ["set -euo pipefail"]
    if to_file:
        lines.append(f"mkdir -p {q(os.path.dirname(spec.log))}")
    lines += [
        f"printf %s {packed} | {python} -c {q(unpack)} > {RUN_FILE_IN_POD}",
        f'echo "[llmb] job {spec.job_id}: pod ${{JOB_COMPLETION_INDEX}} of {spec.nodes} on $(hostname)"'
        + (f" >> {q(spec.log)}" if to_file else ""),
        f"exec {python} -m torch.distributed.run --nnodes={spec.nodes} "
        f'--node_rank="${{JOB_COMPLETION_INDEX}}" --nproc_per_node={per_pod} '
        f"--master_addr={leader_host(name)} --master_port={PORT} -m llmb.worker {RUN_FILE_IN_POD}"
        + out,
    ]
    return "\n".join(lines)


def environment(
    spec: RunSpec, submit: SubmitOptions, settings: KubeSettings, pythonpath: str, environ: dict
) -> list[dict]:
    """The container's variables: the Slurm backend's ranks' settings, the cluster file's, the run's,
    then llmb's; secrets only by reference to the Secret ``settings.secret``."""
    from llmb_backend_slurm import launch_settings

    secret_names = list(
        dict.fromkeys([*(n for n in SECRET_VARIABLES if environ.get(n)), *submit.secrets])
    )
    if secret_names and not settings.secret:
        asked = [n for n in submit.secrets]
        if asked:
            raise UsageError(
                f"--secret {', '.join(asked)}: the kubernetes backend passes a secret only by reference to a "
                f"Kubernetes Secret, never its value: create one (kubectl create secret generic llmb-secrets "
                f"--from-literal={asked[0]}=...) and name it with secret: in the cluster file's kubernetes "
                f"section (or LLMB_KUBE_SECRET)."
            )
        secret_names = []  # HF_TOKEN here without a Secret to take it from: the pods go without it
    row = launch_settings.row_of(
        spec.framework, spec.workload, spec.size, spec.gpu, spec.ranks, spec.framework_config
    )
    env = dict(launch_settings.rank_env(spec.gpu, "HF_TOKEN" in secret_names, row))
    for key, value in submit.cluster_env:
        if problem := env_name_problem(key, "the cluster file's environment variable"):
            raise UsageError(problem)
        if key in SECRET_VARIABLES or key in submit.secrets:
            raise UsageError(
                f"the cluster file's environment sets {key}, a secret: it would be written into the "
                f"JobSet. Put it in the Kubernetes Secret named by secret: instead."
            )
        env[key] = str(value)
    env.update({k: str(v) for k, v in spec.env.items()})
    env["LLMB_JOB_ID"] = spec.job_id
    env["PYTHONPATH"] = pythonpath
    out = [{"name": k, "value": v} for k, v in sorted(env.items()) if k not in secret_names]
    out += [
        {
            "name": n,
            "valueFrom": {
                "secretKeyRef": {
                    "name": settings.secret,
                    "key": n,
                    "optional": n in SECRET_VARIABLES,
                }
            },
        }
        for n in secret_names
    ]
    return out


def volumes(settings: KubeSettings, submit: SubmitOptions, mount_at: str) -> tuple[list, list]:
    """(volumes, volumeMounts): the install directory, the cluster's extra mounts (host paths), and a
    memory-backed /dev/shm (NCCL's and the data loaders' shared memory)."""
    v = settings.volume
    source = (
        {"persistentVolumeClaim": {"claimName": v.source}}
        if v.kind == "pvc"
        else {"hostPath": {"path": v.source, "type": "Directory"}}
    )
    vols = [{"name": "llmb-install", **source}, {"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    mounts = [
        {"name": "llmb-install", "mountPath": mount_at},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    for index, item in enumerate(submit.mounts):
        parts = item.split(":")
        src, dst = parts[0], parts[1]
        read_only = len(parts) > 2 and parts[2] == "ro"
        vols.append({"name": f"mount-{index}", "hostPath": {"path": src}})
        mounts.append({"name": f"mount-{index}", "mountPath": dst, "readOnly": read_only})
    return vols, mounts


def jobset(
    spec: RunSpec,
    submit: SubmitOptions,
    settings: KubeSettings,
    *,
    name: str,
    namespace: str,
    image: str,
    local_install: str,
    environ: dict,
) -> dict:
    """The JobSet for ``spec`` (already moved to the pods' paths)."""
    mount_at = install_path(settings, local_install)
    to_file = log_mode(settings, local_install) == "volume"
    gpus = spec.ranks_per_node or spec.ranks
    resources = {"nvidia.com/gpu": str(gpus), **{k: str(n) for k, n in settings.rdma}}
    vols, mounts = volumes(settings, submit, mount_at)
    labels = {JOB_LABEL: spec.job_id, "app.kubernetes.io/managed-by": "llmb"}
    container = {
        "name": CONTAINER,
        "image": docker_image(image),
        "command": ["bash", "-c", pod_script(spec, settings, name, to_file)],
        "env": environment(spec, submit, settings, f"{mount_at}/python", environ),
        "ports": [{"containerPort": PORT, "name": "rendezvous", "protocol": "TCP"}],
        "resources": {"limits": resources, "requests": dict(resources)},
        "volumeMounts": mounts,
    }
    if settings.rdma:
        # RDMA needs pinned memory: the verbs library locks the buffers it registers
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    pod_spec: dict = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": vols,
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    if settings.image_pull_secret:
        pod_spec["imagePullSecrets"] = [{"name": settings.image_pull_secret}]
    if settings.priority_class:
        pod_spec["priorityClassName"] = settings.priority_class
    if settings.service_account:
        pod_spec["serviceAccountName"] = settings.service_account
    metadata: dict = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if settings.queue:
        metadata["labels"][QUEUE_LABEL] = settings.queue
    manifest = {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "failurePolicy": {"maxRestarts": 0},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [REPLICATED_JOB]},
            "replicatedJobs": [
                {
                    "name": REPLICATED_JOB,
                    "replicas": 1,
                    "template": {
                        "metadata": {"labels": dict(labels)},
                        "spec": {
                            "parallelism": spec.nodes,
                            "completions": spec.nodes,
                            "completionMode": "Indexed",
                            "backoffLimit": 0,
                            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
                        },
                    },
                }
            ],
        },
    }
    if settings.queue:
        manifest["spec"]["suspend"] = True  # Kueue starts it once admitted
    return manifest
