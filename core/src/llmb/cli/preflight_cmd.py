"""``llmb preflight``: one job over the nodes that finds the slow one (``llmb.preflight``)."""

from __future__ import annotations

import sys

import click

from llmb.cli import get_host
from llmb.cli.output import Column, emit_json, fit_text, output_width, render_table, say
from llmb.cli.run_options import cluster_options
from llmb.errors import UsageError
from llmb.figures import figure
from llmb.log import warn


def table(report: dict) -> str:
    """The per-node table of a preflight report."""
    headers = [
        "NODE",
        "GEMM TFLOP/S",
        "MEMORY GB/S",
        "INTRA GB/S",
        "INTER GB/S",
        "NCCL",
        "FLAGGED",
        Column("WHY", squeeze=1),
    ]
    rows = []
    for row in report["rows"]:
        transport = row.get("transport") or {}
        nccl = ",".join(transport.get("channels") or transport.get("networks") or []) or "-"
        rows.append(
            [
                row["node"],
                figure(row["gemm"], 0),
                figure(row["memory"], 0),
                figure(row["intra"], 0),
                figure(row["inter"], 0),
                nccl,
                "yes" if row["flagged"] else "no",
                "; ".join(row["reasons"]) or "-",
            ]
        )
    return render_table(headers, rows)


# llmb preflight's exit when no threshold could be applied (CPU ranks on one node): not 0, which says the
# nodes passed, nor 1, which says one was flagged; llmb compare exits 3 as well for what it could not compare.
NOT_JUDGED_EXIT = 3


def verdict_line(report: dict) -> str:
    """The verdict, what it could not check, and where the report (the file --exclude-from takes) is."""
    from llmb.paths import shown_path
    from llmb.preflight.verdict import NOT_JUDGED, PASS

    path = shown_path(report["path"]) if report.get("path") else "preflight.json"
    nodes = len(report["nodes"])
    counted = f"{nodes} node{'s' if nodes != 1 else ''}"
    skipped = "; ".join(report.get("not_applied") or ())
    if report["verdict"] == NOT_JUDGED:
        return (
            f"preflight: NOT JUDGED - no thresholds applied ({skipped}): the figures were measured "
            f"but held against nothing; no node is flagged and none passed.\n"
            f"report: {path}"
        )
    if report["verdict"] == PASS:
        return (
            f"preflight: PASS - none of the {counted} is below the thresholds applied"
            + (f" (not applied: {skipped})" if skipped else "")
            + f".\nreport: {path} (llmb run/sweep/certify --exclude-from takes it)"
        )
    return (
        f"preflight: FLAGGED {', '.join(report['exclude'])} - give llmb run/sweep/certify --exclude-from "
        f"{path} to keep jobs off them."
    )


def exit_code(report: dict, state: str) -> int:
    """0: every node passed the thresholds that could be applied; 1: a node was flagged, or the job
    failed; ``NOT_JUDGED_EXIT`` (3): no threshold could be applied, so nothing passed (docs/preflight.md)."""
    from llmb.preflight.verdict import NOT_JUDGED, PASS

    if state != "SUCCEEDED" or report["verdict"] not in (PASS, NOT_JUDGED):
        return 1
    return 0 if report["verdict"] == PASS else NOT_JUDGED_EXIT


