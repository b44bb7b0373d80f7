"""``llmb config``: the cluster file and the settings cluster runs take."""

from __future__ import annotations

import os

import click

from llmb.cli import WholeHelpGroup, get_host
from llmb.cli.output import Column, echo_err, emit_json, fit_text, render_table, say
from llmb.log import warn


def _shown(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "-"
    return str(value)


def _source(item) -> str:
    if item.source == "default":
        return (
            f"default ({item.default})"
            if item.value is None and item.default != "none"
            else "default"
        )
    return f"{item.source} {item.origin}"


@click.group("config", cls=WholeHelpGroup, invoke_without_command=True)
@click.pass_context
def config_command(ctx: click.Context) -> None:
    """The cluster file ($LLMB_INSTALL/cluster.yaml): account, partition,
    GPU type, images, mounts, environment and Slurm options that every
    cluster run takes unless a flag or an environment variable gives
    another value. Without a subcommand, as show. Every key:
    docs/cluster-config.md"""
    if ctx.invoked_subcommand is None:
        ctx.invoke(show_command, as_json=False)


@config_command.command("path")
def path_command() -> None:
    """Print the cluster file's path (whether or not it exists)."""
    from llmb.install.cluster_config import cluster_file

    click.echo(cluster_file())


@config_command.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def show_command(ctx: click.Context, as_json: bool) -> None:
    """Every cluster setting, its value and where it came from: an
    environment variable, the cluster file, or llmb's default. A flag on
    llmb run or llmb sweep wins over all of them; local runs use none."""
    from llmb.install.cluster_config import cluster_file, effective, load

    path = cluster_file()
    config = load(path)
    settings = effective(config, dict(os.environ))
    images = next(s.value for s in settings if s.name == "images")
    unknown = sorted(set(images) - set(get_host(ctx).workloads())) if images else []
    for name in unknown:
        warn(f"{path}: images.{name} names no installed workload; no run uses it.")
    if as_json:
        emit_json(
            {
                "file": path,
                "exists": config is not None,
                "settings": [
                    {
                        "name": s.name,
                        "key": s.key,
                        "flag": s.flag,
                        "variable": s.variable,
                        "value": s.value,
                        "source": s.source,
                        "origin": s.origin,
                        "default": s.default,
                    }
                    for s in settings
                ],
            }
        )
        return
    if config is None:
        click.echo(
            fit_text(
                f"cluster file: {path} (none yet: llmb install writes a commented template there, or "
                f"create it by hand; see docs/cluster-config.md)"
            )
        )
    else:
        say(f"cluster file: {path}")
    rows = [
        [s.key, _shown(s.value), _source(s), " / ".join(x for x in (s.flag, s.variable) if x)]
        for s in settings
    ]
    click.echo(
        render_table(
            [
                # FROM, what the command is for, and a value (a path, an image) are wrapped, never cut;
                # the flag and variable give their width first
                "KEY",
                Column("VALUE", squeeze=12, cut="wrap"),
                Column("FROM", squeeze=20, cut="wrap"),
                Column("FLAG / VARIABLE", squeeze=18, cut="wrap", drop=2),
            ],
            rows,
        )
    )
    echo_err(
        "A flag wins over its variable, the variable over the file, the file over the default. "
        "Local runs (--backend local) use none of these."
    )
