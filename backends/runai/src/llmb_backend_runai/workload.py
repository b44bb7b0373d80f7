"""The Run:ai workload a run becomes.

Several nodes: a distributed PyTorch workload (``POST /workloads/distributed``):
the master plus ``numWorkers`` workers, all with the same spec
(``masterSpecSameAsWorker``), so ``numWorkers = nodes - 1``; the training
operator gives every pod ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE`` (pods)
and ``RANK`` (pod index). One node: a training (``POST /workloads/trainings``).
Each pod runs ``torchrun`` over its GPUs, which starts ``llmb.worker`` once per
GPU. ``backoffLimit`` 0 and ``restartPolicy`` Never: a benchmark that failed is
not retried in place.

The run spec travels inside the command (zlib, base64): the pods need no file
from this machine. Paths under ``$LLMB_INSTALL`` become paths under
``PVC_DIR``, where the pods write the log. Run:ai caps ``args`` near 10 000
characters; a longer command is refused here, before anything is sent.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shlex
import zlib

from llmb import SECRET_VARIABLES, RunSpec, UsageError

from llmb_backend_runai.settings import RunaiSettings

ARGS_LIMIT = 10_000
RUN_FILE_IN_POD = "/tmp/llmb-run-$$.json"  # noqa: S108 - inside the pod ($$: one per pod even on a shared /tmp)
MASKED = "***"
NAME_LIMIT = 40
NAME_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def docker_image(reference: str) -> str:
    """``nvcr.io#nvidia/nemo:25.04.01`` (the seeds' pyxis form) -> ``nvcr.io/nvidia/nemo:25.04.01``."""
    return reference.replace("#", "/", 1)


def pod_script(spec: RunSpec, settings: RunaiSettings) -> str:
    """What every pod runs: unpack the run spec, then torchrun over its GPUs, output to the log on the PVC."""
    packed = base64.b64encode(
        zlib.compress(json.dumps(spec.to_dict(), separators=(",", ":")).encode(), 9)
    ).decode()
    python = shlex.quote(settings.python)
    per_pod = spec.ranks_per_node or spec.ranks
    unpack = "import sys, zlib, base64; sys.stdout.buffer.write(zlib.decompress(base64.b64decode(sys.stdin.read())))"
    q = shlex.quote
    return "\n".join(
        [
            "set -euo pipefail",
            f"mkdir -p {q(os.path.dirname(spec.log))}",
            f"printf %s {packed} | {python} -c {q(unpack)} > {RUN_FILE_IN_POD}",
            f"export PYTHONPATH={q(settings.pvc_dir + '/python')}${{PYTHONPATH:+:$PYTHONPATH}}",
            f'echo "[llmb] job {spec.job_id}: pod ${{RANK:-0}} of ${{WORLD_SIZE:-1}} on $(hostname)" >> {q(spec.log)}',
            f'exec {python} -m torch.distributed.run --nnodes="${{WORLD_SIZE:-1}}" --node_rank="${{RANK:-0}}" '
            f'--nproc_per_node={per_pod} --master_addr="${{MASTER_ADDR:-127.0.0.1}}" '
            f'--master_port="${{MASTER_PORT:-29500}}" -m llmb.worker {RUN_FILE_IN_POD} >> {q(spec.log)} 2>&1',
        ]
    )


def workload_name(spec: RunSpec) -> str:
    """``llmb-<workload>-<job id>-<random>``, a DNS-1123 label of at most 40 characters, new for each submission.

    It is sent as the exact name (``useGivenNameAsPrefix: false``): llmb can find
    the workload by it when the answer to the POST is lost, and Run:ai refuses a
    second workload of that name (409) instead of creating one."""
    job = re.sub(r"[^a-z0-9-]+", "-", spec.job_id.split("-")[-1].lower()).strip("-")[:12]
    tail = f"{job}-{''.join(secrets.choice(NAME_ALPHABET) for _ in range(6))}".lstrip("-")
    head = re.sub(r"[^a-z0-9-]+", "-", f"llmb-{spec.workload}".lower()).strip("-")
    return f"{head[: NAME_LIMIT - len(tail) - 1].rstrip('-')}-{tail}"


def body(
    spec: RunSpec,
    settings: RunaiSettings,
    project_id: str,
    cluster_id: str,
    image: str,
    *,
    environ: dict,
    mask_secrets: bool = False,
) -> tuple[str, dict]:
    """(kind, request body) for ``spec`` (already moved to the PVC's paths)."""
    args = "-c " + shlex.quote(pod_script(spec, settings))
    if len(args) > ARGS_LIMIT:
        raise UsageError(
            f"the pods' command is {len(args):,} characters; Run:ai accepts at most {ARGS_LIMIT:,} in "
            f"args. The run spec is what makes it long: shorten the --env values or the paths "
            f"(PVC_DIR), or run fewer overrides."
        )
    env = dict(spec.env)
    env["LLMB_JOB_ID"] = spec.job_id
    hidden = {name: environ[name] for name in SECRET_VARIABLES if environ.get(name)}
    variables = [{"name": k, "value": str(v)} for k, v in sorted(env.items())]
    variables += [
        {"name": k, "value": MASKED if mask_secrets else v} for k, v in sorted(hidden.items())
    ]
    distributed = spec.nodes > 1
    inner = {
        "command": "bash",
        "args": args,
        "image": docker_image(image),
        "compute": {
            "gpuDevicesRequest": spec.ranks_per_node or spec.ranks,
            "largeShmRequest": True,
        },
        "storage": {
            "pvc": [
                {"name": m.name, "path": m.path, "existingPvc": True, "claimName": m.claim}
                for m in settings.mounts
            ]
        },
        "environmentVariables": variables,
        "backoffLimit": 0,
        "restartPolicy": "Never",
    }
    if distributed:
        inner.update(
            {
                "distributedFramework": "PyTorch",
                "numWorkers": spec.nodes - 1,
                "minReplicas": spec.nodes - 1,
                "maxReplicas": spec.nodes - 1,
            }
        )
    request = {
        "name": workload_name(spec),
        "useGivenNameAsPrefix": False,
        "projectId": project_id,
        "clusterId": cluster_id,
        "spec": inner,
    }
    if distributed:
        request["masterSpecSameAsWorker"] = True
    return ("distributed" if distributed else "trainings"), request