@click.command("preflight")
@click.option(
    "--gpu",
    envvar="GPU_TYPE",
    required=True,
    help="The nodes' GPU type, e.g. h100. [env: GPU_TYPE]",
)
@click.option("--nodes", type=click.IntRange(min=1), required=True, help="Nodes to measure.")
@click.option(
    "--gpus-per-node",
    type=click.IntRange(min=1),
    envvar="GPUS_PER_NODE",
    help="Ranks per node (default: the cluster file's, else the GPU type's). [env: GPUS_PER_NODE]",
)
@click.option(
    "--gemm-size",
    type=click.IntRange(min=16),
    help="GEMM matrix size N (default 8192 on GPUs, 384 on CPU).",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=3),
    help="Timed repetitions per figure (median; default 20/15).",
)
@cluster_options
@click.option(
    "--dry-run", is_flag=True, help="Show what would be submitted; write and send nothing."
)
@click.option("--detach", is_flag=True, help="Return at once with the job id.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def preflight_command(
    ctx, gpu, nodes, gpus_per_node, gemm_size, repeats, dry_run, detach, as_json, **kw
):
    """Measure every node before a benchmark: per node, dense GEMM
    throughput (bf16 on GPUs, fp32 on CPU ranks), device memory bandwidth,
    all-reduce bus bandwidth inside the node, and across nodes an all-reduce
    over all of them and node pairs in O(log N) rounds that point at a slow
    node or link; on GPU nodes also nvidia-smi's GPU type, count, driver, ECC
    errors and clocks, and NCCL's transport (InfiniBand or sockets). Flags a
    node below a documented fraction of its GPU's datasheet figures or below
    its peers' median (docs/preflight.md), prints a table and the verdict,
    and writes preflight.json (its path is printed), which llmb
    run/sweep/certify --exclude-from take. Exits 0 when no node is flagged,
    1 when one is (or the job failed), 3 when no threshold could be applied
    (CPU ranks have no datasheet figure, one node has no peers): NOT JUDGED,
    not a pass."""
    from llmb.cli.jobs_cmd import detaching, report_detached
    from llmb.lifecycle.run_option_values import options_from
    from llmb.preflight import job as preflight_job
    from llmb.recipes.gpus import gpu_type

    kind = gpu_type(gpu).name
    options, backend = options_from(kw, None, None, gpu=kind)
    per_node = gpus_per_node or options.submit.gpus_per_node or gpu_type(kind).gpus_per_node
    per_node_from = (
        f"--gpus-per-node {per_node}"
        if gpus_per_node
        else f"gpus_per_node {per_node} (llmb config show says where from)"
        if options.submit.gpus_per_node
        else f"the {kind}'s {per_node} GPUs a node (--gpus-per-node N sets another)"
    )
    if options.preflight:
        warn(
            f"--exclude-from: this preflight keeps off {', '.join(options.preflight['exclude']) or 'no node'}."
        )
    sizes = {k: v for k, v in (("gemm_n", gemm_size), ("repeats", repeats)) if v}
    submitted = preflight_job.submit(
        get_host(ctx),
        kind,
        nodes,
        per_node,
        options,
        backend,
        dry_run=dry_run,
        sizes=sizes,
        per_node_from=per_node_from,
    )
    job = submitted.job
    if dry_run:
        for warning in submitted.warnings:
            warn(warning)
        described = submitted.description or {}
        if as_json:
            emit_json({k: v for k, v in described.items() if k != "text"})
        else:
            click.echo(described.get("text") or "")
        return
    # the job exists from here on: an interrupt leaves it running, and says so
    with detaching(ctx, job):
        for warning in submitted.warnings:
            warn(warning)
        if detach:
            from llmb.paths import shown_path

            path = shown_path(preflight_job.report_path(job.run_dir))
            report_detached(job, as_json, then=f"; its report: {path}")
            return
        final, report = wait_for_report(ctx, job, nodes, per_node, as_json)
    ctx.exit(exit_code(report, final.state))


def wait_for_report(ctx, job, nodes: int, per_node: int, as_json: bool):
    """Follow the preflight job to its end and print its report: (final status, report);
    UsageError when it ended without measurements."""
    from llmb.cli.jobs_cmd import _current, _status_of
    from llmb.lifecycle.follow import follow

    click.echo(
        fit_text(
            f"{job.id}: preflight of {nodes} node(s) x {per_node} rank(s) ({job.backend}); its log: "
            f"llmb logs {job.id}",
            output_width(sys.stderr),
        ),
        err=True,
    )
    final = follow(
        job, lambda: _status_of(ctx, _current(job)), lambda line: click.echo(line, err=True)
    )
    report = show(final.job.run_dir, as_json)
    if report is None:
        raise UsageError(
            f"{job.id} ended {final.state}{' - ' + final.reason if final.reason else ''} without "
            f"measurements; see llmb logs {job.id}."
        )
    return final, report


def preflight_first(ctx, gpu: str | None, nodes: int, run_kw: dict) -> str:
    """``llmb certify --preflight N``: a preflight of ``nodes`` nodes with the suite's cluster options,
    followed to its end; the path of its preflight.json, for every run's ``--exclude-from``."""
    from llmb.cli.run_options import CLUSTER_OPTIONS
    from llmb.lifecycle.run_option_values import options_from
    from llmb.preflight import job as preflight_job
    from llmb.recipes.gpus import gpu_type

    if not gpu:
        raise UsageError("--preflight needs the cluster's GPU type: --gpu h100 (or GPU_TYPE).")
    kind = gpu_type(gpu).name
    options, backend = options_from(
        {k: v for k, v in run_kw.items() if k in CLUSTER_OPTIONS}, None, None
    )
    per_node = options.submit.gpus_per_node or gpu_type(kind).gpus_per_node
    submitted = preflight_job.submit(get_host(ctx), kind, nodes, per_node, options, backend)
    for warning in submitted.warnings:
        warn(warning)
    final, report = wait_for_report(ctx, submitted.job, nodes, per_node, as_json=False)
    if final.state != "SUCCEEDED":
        raise UsageError(
            f"the preflight {submitted.job.id} ended {final.state}; the suite was not started."
        )
    if exit_code(report, final.state) == NOT_JUDGED_EXIT:
        warn(
            f"the preflight {submitted.job.id} judged no node (no thresholds applied: "
            f"{'; '.join(report.get('not_applied') or ())}); the suite runs on every node."
        )
    return report["path"]


def show(run_dir: str, as_json: bool) -> dict | None:
    """Print the report of the preflight in ``run_dir`` (written now if the job's end did not)."""
    import json
    import os

    from llmb.preflight.job import report_path, write_report

    path = report_path(run_dir)
    report = None
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            report = json.load(handle)
    else:
        report = write_report(run_dir, None)
    if report is None:
        return None
    report["path"] = path
    if as_json:
        emit_json(report)
    else:
        click.echo(table(report))
        say(verdict_line(report))
    return report
