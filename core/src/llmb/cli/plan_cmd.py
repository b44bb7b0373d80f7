"""``llmb plan``: the resolved recipe and everything known before a run."""

from __future__ import annotations

from dataclasses import replace

import click

from llmb.cli import get_host
from llmb.cli.output import emit_json, fit_text
from llmb.cli.run_options import run_options
from llmb.figures import figure
from llmb.recipes.gpus import MAX_GPUS_PER_NODE


def recipe_options(func):
    """The options that select a recipe, shared by every command that runs one.
    Each falls back to the recipe READMEs' environment variable (flags win)."""
    options = [
        click.option("--size", envvar="MODEL_SIZE", help="Model size, e.g. 8b. [env: MODEL_SIZE]"),
        click.option(
            "--gpu", envvar="GPU_TYPE", help="GPU type, e.g. h100, b200, gb200. [env: GPU_TYPE]"
        ),
        click.option("--dtype", envvar="DTYPE", help="Precision: bf16, fp8 or nvfp4. [env: DTYPE]"),
        click.option(
            "--gpus", type=int, envvar="JOB_TOTAL_GPUS", help="Total GPUs. [env: JOB_TOTAL_GPUS]"
        ),
        click.option(
            "--strong-scaling/--weak-scaling",
            default=False,
            envvar="STRONG_SCALING",
            help="Keep GBS constant across GPU counts (Nemotron-4). [env: STRONG_SCALING]",
        ),
        click.option(
            "--variant", help="Recipe variant, e.g. nemo2 for Llama 3.1's NeMo 2 recipes."
        ),
        click.option(
            "--gpus-per-node",
            type=click.IntRange(min=1, max=MAX_GPUS_PER_NODE),
            envvar="GPUS_PER_NODE",
            help="GPUs per node (default: 4 for GB200/GB300, 8 otherwise). [env: GPUS_PER_NODE]",
        ),
        click.option(
            "--set",
            "settings",
            multiple=True,
            metavar="KEY=VALUE",
            help="Override a recipe field (tp, pp, cp, ep, etp, vp, mbs, gbs, seq_len, layers, "
            "fsdp, cuda_graphs, steps, recompute_layers, offload_layers). Repeatable.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def build_request(
    workload, size, gpu, dtype, gpus, strong_scaling, variant, gpus_per_node, settings
):
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


def _layers(count: int) -> str:
    return f"{count} layer{'s' if count != 1 else ''}"


def _memory_options(r) -> str:
    """Recompute and CPU offload, as the frameworks are told them."""
    recompute = (
        f"recompute {_layers(r.recompute_layers)} (full, block method)"
        if r.recompute_layers
        else "recompute: none"
    )
    offload = (
        f"CPU offload of {_layers(r.offload_layers)}' activations (production engine; the torch engine "
        f"keeps them on the GPU)"
        if r.offload_layers
        else "offload: none"
    )
    return f"{recompute}; {offload}"


def _flops_use_lines(plan) -> list[str]:
    """Which count each engine's TFLOP/s/GPU and MFU are on: a cluster run's first, then a proxy's here.
    (The counts themselves, and their ratio, are the model FLOPs lines above.)"""
    from llmb.recipes.planning import FRAMEWORK_TITLES, MEGATRON_BRIDGE

    lines = []
    for use in sorted(plan.flops_use, key=lambda u: u.engine == "torch"):
        engine = (
            "a --proxy run here (torch engine)"
            if use.engine == "torch"
            else f"on a cluster ({FRAMEWORK_TITLES.get(use.engine, use.engine)})"
        )
        if use.tflops is None:
            text = f"MFU on {use.words(use.mfu)} (its log gives no TFLOP/s/GPU)"
        elif use.tflops == use.mfu:
            text = f"TFLOP/s/GPU and MFU on {use.words(use.tflops)}" + (
                ", computed: the TFLOP/s its log gives are not valid" if use.computed else ""
            )
        else:
            text = (
                f"TFLOP/s/GPU on {use.words(use.tflops)} (its log's), MFU on {use.words(use.mfu)}"
            )
        if use.engine != "torch" and use.mfu == MEGATRON_BRIDGE:
            text += ", as its log gives them and the published recipe computes MFU"
        lines.append(f"{engine}: {text}")
    return lines


def _expected_lines(plan) -> list[str]:
    from llmb.recipes.planning import published_mfu_bf16_pct

    e, made, r = plan.expected, plan.expected_throughput, plan.recipe
    at_bf16 = published_mfu_bf16_pct(e) if e.dtype != "bf16" else None
    tokens = (
        figure(made.tokens_per_s, 0)
        if "tokens_per_s" in made.computed
        else _count(made.tokens_per_s)
    )
    days = figure(made.days_1t, 1) if "days_1t" in made.computed else _na(made.days_1t)
    # a type that runs another's recipe is shown that type's figure (an H200 the H100's)
    whose = f"the {e.gpu}'s published figure: " if e.gpu != r.gpu else ""
    lines = [
        f"  expected     {whose}step {e.step_time_s:g} s, {tokens} tokens/s, MFU {e.mfu_label()}"
        + (f" ({at_bf16:g}% of the BF16 peak)" if at_bf16 is not None else "")
        + f", {days} days per 1T tokens ({e.provenance.describe()})"
    ]
    if made.computed:
        which = " and ".join(
            {"tokens_per_s": "tokens/s", "days_1t": "days"}[c] for c in made.computed
        )
        gbs = e.gbs or r.gbs
        lines.append(
            f"               {which} computed from the published step time (sequence {r.seq_len} x "
            f"GBS {gbs} / {e.step_time_s:g} s): the published recipe prints none"
        )
    if e.erratum and e.printed_mfu_pct is None:
        lines.append(
            f"               note: the published figure is affected by erratum [{e.erratum}]"
        )
    return lines


def _held_to_line(held: dict) -> str:
    """Which figure a run is held to (issue 40: one target, with where it comes from)."""
    from llmb.results.compare import DEFAULT_THRESHOLD

    step = held["step_time_s"]
    return (
        f"  held to      the published step time, {step:g} s at GBS {held['gbs']} on {held['gpus']} GPUs: "
        f"a run passes at {DEFAULT_THRESHOLD:.0%} of its throughput (a step of at most "
        f"{step / DEFAULT_THRESHOLD:.4g} s); its TFLOP/s/GPU and MFU are shown, not judged (on "
        + (
            f"{held['shown_on']}, a torch-engine run's on the workload's formula)"
            if held["shown_on"] != "the workload's formula"
            else "the workload's formula)"
        )
    )


def _arch_words(arch, seq_len: int) -> str:
    parts = [
        _layers(arch.layers),
        f"hidden {arch.hidden}",
        f"FFN {arch.ffn}",
        f"{arch.heads} heads of {arch.head_dim} in {arch.query_groups} query group"
        + ("s" if arch.query_groups != 1 else ""),
    ]
    if arch.experts:
        parts.append(
            f"{arch.experts} experts (top-{arch.topk}, expert FFN {arch.moe_ffn}"
            + (f", shared expert FFN {arch.shared_expert_ffn}" if arch.shared_expert_ffn else "")
            + (
                f", MoE in 1 of every {arch.moe_layer_step} layers"
                if arch.moe_layer_step > 1
                else ""
            )
            + ")"
        )
    if arch.mamba_heads:
        parts.append(
            f"Mamba2 {arch.mamba_heads} heads of {arch.mamba_head_dim}, state {arch.mamba_state}, "
            f"{arch.mamba_groups} group{'s' if arch.mamba_groups != 1 else ''}"
        )
    if arch.layer_pattern:
        parts.append(f"pattern {arch.layer_pattern}")
    parts += [f"vocab {arch.vocab}", f"sequence {seq_len}"]
    return ", ".join(parts)


def _proxy_lines(plan) -> list[str]:
    """What ``llmb run --proxy`` runs, and every difference from the published recipe."""
    p = plan.proxy
    run, ran = p.run, p.run.ran
    where = "CPU" if run.device == "cpu" else "GPUs"
    taken = f"the published recipe at {run.published.gpus} GPUs" + (
        " (its smallest tested scale)" if run.smallest_scale else ""
    )
    lines = [
        "",
        f"{'CPU proxy' if run.flag.startswith('--proxy') else 'shallow run'}: llmb run {run.flag} "
        f"runs a {run.label} model on the torch engine, {ran.gpus} "
        f"rank{'s' if ran.gpus != 1 else ''} on this machine's {where}, cut from {taken}",
        f"  model        {_arch_words(run.arch, run.seq_len)}",
        f"               {figure(p.params, 0)} parameters"
        + (
            f", {p.flops.per_sample:.4e} FLOPs per sample by the workload's formula"
            if p.flops
            else ""
        ),
        f"  parallelism  data parallel over its ranks: TP {ran.tp}  PP {ran.pp}  CP {ran.cp}  EP {_na(ran.ep)}  "
        f"VP {_na(ran.vp)}  ->  DP {ran.dp}",
        f"  batch        MBS {ran.mbs}  GA {ran.ga} (the recipe's)  ->  GBS {ran.gbs} = MBS*GA*ranks",
        f"  precision    {run.compute_dtype} (the recipe's {run.published.dtype}"
        + (", on CPU)" if run.device == "cpu" else ")"),
        "  differs      " + (", ".join(d.text() for d in run.differences) or "nothing"),
    ]
    if p.fit is not None:
        m = p.fit.memory
        lines.insert(2, f"  fit          {', '.join(p.fit.differences()) or 'the whole model'}")
        held = (
            f"a CPU rank's {p.fit.capacity_gb:.1f} GiB{p.fit.capacity_words}"
            if p.fit.capacity_words
            else f"the {r_gpu(p)}'s {p.fit.capacity_gb:g} GiB"
        )
        lines.insert(
            3,
            f"               ~{m.total_gb:.1f} GiB per {'rank' if p.fit.capacity_words else 'GPU'} by "
            f"the torch engine's estimate (weights {m.weights_gb:.1f}, gradients {m.gradients_gb:.1f}, "
            f"optimizer {m.optimizer_gb:.1f}, activations {m.activations_gb:.1f}, logits "
            f"{m.logits_gb:.1f}); at most {p.fit.budget_gb:.1f} of {held}",
        )
    return lines


def r_gpu(proxy_plan) -> str:
    return proxy_plan.run.published.gpu


def render_plan(plan) -> str:
    r = plan.recipe
    node_word = "node" if r.nodes == 1 else "nodes"
    lines = [
        f"{r.workload} {r.size} {r.dtype} on {r.gpus} {r.gpu} GPUs ({r.nodes} {node_word} x {r.gpus_per_node})"
        f" - {r.variant} recipe, run by {r.framework}",
        f"source: {r.provenance.describe() if r.provenance else '-'}"
        + ("" if r.validated else f"  [{r.scale_status.upper()} at this scale]"),
        "",
        f"  parallelism  TP {r.tp}  PP {r.pp}  CP {r.cp}  EP {_na(r.ep)}  ETP {_na(r.etp)}  VP {_na(r.vp)}"
        f"  ->  DP {r.dp} = GPUs/(TP*PP*CP)",
        f"  batch        MBS {r.mbs}  GBS {r.gbs} ({r.gbs_rule}, {r.scaling} scaling)"
        f"  ->  GA {r.ga} = GBS/(MBS*DP)",
        f"  model        {r.layers} layers, sequence {r.seq_len}, FSDP {'on' if r.fsdp else 'off'}, "
        f"CUDA graphs {'on' if r.cuda_graphs else 'off'}, {r.steps} steps",
    ]
    if plan.variant.upstream:  # the public recipe these tables are, and the current release's
        lines.insert(2, f"follows: {plan.variant.upstream.follows(plan.container)}")
    if plan.flops:
        terms = " + ".join(f"{name} {value:.4e}" for name, value in plan.flops.terms.items())
        lines.append(
            f"  model FLOPs  {plan.flops.per_sample:.4e} per sample by the workload's formula = {terms}"
        )
        lines.append(f"               ({plan.flops.formula})")
    if plan.megatron_step_flops:
        ratio = plan.megatron_ratio
        lines.append(
            f"               {plan.megatron_step_flops:.4e} per step by Megatron-Bridge's count (what its "
            f"log's MODEL_TFLOP/s/GPU counts; GBS {r.gbs})"
            + (f", {figure(ratio, 2)}x the formula's" if ratio is not None else "")
        )
    used = _flops_use_lines(plan)
    lines += [f"  FLOPs used   {used[0]}"] + [f"               {line}" for line in used[1:]]
    m = plan.memory
    capacity = f" of {m.capacity_gb:g} GiB" if m.capacity_gb else ""
    lines.append(
        f"  memory       ~{m.total_gb:.1f} GiB per GPU{capacity} (stage {m.stage}: weights {m.weights_gb:.1f}, "
        f"gradients {m.gradients_gb:.1f}, optimizer {m.optimizer_gb:.1f}, activations {m.activations_gb:.1f}, "
        f"logits {m.logits_gb:.1f})"
    )
    lines.append(f"               {_memory_options(r)}")
    if plan.expected:
        lines += _expected_lines(plan)
    else:
        variant = plan.workload.variant(r.variant) or plan.workload.default_variant
        lines.append(
            f"  expected     {plan.workload.cite(variant.seed)} publishes no figure for this configuration"
            if not r.overrides
            else "  expected     none of its own: the configuration is tuned (--set)"
        )
    if plan.tuned:
        lines.append("  tuned        " + ", ".join(t.text() for t in plan.tuned))
        official = plan.official_expected
        lines.append(
            f"               the official configuration's published figure: step {official.step_time_s:g} s "
            f"({official.provenance.describe()}); results and compare show the run beside it"
            if official
            else "               the official configuration has no published figure"
        )
    for other in plan.other_figures:
        lines.append(
            f"               {other.label}: {other.headline()}, {_count(other.tokens_per_s)} tokens/s "
            f"({other.describe()}; llmb compare --reference {other.source})"
        )
    if (held := plan.held_to) is not None:
        lines.append(_held_to_line(held))
    if not plan.expected and not plan.other_figures and not r.overrides:
        lines.append("               no other published document has a figure for it either")
    elif not plan.expected and not r.overrides:
        judge = next((f for f in plan.other_figures if f.source == plan.judged_against), None)
        lines.append(
            f"               results, compare, report and certify judge a run by {judge.label}"
            if judge
            else "               results, compare, report and certify judge it by none: no document "
            f"publishes a figure at GBS {r.gbs}"
        )
    from llmb.recipes.gpus import peak_source

    peak = peak_source(r.gpu, r.dtype)
    lines.append(
        f"  MFU peak     {r.dtype.upper()} {peak.describe()}"
        if peak
        else f"  MFU peak     none: no published dense {r.dtype.upper()} peak for {r.gpu}, so no MFU"
    )
    lines.append(f"  time limit   {plan.time_limit.describe()}")
    if r.env:
        lines.append("  env          " + " ".join(f"{k}={v}" for k, v in r.env))
    for note in r.adjustments:
        lines.append(f"  adjusted     {note}")
    if plan.proxy:
        lines += _proxy_lines(plan)
    if plan.warnings:
        lines.append("")
        lines.append("warnings:")
        lines += [f"  - {w}" for w in plan.warnings]
    return "\n".join(lines)


def _given_run_options(ctx, run_kw: dict) -> list[str]:
    """The run options given on the command line or by their variables (not their defaults)."""
    from click.core import ParameterSource

    sources = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    return [name for name in run_kw if ctx.get_parameter_source(name) in sources]


# What only a submission makes: the job's id and its directory. plan leaves them out and, wherever the
# run's configuration names the directory (the framework's paths, the checkpoints'), shows RUN_DIR.
MADE_BY_SUBMITTING = ("job_id", "run_dir", "inner_dir", "log")
RUN_DIR = "<run dir>"


def without_run_dir(value, run_dir: str):
    """``value`` (JSON data) with ``run_dir`` written as ``RUN_DIR`` wherever a string holds it."""
    if isinstance(value, str):
        return value.replace(run_dir, RUN_DIR)
    if isinstance(value, dict):
        return {key: without_run_dir(item, run_dir) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [without_run_dir(item, run_dir) for item in value]
    return value


def run_section(prepared) -> dict:
    """What ``llmb run`` with the same options would run: ``llmb run --dry-run``'s run_spec, field for
    field, less what only a submission makes (``MADE_BY_SUBMITTING``), and how it would be submitted."""
    spec = prepared.spec.to_dict()
    shown = {
        key: without_run_dir(value, spec["run_dir"])
        for key, value in spec.items()
        if key not in MADE_BY_SUBMITTING
    }
    return {
        **shown,
        "backend": prepared.job.backend,
        "layers": spec["arch"].get("layers"),
        "time_limit": prepared.submit.time_limit,
        "framework_args": list(prepared.record.get("framework_args") or ()),
        "tuned": list(prepared.record.get("tuned") or ()),
        # what a submission would refuse (none: it would go ahead)
        "would_refuse": list(prepared.would_refuse),
    }


def _run_lines(run: dict) -> list[str]:
    where = f"{run['backend']}, {run['ranks']} rank{'s' if run['ranks'] != 1 else ''}"
    if run["nodes"]:
        where += (
            f" ({run['nodes']} node{'s' if run['nodes'] != 1 else ''} x {run['ranks_per_node']})"
        )
    lines = [
        "",
        "this run (llmb run with these options; plan writes and submits nothing):",
        f"  engine       {run['engine']} on {run['device']} ({run['compute_dtype']}), {where}",
        f"  experiment   {run['experiment']}",
        f"  batch        MBS {run['mbs']}  GA {run['ga']}  GBS {run['gbs']}, sequence {run['seq_len']}, "
        f"{run['layers']} layers, {run['steps']} steps",
    ]
    if run["time_limit"]:
        lines.append(f"  time limit   {run['time_limit']}")
    if run["container"] and run["backend"] != "local":
        lines.append(f"  container    {run['container']}")
    for tuned in run["tuned"]:
        if isinstance(tuned, dict):
            lines.append(f"  tuned        {tuned.get('setting')} = {tuned.get('run')}")
    lines += [f"  - {w}" for w in run.get("warnings", ())]
    lines += [f"  - a real run would stop here: {why}" for why in run.get("would_refuse", ())]
    return lines


@click.command("plan")
@click.argument("workload")
@recipe_options
@run_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@click.pass_context
def plan_command(
    ctx,
    workload,
    size,
    gpu,
    dtype,
    gpus,
    strong_scaling,
    variant,
    gpus_per_node,
    settings,
    as_json,
    **run_kw,
):
    """Resolve WORKLOAD's recipe for a size, GPU type, dtype and GPU count and
    show it: parallel layout with DP and GA derived, model FLOPs and which
    count TFLOP/s and MFU use, a per-GPU memory estimate with recompute and
    offload, the published recipe's numbers where it has them, and any
    warnings or recipe errata (errors in the published recipe) that apply.
    It takes every option llmb run takes: --proxy, --fit and --layers show what
    that run would run and how it differs from the published recipe; the others
    (--engine, --backend, --steps, --framework-arg, --time-limit, --image, ...)
    add what llmb run with them would run. Nothing is written or submitted."""
    host = get_host(ctx)
    request = build_request(
        workload, size, gpu, dtype, gpus, strong_scaling, variant, gpus_per_node, settings
    )
    proxy, fit = run_kw.get("proxy"), bool(run_kw.get("fit"))
    run = None
    if _given_run_options(ctx, run_kw):
        # what llmb run with these options would run, prepared as llmb run --dry-run prepares it
        from llmb.errors import UsageError
        from llmb.lifecycle.prepare import plan_proxy, plan_with_proxy, prepare
        from llmb.lifecycle.run_option_values import run_inputs

        reduced_request, options, backend = run_inputs(run_kw, request)
        try:
            prepared = prepare(host, reduced_request, options, backend, describing=True)
        except UsageError:
            if not (proxy or fit):
                raise
            # llmb run would refuse the reduction on this machine (--fit: no slice fits a CPU rank's
            # memory): the plan shows it, saying why, where it is the reason
            plan = plan_with_proxy(host, request, proxy, fit)
            if plan.proxy is None or plan.proxy.refusal is None:
                raise
        else:
            plan, run = prepared.plan, run_section(prepared)
            if proxy or fit:
                ranks = prepared.spec.ranks
                plan = replace(plan, proxy=plan_proxy(host, plan, proxy, ranks, fit))
            shown = {*plan.warnings, plan.proxy.run.warning() if plan.proxy else None}
            run["warnings"] = [w for w in prepared.warnings if w not in shown]
    else:  # the recipe alone: none of a run's machinery is imported
        from llmb.recipes.planning import make_plan

        plan = make_plan(host, request)
    if as_json:
        emit_json({**plan.as_dict(), **({"run": run} if run else {})})
    else:
        text = render_plan(plan)
        if run:
            text += "\n" + "\n".join(_run_lines(run))
        click.echo(fit_text(text))
