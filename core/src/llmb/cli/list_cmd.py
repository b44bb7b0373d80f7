"""``llmb list``: the support matrix of every installed workload."""

from __future__ import annotations

from typing import Any

import click

from llmb.cli import get_host
from llmb.cli.output import Column, emit_json, fit_text, render_table
from llmb.recipes.resolve import size_key


def _compact(counts: tuple[int, ...]) -> str:
    if len(counts) <= 4:
        return ",".join(map(str, counts))
    return f"{counts[0]},{counts[1]},...,{counts[-1]}"


def support_matrix(workloads: list, runners_too: bool = False) -> list[dict[str, Any]]:
    """One entry per (workload, variant, size, GPU type, scaling, GPU counts) of the published recipes,
    with the dtypes that share them, and ``also_run_by``: the GPU types that run that recipe (gpus.yaml
    ``runs_recipes_of``: the H200 the H100's). ``runners_too`` (the table): each of those has its own
    entries too, with ``runs_recipes_of`` saying whose recipe it runs."""
    from llmb.recipes.gpus import catalogue, gpu_order_key, in_dtype_order

    gpus = catalogue()
    # a GPU type that runs another's recipes (gpus.yaml runs_recipes_of: the H200 the H100's) has its rows
    runners = {
        table: [name for name, spec in gpus.items() if spec.runs_recipes_of == table]
        for table in gpus
    }
    entries: dict[tuple, dict[str, Any]] = {}
    for workload in workloads:
        deprecated = workload.deprecated.as_dict() if workload.deprecated else None
        for vi, variant in enumerate(workload.variants):
            for s, gpu in (
                (series, gpu)
                for series in variant.series
                for gpu in (series.gpu, *(runners.get(series.gpu, ()) if runners_too else ()))
            ):
                key = (
                    workload.name,
                    vi,
                    size_key(s.size),
                    gpu_order_key(gpu),
                    s.scaling != "weak",
                    s.min_gpus,
                    s.max_gpus,
                    s.listed_gpus,
                )
                entry = entries.setdefault(
                    key,
                    {
                        "workload": workload.name,
                        "variant": variant.name,
                        "default_variant": vi == 0,
                        "framework": variant.framework,
                        "size": s.size,
                        "gpu": gpu,
                        "dtypes": [],
                        "scaling": s.scaling,
                        "min_gpus": s.min_gpus,
                        "max_gpus": s.max_gpus,
                        "tested_gpus": list(s.listed_gpus),
                        "range": s.is_range,
                        "gpus_per_node": gpus[gpu].gpus_per_node if gpu in gpus else None,
                        "source": s.provenance.document,
                        # deprecated by its publisher's collection (still listed and runnable); None: current
                        "deprecated": deprecated,
                        # the GPU types that run this published recipe as their own (the H200 the H100's)
                        "also_run_by": list(runners.get(s.gpu, ())) if gpu == s.gpu else [],
                        **({"runs_recipes_of": s.gpu} if gpu != s.gpu else {}),
                    },
                )
                entry["dtypes"] = in_dtype_order([*entry["dtypes"], *s.dtypes])
    return [entries[k] for k in sorted(entries, key=lambda k: k[:5] + (k[5],))]


def _print_runners(matrix: list[dict[str, Any]]) -> None:
    """One line for each GPU type listed with another's recipes: ``h200 runs the h100 recipe (...)``."""
    from llmb.recipes.gpus import runs_note

    for gpu in dict.fromkeys(e["gpu"] for e in matrix if e.get("runs_recipes_of")):
        click.echo(fit_text(f"\n{runs_note(gpu)}."))


def _print_deprecated(workloads: list) -> None:
    deprecated = [w for w in workloads if w.deprecated]
    if not deprecated:
        return
    click.echo(fit_text("\nDeprecated (still listed and runnable here):"))
    for w in deprecated:
        click.echo(fit_text(f"  {w.name}: {w.deprecated.describe()}."))


def _print_errata(workload) -> None:
    errata = [e for v in workload.variants for e in v.errata] + list(workload.notes)
    if not errata:
        return
    click.echo(
        fit_text(f"\nErrata of {workload.name}'s published recipes (docs/recipes-and-errata.md):")
    )
    for e in errata:
        click.echo(fit_text(f"  [{e.id}] ({e.kind}) {e.recipe_says}.\n      llmb: {e.resolution}."))


@click.command("list")
@click.argument("workload", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def list_command(ctx: click.Context, workload: str | None, as_json: bool) -> None:
    """Show the support matrix: for each workload, variant and size, the GPU
    types, dtypes and GPU counts its published recipes cover."""
    host = get_host(ctx)
    chosen = [host.workload(workload)] if workload else list(host.workloads().values())
    if as_json:
        emit_json(support_matrix(chosen))
        return
    matrix = support_matrix(chosen, runners_too=True)
    if not matrix:
        click.echo("No workloads installed. Install one, e.g. pip install llmb-plugin-llama31.")
        return
    rows = []
    for e in matrix:
        counts = (
            f"{e['min_gpus']}-{e['max_gpus']}" if e["range"] else _compact(tuple(e["tested_gpus"]))
        )
        rows.append(
            [
                e["workload"],
                e["variant"],
                e["size"],
                e["gpu"],
                ",".join(e["dtypes"]),
                counts,
                e["scaling"],
            ]
        )
    click.echo(
        render_table(
            # every value but the GPU counts is one a user types (--variant, --size, ...): never cut; a
            # list of counts is wrapped after a comma when nothing else makes the table fit
            [
                "WORKLOAD",
                "VARIANT",
                "SIZE",
                "GPU",
                "DTYPES",
                Column("GPUS", squeeze=12, cut="wrap"),
                "SCALING",
            ],
            rows,
        )
    )
    _print_deprecated(chosen)
    _print_runners(matrix)
    click.echo(
        fit_text(
            "\nGPU counts: a-b is a tested range; a list names the tested counts. Counts\n"
            "between listed ones are accepted when they give a whole number of nodes and a\n"
            "valid layout, with a 'not tested' warning; counts above the largest run with a\n"
            "'not validated' warning.\n"
            "The first variant of a workload is its default. Details of one configuration:\n"
            "llmb plan WORKLOAD --size S --gpu G --dtype D --gpus N"
        )
    )
    if workload:
        _print_errata(chosen[0])
