"""``llmb install``: container images, Hugging Face files and folders for the workloads."""

from __future__ import annotations

import os

import click

from llmb.cli import get_host
from llmb.cli.output import emit_json, say
from llmb.log import warn


def _report(plan, token_set: bool, dry_run: bool) -> str:
    lines = [
        f"{'llmb install --dry-run: would install' if dry_run else 'llmb install:'} "
        f"{', '.join(plan.workloads) or 'nothing'} into {plan.install}"
        + (f" (GPU type {plan.gpu})" if plan.gpu else "")
    ]
    for step in plan.steps:
        if step.status == "planned":
            text = step.action(token_set)
        else:  # a folder is its own target: named once
            text = step.target if step.what == step.target else f"{step.what} -> {step.target}"
        lines.append(f"  {step.status:<8} {step.kind:<12} {text}")
    lines += [f"failed: {s.what}: {s.error}" for s in plan.steps if s.status == "failed"]
    lines += [
        f"edit {s.target} for your cluster (account, partition, GPU type, images, mounts, ...); "
        f"llmb config show lists what cluster runs will use"
        for s in plan.steps
        if s.kind == "config" and s.status == "done"
    ]
    return "\n".join(lines)


@click.command("install")
@click.argument("workloads", nargs=-1)
@click.option(
    "--gpu", envvar="GPU_TYPE", help="Only what the recipes for this GPU type need. [env: GPU_TYPE]"
)
@click.option(
    "--variant", help="Only this recipe variant, e.g. nemo2 for Llama 3.1's NeMo 2 recipes."
)
@click.option("--no-images", is_flag=True, help="Skip the container images (enroot import).")
@click.option("--no-huggingface", is_flag=True, help="Skip the Hugging Face files.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print every step without doing anything (HF_TOKEN shows as ***).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def install_command(ctx, workloads, gpu, variant, no_images, no_huggingface, dry_run, as_json):
    """Prepare $LLMB_INSTALL for WORKLOADS (default: every installed one), as
    the published recipes' installer does: the folders, each container image imported
    with enroot (images/<name>.sqsh) and the Hugging Face configs and
    tokenizers the production frameworks read. What is already there is
    skipped; a failed step is reported and the others still run, except that
    the first Hugging Face file that times out stops the downloads from that
    endpoint (the rest are reported skipped; a rerun fetches only what is missing).

    \b
    Needs: enroot on PATH for the images; HF_TOKEN for the gated Llama
    repositories; HF_ENDPOINT for a Hugging Face mirror; LLMB_HF_FILE_TIMEOUT
    (seconds per file, default 300) and LLMB_HF_TIMEOUT (all files, default
    900) bound the downloads. Exit codes: 0 done,
    1 a step failed, 2 something missing or a bad request (nothing was done).
    """
    from llmb.errors import UsageError
    from llmb.install import installer as install
    from llmb.paths import install_dir

    host = get_host(ctx)
    if os.environ.get("STAGE_PATH") and not os.environ.get("LLMB_INSTALL"):
        warn(
            "STAGE_PATH is the older recipe READMEs' name for the install directory; llmb uses "
            "LLMB_INSTALL (set it to keep using that directory)."
        )
    chosen = [host.workload(name) for name in workloads] or list(host.workloads().values())
    plan = install.plan(
        chosen,
        install_dir(),
        gpu=gpu,
        variant=variant,
        named=bool(workloads),
        with_images=not no_images,
        with_huggingface=not no_huggingface,
    )
    token = os.environ.get("HF_TOKEN") or None
    problems = install.missing(plan)
    if dry_run:
        for problem in problems:
            warn(f"a real install would stop here: {problem}.")
    elif problems:
        listed = "\n".join(f"  - {p}." for p in problems)
        raise UsageError(f"llmb install cannot start; nothing was done:\n{listed}")
    else:
        install.execute(plan, token, lambda line: click.echo(line, err=True))
    failed = [s for s in plan.steps if s.status == "failed"]
    if as_json:
        emit_json(
            {
                "install_dir": plan.install,
                "dry_run": dry_run,
                "workloads": plan.workloads,
                "gpu": plan.gpu,
                "steps": [s.as_dict(token is not None) for s in plan.steps],
                "missing": problems,
                "failed": len(failed),
            }
        )
    else:
        say(_report(plan, token is not None, dry_run))
    ctx.exit(1 if failed else 0)
