"""``llmb plugins``: what was discovered, from which distribution and version; ``llmb plugins new``:
a skeleton of a new workload plugin."""

from __future__ import annotations

from pathlib import Path

import click

from llmb.cli import WholeHelpGroup, get_host
from llmb.cli.output import Column, emit_json, fit_text, render_table, say


@click.group("plugins", cls=WholeHelpGroup, invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def plugins_command(ctx: click.Context, as_json: bool) -> None:
    """List the plugins found in the 'llmb' entry-point group, the
    distribution and version each came from, what they register, and the
    error of any that failed to load. 'llmb plugins new NAME' writes a new
    workload plugin's skeleton."""
    if ctx.invoked_subcommand is not None:
        return
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


@plugins_command.command("new")
@click.argument("name")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path),
    help="The directory to create (default: ./llmb-plugin-NAME); it must not exist.",
)
@click.pass_context
def new_command(ctx: click.Context, name: str, directory: Path | None) -> None:
    """Write a skeleton workload plugin, llmb-plugin-NAME: pyproject.toml, a README, the hooks, a
    small dense model from llmb's building blocks, a one-row recipe table in workload.yaml, and
    tests that pass as written (pip install -e '.[test]', then pytest). NAME: lower-case letters and
    digits, starting with a letter, not an installed workload's name or alias. The guide:
    docs/writing-a-workload.md."""
    from importlib.metadata import version

    from llmb.plugins.scaffold import check_name, taken_names, write_skeleton

    check_name(name, taken_names(get_host(ctx)))
    target = directory if directory is not None else Path(f"llmb-plugin-{name}")
    written = write_skeleton(name, target, version("llmb"))
    say(f"Wrote {target}/ ({len(written)} files), the workload {name}:")
    for path in written:
        say(f"  {path.relative_to(target)}")
    click.echo(
        fit_text(
            f"\nNext: cd {target} && pip install -e '.[test]' && pytest (in the environment that has "
            f"llmb). Then replace the placeholder model and recipe row in "
            f"src/llmb_plugin_{name}/workload.yaml with your recipe's (docs/writing-a-workload.md)."
        )
    )
