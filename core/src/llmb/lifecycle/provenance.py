"""What a run's provenance records, and when (``provenance.json``: ``llmb.runs.provenance`` reads and
writes the file, docs/provenance.md has what each section holds).

``record_submission``  ``llmb run`` (and ``llmb preflight``), before the job is submitted: the
                       ``submission`` section, with the container image ``llmb install`` imported.
``start_job``          each node's first rank, before training: the GPU check and, on rank 0, the
                       ``job`` section, with the frameworks' versions as the job sees them.

A failure to record is a warning, never a failed run.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket

from llmb.errors import UsageError
from llmb.runs import experiment
from llmb.runs.jobs import describe_os_error, now
from llmb.runs.provenance import FILE, of_log, path_of, read, write_section  # noqa: F401 - the file, for callers

UNKNOWN = "unknown"
# The distributions whose versions the job records: the torch engine's and the production frameworks'.
FRAMEWORKS = (
    "torch",
    "megatron-core",
    "megatron-bridge",
    "nemo-toolkit",
    "nemo-run",
    "lightning",
    "transformer-engine",
)


# ------------------------------------------------------------------ versions


def llmb_version() -> str:
    try:
        return importlib.metadata.version("llmb")
    except importlib.metadata.PackageNotFoundError:
        return UNKNOWN


def plugin_versions() -> dict[str, str]:
    """Distribution -> version of every ``llmb`` entry point, read from the metadata (nothing is loaded)."""
    from llmb.plugins.entrypoints import entry_points

    return {ep.distribution or ep.value: ep.version or UNKNOWN for ep in entry_points("llmb")}


def framework_versions() -> dict[str, str]:
    """The installed ``FRAMEWORKS`` and their versions (the absent ones left out)."""
    from llmb.engines.frameworks.runtime import framework_versions as installed

    return {name: version for name, version in installed(FRAMEWORKS).items() if version}


# ------------------------------------------------------------------ submission


def image_record(backend: str, submit, reference: str | None) -> dict:
    """The container image a job runs in, as the submitting side knows it."""
    if backend == "local" or submit.bare or not reference:
        where = "this machine's" if backend == "local" else "the nodes'"
        return {
            "reference": None,
            "digest": None,
            "note": f"no container: the job runs in {where} Python environment",
        }
    from llmb.install import images

    imported = reference if reference.endswith(".sqsh") else None
    if imported is None:
        try:
            imported = images.image_path(reference)
        except UsageError:
            imported = None  # not in registry#repo:tag form: the backend says so when it submits
    record = {
        "reference": reference,
        "digest": reference.split("@", 1)[1] if "@sha256:" in reference else UNKNOWN,
        "imported": None,
    }
    if imported and os.path.isfile(imported):
        stat = os.stat(imported)
        record["imported"] = {
            "path": imported,
            "bytes": stat.st_size,
            "modified": int(stat.st_mtime),
        }
    return record


def submission_section(
    host, backend: str, spec, submit, container: str | None, secret_names
) -> dict:
    """What ``llmb run`` knows of a run it submits."""
    from llmb.runs import job_env

    reference = submit.image or (spec.framework_config or {}).get("container") or container
    return {
        "recorded_at": now(),
        "llmb": llmb_version(),
        "plugins": [
            {
                "name": p.name,
                "distribution": p.distribution,
                "version": p.version,
                "status": p.status,
            }
            for p in host.plugins()
        ],
        "backend": backend,
        "job_id": spec.job_id,
        "engine": spec.engine,
        "gpu": spec.gpu,
        "image": image_record(backend, submit, reference),
        "env_set": job_env.redacted(spec.env, secret_names),
        "secret_names": sorted(secret_names),
        "host": socket.gethostname(),
    }


def record_submission(
    run_dir: str, host, backend: str, spec, submit, container: str | None, secret_names
) -> str | None:
    """Write the ``submission`` section; a warning, or None."""
    try:
        section = submission_section(host, backend, spec, submit, container, secret_names)
        return write_section(run_dir, "submission", section)
    except Exception as exc:  # noqa: BLE001 - provenance never stops a run
        return f"could not record the run's provenance: {type(exc).__name__}: {exc}"


# ------------------------------------------------------------------ job


def scheduler(environ) -> dict:
    """The scheduler's job and nodes: Slurm's variables, a Kubernetes pod (Run:ai), or this host."""
    base = {"llmb_job_id": environ.get("LLMB_JOB_ID")}
    if environ.get("SLURM_JOB_ID"):
        slurm = {
            "job_id": "SLURM_JOB_ID",
            "nodes": "SLURM_JOB_NODELIST",
            "num_nodes": "SLURM_JOB_NUM_NODES",
            "partition": "SLURM_JOB_PARTITION",
            "cluster": "SLURM_CLUSTER_NAME",
        }
        return {"kind": "slurm", **base, **{key: environ.get(name) for key, name in slurm.items()}}
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return {
            "kind": "kubernetes",
            **base,
            "job_id": environ.get("LLMB_JOB_ID"),
            "nodes": socket.gethostname(),
            "master": environ.get("MASTER_ADDR"),
        }
    return {
        "kind": "local",
        **base,
        "job_id": environ.get("LLMB_JOB_ID"),
        "nodes": socket.gethostname(),
    }


def job_section(spec, world: int, gpus, check: str, environ, declared) -> dict:
    """What only the job sees (``gpus``: ``llmb.runs.gpu_seen.GpusSeen``)."""
    from llmb.runs import job_env

    return {
        "recorded_at": now(),
        "llmb": llmb_version(),
        "plugins": plugin_versions(),
        "frameworks": framework_versions(),
        "python": platform.python_version(),
        "scheduler": scheduler(environ),
        "host": socket.gethostname(),
        "ranks": world,
        "device": spec.device,
        "gpu": {**gpus.as_dict(), "requested": spec.gpu, "check": check},
        "environment": job_env.relevant(environ, declared, spec.env),
    }


def _note(text: str) -> None:
    print(f"[llmb] {text}", flush=True)  # the rank's output is the run's log


def start_job(spec, rank: int, world: int, local_rank: int, environ=os.environ) -> None:
    """Before training, once per node (by its local rank 0): check the node's GPUs against
    ``--gpu`` (GpuMismatchError stops the job); rank 0 also records the job's provenance
    first and, with ``--dump-env``, its whole environment beside the log. The node's other
    ranks go on: they cannot train without this one, and the launcher stops them when it
    fails. Failing to record only warns."""
    if local_rank != 0:
        return
    from llmb.runs import gpu_seen

    gpus = gpu_seen.seen(environ)
    mismatch, warnings = None, []
    if spec.device != "cpu":
        try:
            warnings = gpu_seen.check(spec.gpu, gpus)
        except gpu_seen.GpuMismatchError as exc:
            mismatch = exc
    for warning in warnings:
        _note(f"warning: {warning}")
    if rank == 0:
        if spec.device == "cpu":
            check = "not checked: the run computes on CPU"
        else:
            check = (
                "mismatch"
                if mismatch
                else "unknown GPU"
                if warnings
                else "match"
                if gpus.names
                else "no GPU"
            )
        for problem in _record_job(spec, world, gpus, check, environ):
            _note(f"warning: {problem}")
    if mismatch is not None:
        raise mismatch


def _record_job(spec, world, gpus, check, environ) -> list[str]:
    from llmb import redaction
    from llmb.runs import job_env
    from llmb.runs.runspec import SECRET_VARIABLES

    problems = []
    try:
        submitted = (read(spec.run_dir) or {}).get("submission") or {}
        declared = {*SECRET_VARIABLES, *(submitted.get("secret_names") or ())}
        redaction.declare(declared)  # what the job writes masks them too
        section = job_section(spec, world, gpus, check, environ, declared)
        if environ.get(job_env.DUMP_VARIABLE) == "1":
            path = job_env.dump_path(spec.log, spec.experiment)
            header = (
                f"llmb --dump-env: the environment of rank 0 of job {spec.job_id} on {socket.gethostname()} "
                f"at {now()}.\nSecrets are written as ***."
            )
            try:
                experiment.write_text(path, job_env.dump_text(environ, declared, header))
                section["environment_file"] = path
            except OSError as exc:
                problems.append(
                    f"could not write the environment file {path}: {describe_os_error(exc)}"
                )
        if problem := write_section(spec.run_dir, "job", section):
            problems.append(problem)
    except Exception as exc:  # noqa: BLE001 - provenance never stops a run
        problems.append(f"could not record the run's provenance: {type(exc).__name__}: {exc}")
    return problems
