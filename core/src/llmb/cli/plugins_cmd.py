"""``llmb plugins``: what was discovered, from which distribution and version."""

from __future__ import annotations

import click

from llmb.cli import get_host
from llmb.cli.output import Column, emit_json, fit_text, render_table


@click.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def plugins_command(ctx: click.Context, as_json: bool) -> None:
    """List the plugins found in the 'llmb' entry-point group, the
    distribution and version each came from, what they register, and the
    error of any that failed to load."""
    host = get_host(ctx)
    infos = host.plugins()
    if as_json:
        emit_json([i.as_dict() for i in infos])
        return
    rows = [
        [
            i.name,
            i.distribution or "-",
            i.version or "-",
            i.status,
            ",".join(i.workloads) or "-",
            ",".join(i.backends) or "-",
            i.module,
        ]
        for i in infos
    ]
    click.echo(
        render_table(
            [
                "PLUGIN",
                Column("DISTRIBUTION", squeeze=12),
                "VERSION",
                "STATUS",
                Column("WORKLOADS", squeeze=12),
                Column("BACKENDS", squeeze=8),
                Column("MODULE", drop=1),
            ],
            rows,
        )
    )
    for i in infos:
        if i.error:
            click.echo("\n" + fit_text(f"{i.name}: {i.error}"))
