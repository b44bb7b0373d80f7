"""The preflight job: submitted like a run (the job records, ``llmb status``/``logs``/``cancel``,
provenance), ended like one (``llmb.lifecycle.outcome.finish``), with its report written at its end.

Its experiment directory is ``$LLMB_INSTALL/preflight/<name>/<name>_<stamp>/`` (not under
``workloads/``: ``llmb results`` has no row to make of it). Beside the log: ``measurements.json``
(what the ranks measured) and ``preflight.json`` (``llmb.preflight.verdict``), the file
``--exclude-from`` takes.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

from llmb.errors import UsageError
from llmb.lifecycle.prepare import Prepared
from llmb.lifecycle.submit import Submitted, describe, submit_fresh
from llmb.paths import install_dir
from llmb.runs import experiment
from llmb.runs.jobs import Job, new_job_id, now
from llmb.runs.runspec import SECRET_VARIABLES, RunOptions, RunSpec

WORKLOAD = "preflight"
REPORT = "preflight.json"


def root() -> str:
    return os.path.join(install_dir(), WORKLOAD)


def prepare(
    host,
    gpu: str,
    nodes: int,
    gpus_per_node: int,
    options: RunOptions,
    backend: str,
    sizes: dict | None = None,
    per_node_from: str | None = None,
) -> Prepared:
    """The preflight of ``nodes`` nodes of ``gpus_per_node`` ranks, ready to submit (``llmb.lifecycle.submit``):
    every refusal is raised here, before anything is written. ``per_node_from``: where ``gpus_per_node``
    came from, in a refusal's words (default: ``--gpus-per-node N``)."""
    host.backend(backend)
    submit_options = options.submit
    warnings: list[str] = []
    if backend == "local":
        from llmb.runs.capability import detect

        machine = detect()
        if nodes != 1:
            raise UsageError(
                f"--nodes {nodes}: the local backend runs on this machine, one node; use --nodes 1 or "
                f"a cluster backend."
            )
        device = "cuda" if machine.gpus >= gpus_per_node else "cpu"
        if device == "cpu" and gpus_per_node > 2 * machine.cpus:
            raise UsageError(
                f"{per_node_from or f'--gpus-per-node {gpus_per_node}'}: {gpus_per_node} CPU ranks on "
                f"this machine (one a GPU), more than its {machine.cpus} cores can carry; use "
                f"--gpus-per-node {2 * machine.cpus} or fewer, or a cluster backend."
            )
        if submit_options.given():
            warnings.append(
                f"the local backend ignores {', '.join(submit_options.given())} (cluster options)."
            )
    else:
        device = "auto"
        if not submit_options.bare and not submit_options.image:
            raise UsageError(
                "llmb preflight on a cluster runs in a container with torch: give --image (e.g. the "
                "recipes' NeMo container) or --bare to run from the nodes' Python environment."
            )
        if submit_options.time_limit is None:
            options = replace(options, submit=replace(submit_options, time_limit="20"))
    ranks = nodes * gpus_per_node
    name = f"preflight_{gpu}_nodes{nodes}_gpus{gpus_per_node}"
    # claimed by submit, with the experiment directory (llmb.lifecycle.prepare)
    job_id = new_job_id(backend)
    where = experiment.locate(WORKLOAD, name, root())
    env = dict(options.env)
    if device != "cpu":
        env.setdefault("NCCL_DEBUG", "INFO")  # NCCL's set-up lines name each node's transport
        env.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET")
    spec = RunSpec(
        job_id=job_id,
        workload=WORKLOAD,
        variant=WORKLOAD,
        framework="torch",
        engine="preflight",
        size="-",
        arch={},
        proxy=None,
        gpu=gpu,
        dtype="bf16",
        compute_dtype="auto"
        if device == "auto"
        else ("bfloat16" if device == "cuda" else "float32"),
        device=device,
        ranks=ranks,
        mbs=1,
        ga=1,
        gbs=ranks,
        seq_len=0,
        steps=0,
        seed=options.seed,
        compile=False,
        flops_per_sample=0.0,
        experiment=name,
        run_dir=where.run_dir,
        inner_dir=where.inner,
        log=where.log,
        env=env,
        nodes=nodes,
        ranks_per_node=gpus_per_node,
        preflight=dict(sizes or {}),
    )
    job = Job(
        id=job_id,
        backend=backend,
        workload=WORKLOAD,
        experiment=name,
        run_dir=where.run_dir,
        log=where.log,
        ranks=ranks,
        submitted_at=now(),
        proxy=None,
    )
    record = {
        "kind": WORKLOAD,
        "job_id": job_id,
        "backend": backend,
        "gpu": gpu,
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "ranks": ranks,
        "device": device,
        "sizes": spec.preflight,
        "submitted_at": now(),
        "warnings": warnings,
    }
    return Prepared(
        spec,
        job,
        None,
        tuple(warnings),
        record,
        options.submit,
        where,
        None,
        frozenset({*SECRET_VARIABLES, *options.submit.secrets}),
    )


def submit(
    host,
    gpu: str,
    nodes: int,
    gpus_per_node: int,
    options: RunOptions,
    backend: str,
    dry_run: bool = False,
    sizes: dict | None = None,
    per_node_from: str | None = None,
) -> Submitted:
    """Prepare and submit the preflight job (``llmb.lifecycle.submit``, as a run); with ``dry_run``, what the
    backend would do, writing and sending nothing."""

    def prepare_once() -> Prepared:
        return prepare(host, gpu, nodes, gpus_per_node, options, backend, sizes, per_node_from)

    if dry_run:
        return describe(host, prepare_once(), backend)
    return submit_fresh(host, prepare_once, backend)


def report_path(run_dir: str) -> str:
    return os.path.join(run_dir, REPORT)


def write_report(run_dir: str, log: str | None) -> dict | None:
    """Build ``preflight.json`` from the job's measurements and log; None when the ranks wrote none."""
    from llmb.files import read_tail
    from llmb.preflight.expected import expected
    from llmb.preflight.verdict import build
    from llmb.preflight.worker import MEASUREMENTS

    try:
        with open(os.path.join(run_dir, MEASUREMENTS), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    text = ""
    if log:
        try:
            text = read_tail(log, 64 << 20).decode("utf-8", "replace")
        except OSError:
            text = ""
    report = build(data, expected(data["gpu"], data.get("device") or "cpu"), text)
    report["written_at"] = now()
    experiment.write_json(report_path(run_dir), report)
    return report


def finish_summary(job: Job) -> dict:
    """What ``exit.json`` holds as the job's result: the verdict and the flagged nodes."""
    try:
        report = write_report(job.run_dir, job.log)
    except Exception as exc:  # noqa: BLE001 - a report problem must not lose the job's state
        return {"error": f"could not write the preflight report: {type(exc).__name__}: {exc}"}
    if report is None:
        return {"error": "the ranks wrote no measurements"}
    return {
        "kind": WORKLOAD,
        "verdict": report["verdict"],
        "not_applied": report.get("not_applied") or [],
        "exclude": report["exclude"],
        "report": report_path(job.run_dir),
    }
