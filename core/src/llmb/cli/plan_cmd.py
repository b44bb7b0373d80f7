"""``llmb plan``: the resolved recipe and everything known before a run."""

from __future__ import annotations

import click

from llmb.cli import get_host
from llmb.cli.output import emit_json
from llmb.recipes.gpus import MAX_GPUS_PER_NODE


def recipe_options(func):
    """The options that select a recipe, shared by every command that runs one.
    Each falls back to the recipe READMEs' environment variable (flags win)."""
    options = [
        click.option("--size", envvar="MODEL_SIZE", help="Model size, e.g. 8b. [env: MODEL_SIZE]"),
        click.option("--gpu", envvar="GPU_TYPE", help="GPU type, e.g. h100, b200, gb200. [env: GPU_TYPE]"),
        click.option("--dtype", envvar="DTYPE", help="Precision: bf16, fp8 or nvfp4. [env: DTYPE]"),
        click.option("--gpus", type=int, envvar="JOB_TOTAL_GPUS", help="Total GPUs. [env: JOB_TOTAL_GPUS]"),
        click.option("--strong-scaling/--weak-scaling", default=False, envvar="STRONG_SCALING",
                     help="Keep GBS constant across GPU counts (Nemotron-4). [env: STRONG_SCALING]"),
        click.option("--variant", help="Recipe variant, e.g. nemo2 for Llama 3.1's NeMo 2 recipes."),
        click.option("--gpus-per-node", type=click.IntRange(min=1, max=MAX_GPUS_PER_NODE), envvar="GPUS_PER_NODE",
                     help="GPUs per node (default: 4 for GB200/GB300, 8 otherwise). [env: GPUS_PER_NODE]"),
        click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
                     help="Override a recipe field (tp, pp, cp, ep, etp, vp, mbs, gbs, seq_len, layers, "
                          "fsdp, cuda_graphs, steps, recompute_layers, offload_layers). Repeatable."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def build_request(workload, size, gpu, dtype, gpus, strong_scaling, variant, gpus_per_node, settings):
    from llmb.recipes.overrides import parse_overrides
    from llmb.recipes.records import RecipeRequest

    return RecipeRequest(
        workload=workload,
        size=size,
        gpu=gpu,
        dtype=dtype,
        gpus=gpus,
        variant=variant,
        strong_scaling=strong_scaling,
        gpus_per_node=gpus_per_node,
        overrides=parse_overrides(settings),
    )


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _na(value: object) -> str:
    return "-" if value is None else str(value)


def render_plan(plan) -> str:
    r = plan.recipe
    node_word = "node" if r.nodes == 1 else "nodes"
    lines = [
        f"{r.workload} {r.size} {r.dtype} on {r.gpus} {r.gpu} GPUs ({r.nodes} {node_word} x {r.gpus_per_node})"
        f" - {r.variant} recipe, run by {r.framework}",
        f"source: {r.provenance.describe() if r.provenance else '-'}"
        + ("" if r.validated else "  [NOT VALIDATED at this scale]"),
        "",
        f"  parallelism  TP {r.tp}  PP {r.pp}  CP {r.cp}  EP {_na(r.ep)}  ETP {_na(r.etp)}  VP {_na(r.vp)}"
        f"  ->  DP {r.dp} = GPUs/(TP*PP*CP)",
        f"  batch        MBS {r.mbs}  GBS {r.gbs} ({r.gbs_rule}, {r.scaling} scaling)"
        f"  ->  GA {r.ga} = GBS/(MBS*DP)",
        f"  model        {r.layers} layers, sequence {r.seq_len}, FSDP {'on' if r.fsdp else 'off'}, "
        f"CUDA graphs {'on' if r.cuda_graphs else 'off'}, {r.steps} steps",
    ]
    if plan.flops:
        terms = " + ".join(f"{name} {value:.4e}" for name, value in plan.flops.terms.items())
        lines.append(f"  model FLOPs  {plan.flops.per_sample:.4e} per sample = {terms}")
        lines.append(f"               ({plan.flops.formula})")
    if plan.megatron_step_flops:
        lines.append(f"               {plan.megatron_step_flops:.4e} per step by Megatron-Bridge's count (GBS {r.gbs})")
    m = plan.memory
    capacity = f" of {m.capacity_gb:g} GB" if m.capacity_gb else ""
    lines.append(
        f"  memory       ~{m.total_gb:.1f} GB per GPU{capacity} (stage {m.stage}: weights {m.weights_gb:.1f}, "
        f"gradients {m.gradients_gb:.1f}, optimizer {m.optimizer_gb:.1f}, activations {m.activations_gb:.1f}, "
        f"logits {m.logits_gb:.1f})"
    )
    if plan.expected:
        from llmb.recipes.planning import published_mfu_bf16_pct

        e = plan.expected
        at_bf16 = published_mfu_bf16_pct(e) if e.dtype != "bf16" else None
        lines.append(
            f"  expected     step {e.step_time_s:g} s, {_count(e.tokens_per_s)} tokens/s, MFU {e.mfu_label()}"
            + (f" ({at_bf16:g}% of the BF16 peak)" if at_bf16 is not None else "")
            + f", {_na(e.days_1t)} days per 1T tokens ({e.provenance.describe()})"
        )
        if e.erratum and e.printed_mfu_pct is None:
            lines.append(f"               note: the published figure is affected by erratum [{e.erratum}]")
    else:
        variant = plan.workload.variant(r.variant) or plan.workload.default_variant
        lines.append(f"  expected     {plan.workload.cite(variant.seed)} publishes no figure for this configuration"
                     if not r.overrides else "  expected     no published figure: the configuration is overridden")
    for figure in plan.other_figures:
        lines.append(f"               {figure.label}: {figure.headline()}, {_count(figure.tokens_per_s)} tokens/s "
                     f"({figure.describe()}; llmb compare --reference {figure.source})")
    if not plan.expected and not plan.other_figures and not r.overrides:
        lines.append("               no other published document has a figure for it either")
    from llmb.recipes.gpus import peak_source

    peak = peak_source(r.gpu, r.dtype)
    lines.append(f"  MFU peak     {r.dtype.upper()} {peak.describe()}" if peak else
                 f"  MFU peak     none: no published dense {r.dtype.upper()} peak for {r.gpu}, so no MFU")
    if r.env:
        lines.append("  env          " + " ".join(f"{k}={v}" for k, v in r.env))
    for note in r.adjustments:
        lines.append(f"  adjusted     {note}")
    if plan.warnings:
        lines.append("")
        lines.append("warnings:")
        lines += [f"  - {w}" for w in plan.warnings]
    return "\n".join(lines)


@click.command("plan")
@click.argument("workload")
@recipe_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@click.pass_context
def plan_command(ctx, workload, size, gpu, dtype, gpus, strong_scaling, variant, gpus_per_node, settings, as_json):
    """Resolve WORKLOAD's recipe for a size, GPU type, dtype and GPU count and
    show it: parallel layout with DP and GA derived, model FLOPs, a per-GPU
    memory estimate, the published recipe's numbers where it has them, and
    any warnings or recipe errata (errors in the published recipe) that apply."""
    from llmb.recipes.planning import make_plan

    host = get_host(ctx)
    request = build_request(workload, size, gpu, dtype, gpus, strong_scaling, variant, gpus_per_node, settings)
    plan = make_plan(host, request)
    if as_json:
        emit_json(plan.as_dict())
    else:
        click.echo(render_plan(plan))
