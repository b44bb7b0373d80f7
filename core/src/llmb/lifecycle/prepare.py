"""Preparing a run: ``llmb run``'s request -> a ``Prepared`` run, writing nothing and creating no directory.

1. check the options that need no recipe (secrets in ``--env``, ``--profile`` with ``--nccl-trace``);
2. resolve the recipe (proxies take the seed's smallest tested scale when needed), plan it and pick the
   engine (``choose_engine``);
3. check where it runs: this machine (the local backend's own ``check``, the device, the production
   framework installed) or a cluster (the time limit derived from the plan);
4. what the engine runs for this recipe, one function per engine: ``torch_shape`` (device precision,
   proxy, the layout the torch engine runs and ``check_supported``) and ``production_shape`` with
   ``production_config`` (``--framework-arg``, the framework's ``build_config``);
5. the profilers' contributions, then the ``RunSpec``, ``recipe.json``'s record and the job record to be.

Every user error is raised here, before anything is written. ``llmb.lifecycle.submit`` then writes what
was prepared, and a dry run is ``prepare`` plus the backend's ``describe``.

The job id and the experiment directory are chosen, not created: the id is a fresh ``new_job_id`` (6 random
hex digits), the directory ``experiment.locate``'s (the first timestamp from now that no run has taken).
Both are in the spec (the profilers and the paths embed them), so ``submit`` claims exactly these
(``runs.jobs.claim_job_dir``, ``runs.experiment.claim``); when another submission took one in between (a
random id drawn twice, two runs of the same experiment in the same second) it says so and the run is
prepared again (``submit.submit_fresh``). Nothing is written before the claims, so a retry leaves nothing
behind.

``plan_proxy`` is ``llmb plan --proxy``'s view of the same torch-engine proxy.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, replace

from llmb import redaction
from llmb.env_names import env_name_problem
from llmb.errors import PluginError, UsageError
from llmb.plugins.host import PluginHost
from llmb.recipes.fit import largest_slice, torch_estimate
from llmb.recipes.gpus import gpu_type
from llmb.recipes.memory import MARGIN, MemoryEstimate, estimate_memory
from llmb.recipes.planning import Plan, ProxyPlan, make_plan
from llmb.recipes.proxies import (
    ProxyRun,
    proxy_flag,
    proxy_recipe,
    proxy_run,
    reduction_conflict,
)
from llmb.recipes.records import ModelArch, Recipe, RecipeRequest
from llmb.recipes.time_limit import derive as derive_time_limit
from llmb.redaction import credential_in, is_secret_name
from llmb.runs import experiment, job_env
from llmb.runs.capability import detect
from llmb.runs.experiment import ExperimentDir
from llmb.runs.jobs import Job, new_job_id, now
from llmb.runs.profiling import DEFAULT_WINDOW, ProfileRequest, fit_window
from llmb.runs.runspec import (
    NCCL_TRACE_STEPS,
    SECRET_VARIABLES,
    ParallelLayout,
    RunOptions,
    RunSpec,
    SubmitOptions,
    check_machine,
    checkpoint_dirs,
    compute_dtype,
    find_checkpoint,
    proxy_arch,
    torch_engine_layout,
)


@dataclass(frozen=True)
class Prepared:
    """A run ready to submit: nothing of it is written yet."""

    spec: RunSpec
    job: Job  # the record to be
    plan: Plan | None  # None: not a recipe's run (llmb preflight)
    warnings: tuple[str, ...]
    record: dict  # recipe.json: the plan, plus what actually runs
    submit: SubmitOptions  # what the backend is given: the options, with the derived time limit
    where: ExperimentDir  # from experiment.locate: submit creates exactly these paths
    container: str | None  # the recipe's container, for provenance's submission section
    secret_names: frozenset[str]  # the variables whose values are never written down
    # --exclude-from: the preflight file that chose the nodes to keep off
    preflight: dict | None = None
    # the warning that its steps end before the statistics window (the run can only be too_short)
    too_short: str | None = None
    # prepared to be described (a dry run, a plan): what a submission would refuse (this machine's GPUs,
    # too few steps for the window...; none: it would go ahead)
    would_refuse: tuple[str, ...] = ()


@dataclass(frozen=True)
class Shape:
    """What the engine runs for the recipe: where, in what precision, the model, layout and batch."""

    device: str
    dtype: str  # the compute precision
    arch: ModelArch
    seq_len: int
    layout: ParallelLayout
    ran: Recipe  # named after what runs (a proxy's recipe, data parallel over its ranks)
    mbs: int
    ga: int
    gbs: int
    proxy: ProxyRun | None = None


@dataclass
class Contributions:
    """The run's environment, wrapper and steps once the profilers and tracing have had their say."""

    env: dict
    steps: int
    wrapper: tuple[str, ...] = ()
    engine_profile: dict | None = None


def folded_memory_note(plan: Plan, layout: ParallelLayout, ga: int, ranks: int) -> str:
    """The memory estimate of a row whose CP the torch engine runs as DP (whole sequences per GPU), beside
    the plan's estimate of the row as published."""
    folded = replace(plan.recipe, cp=layout.cp, dp=layout.dp(ranks), ga=ga)
    estimate = estimate_memory(folded, plan.arch, plan.memory.capacity_gb)
    note = (
        f"with CP run as DP the memory estimate is {estimate.total_gb:.1f} GiB per GPU "
        f"(the row as published: {plan.memory.total_gb:.1f} GiB"
    )
    if estimate.capacity_gb is None:
        return note + ")."
    note += f"; the {plan.recipe.gpu} has {estimate.capacity_gb:g} GiB)"
    if estimate.exceeds_margin:
        return note + ": this will not fit; use the production engine for this row."
    if estimate.exceeds_capacity:
        return (
            note
            + f": just above capacity, within the estimate's ~{MARGIN:.0%} margin, so it may still fit."
        )
    return note + "."


def choose_engine(options: RunOptions, backend_name: str, framework: str) -> str:
    """``torch`` for proxies of a CPU-sized shrink and on this machine, the
    recipe's production framework on a cluster (``--engine`` decides when given)."""
    if options.engine == "torch":
        return "torch"
    if options.engine == "production":
        if options.fit:
            raise UsageError(
                "--fit sizes a slice by the torch engine's memory; the production engine runs the "
                "published recipe's own layout (use --layers N for a shallower one)."
            )
        if options.proxy:
            raise UsageError(
                f"--proxy {options.proxy} is a torch-engine model; the production engine runs the "
                f"published recipe's architecture (use --layers N for a shallower one)."
            )
        return framework
    if options.engine is not None:
        raise UsageError(f"unknown --engine {options.engine!r}; valid: torch, production.")
    return "torch" if backend_name == "local" or options.proxy else framework


def placement(ranks: int, per_node: int) -> tuple[int, int]:
    """(nodes, ranks per node): whole nodes, or one partly used node."""
    if ranks <= per_node:
        return 1, ranks
    if ranks % per_node:
        raise UsageError(
            f"{ranks} ranks do not fill whole {per_node}-rank nodes; use a multiple of {per_node} "
            f"or set --gpus-per-node."
        )
    return ranks // per_node, per_node


def check_options(host: PluginHost, options: RunOptions) -> frozenset[str]:
    """The options no recipe is needed to refuse; the names of the secret variables."""
    if options.nccl_trace and options.profile:
        raise UsageError(
            "--profile and --nccl-trace cannot be combined (the published recipes run them "
            "separately: a profile of a traced run is not valid for comparison)."
        )
    backend_secrets = {name for backend in host.backends().values() for name in backend.secrets}
    declared = frozenset({*SECRET_VARIABLES, *backend_secrets, *options.submit.secrets})
    redaction.declare(declared)  # every file this command writes masks them (llmb.redaction)
    known = redaction.environment_secrets()
    for name, value in options.env:
        what = "a secret" if is_secret_name(name, declared) else credential_in(value, known)
        if what:
            raise UsageError(
                f"--env {name}=...: {what} would be written into the job's files; export {name} in "
                f"this shell instead (HF_TOKEN always travels that way, a backend's credentials stay on "
                f"this machine; others with --secret {name})."
            )
    return declared


def where_it_runs(
    host: PluginHost,
    plan: Plan,
    options: RunOptions,
    backend_name: str,
    engine: str,
    ranks: int,
    warnings: list[str],
    here: list[str] | None = None,
) -> tuple[RunOptions, str]:
    """(options, device): this machine checked (the local backend), or the cluster's time limit derived.
    ``here``: the run is only described (a dry run, a plan): what this machine cannot run is appended to
    it, and the device is the one a machine that can run it would use, instead of a refusal."""
    check = getattr(host.backend_impl(backend_name), "check", None)
    # the backend's own refusals (LLMB_LOCAL_JOBS...) and warnings, before anything is written
    if check is not None:
        warnings += check(options.submit)
    recipe = plan.recipe
    if backend_name != "local":
        if (
            options.submit.time_limit is None
        ):  # none given (flag, variable, cluster file): the plan's
            limit = (
                plan.time_limit
                if not options.is_proxy
                else derive_time_limit(recipe.steps, None, "none", 0)
            )
            options = replace(options, submit=replace(options.submit, time_limit=limit.slurm))
        # A cluster's nodes are not this machine: the torch engine takes their GPUs when it finds any.
        return options, "auto" if engine == "torch" else "cuda"

    machine = detect()
    try:
        device, machine_warnings = check_machine(recipe, options, machine, ranks)
        warnings += machine_warnings
    except UsageError as exc:
        _refuse_or_note(exc, here)
        # as a machine that can run it would: a full-size run on GPUs, a proxy on this one's CPUs
        device = "cpu" if options.is_proxy and machine.gpus < ranks else "cuda"
    if device == "cuda" and machine.gpus:
        from llmb.runs.job_gpus import job_gpus

        # the GPUs the job will lock, as its supervisor finds them: a GPU named by a UUID that
        # cannot be resolved to its index is refused here, before anything is submitted (a dry
        # run too: how the GPUs are named is the user's to correct, not this machine's limit)
        job_gpus(device, ranks, {**os.environ, **dict(recipe.env), **dict(options.env)})
    if (
        engine != "torch"
        and importlib.util.find_spec("megatron") is None
        and importlib.util.find_spec("nemo") is None
    ):
        _refuse_or_note(
            UsageError(
                f"the production engine ({engine}) runs inside NVIDIA's NeMo container "
                f"({plan.container}); it is not installed here. "
                f"Use a cluster backend, or the torch engine (--engine torch)."
            ),
            here,
        )
    return options, device


def _refuse_or_note(exc: UsageError, here: list[str] | None) -> None:
    """A run to be submitted is refused what this machine cannot run; one only described (``here``, a
    dry run's or a plan's) notes it there."""
    if here is None:
        raise exc
    here.append(str(exc))


def _proxy(
    plan: Plan,
    options: RunOptions,
    arch: ModelArch,
    seq_len: int,
    ranks: int,
    engine: str,
    device: str,
    dtype: str,
    warnings: list[str],
) -> ProxyRun | None:
    """What a proxy runs and every difference from the published recipe, in one warning (llmb plan --proxy
    shows the same list); None for a run at full size."""
    if not options.is_proxy:
        return None
    proxy = proxy_run(
        plan.recipe,
        plan.arch,
        arch,
        seq_len,
        flag=proxy_flag(options.proxy, options.layers, options.fit),
        label=options.proxy_label,
        ranks=ranks,
        engine=engine,
        device=device,
        compute_dtype=dtype,
    )
    warnings.append(proxy.warning())
    return proxy


def _capacity_gb(recipe: Recipe) -> float | None:
    return gpu_type(recipe.gpu).memory_gb


@dataclass(frozen=True)
class RankMemory:
    """What one rank of a run may hold: a GPU's memory, or on this machine's CPU its share of the host's
    (its ranks share it)."""

    gb: float
    holder: str  # "h100", "CPU rank"
    words: str = ""  # where a CPU rank's share comes from

    def said(self) -> str:
        return (
            f"the {self.holder}'s {self.gb:g} GiB"
            if not self.words
            else (f"a CPU rank's {self.gb:.1f} GiB{self.words}")
        )


def rank_memory(recipe: Recipe, device: str, ranks: int) -> RankMemory | None:
    """One rank's memory on ``device``: the GPU type's, or on the CPU the host's memory over ``ranks``
    (``llmb.runs.capability.host_memory``); None where neither is known."""
    if device == "cpu":
        from llmb.runs.capability import host_memory

        host = host_memory()
        if host is None:
            return None
        return RankMemory(
            host.gb / ranks,
            "CPU rank",
            f": {host.describe()} over {ranks} rank{'s' if ranks != 1 else ''}",
        )
    capacity = _capacity_gb(recipe)
    return RankMemory(capacity, recipe.gpu) if capacity else None


def choose_fit(plan: Plan, options: RunOptions, ranks: int, device: str = "cuda") -> RunOptions:
    """``--fit``: ``options`` with the slice each of the run's ranks holds (``llmb.recipes.fit``): a GPU's
    memory, or on the CPU its share of this machine's, chosen for the layout and batch the torch engine
    runs it with (data parallel over ``ranks``)."""
    if not options.fit or options.fitted is not None:
        return options
    memory = rank_memory(plan.recipe, device, ranks)
    if memory is None:
        raise UsageError(
            f"--fit sizes the slice to the {'host' if device == 'cpu' else 'GPU'}'s memory, and llmb "
            f"has none on record for {'this machine' if device == 'cpu' else plan.recipe.gpu}; use "
            f"--layers N."
        )
    fitted = largest_slice(
        proxy_recipe(plan.recipe, ranks), plan.arch, memory.holder, memory.gb, memory.words
    )
    return replace(options, fitted=fitted)


def memory_breakdown(estimate: MemoryEstimate) -> str:
    """The estimate term by term, as a refusal shows it."""
    return (
        f"weights {estimate.weights_gb:.1f}, gradients {estimate.gradients_gb:.1f}, optimizer "
        f"{estimate.optimizer_gb:.1f}, activations {estimate.activations_gb:.1f}, logits "
        f"{estimate.logits_gb:.1f}: {estimate.total_gb:.1f} GiB"
    )


def what_fits(plan: Plan, ranks: int, device: str = "cuda") -> str:
    """What would fit one of the run's ranks: ``--fit``'s slice, and ``--layers N`` where layers alone do."""
    options = choose_fit(plan, RunOptions(fit=True), ranks, device)
    fitted = options.fitted
    assert fitted is not None
    arch = fitted.arch
    layers_alone = arch.experts == plan.arch.experts and arch.vocab == plan.arch.vocab
    return (
        f"--layers {arch.layers} or --fit fits ({', '.join(fitted.differences())})"
        if layers_alone
        else f"--fit fits ({', '.join(fitted.differences())}); no --layers N alone does"
    )


def check_memory(
    plan: Plan, options: RunOptions, shape: Shape, ranks: int, warnings: list[str]
) -> None:
    """Refuse, before anything is written, a torch-engine run on this machine's GPUs whose estimate
    (``llmb.recipes.memory.TORCH``, calibrated against a measured peak: docs/memory-estimate.md) exceeds
    the GPU type's memory, with the estimate term by term and what would fit. On a cluster's nodes
    (device ``auto``: GPUs or not is found there) the same finding is a warning. ``--no-memory-check``
    skips it."""
    memory = rank_memory(plan.recipe, shape.device, ranks)
    if not options.memory_check or memory is None:
        return
    ran = shape.ran
    if shape.proxy is None:  # the recipe's layout as the torch engine runs it: CP folded into DP
        ran = replace(ran, cp=shape.layout.cp, dp=shape.layout.dp(ranks), ga=shape.ga)
    estimate = torch_estimate(ran, shape.arch, memory.gb)
    if estimate.total_gb <= memory.gb:
        return
    r = plan.recipe
    on_cpu = shape.device == "cpu"
    try:
        fits = what_fits(plan, ranks, shape.device)
    except UsageError:
        fits = (
            f"no slice of it fits one {'CPU rank' if on_cpu else 'GPU'} (not even one layer): use the "
            f"production engine on a cluster"
        )
    said = (
        f"{r.workload} {r.size} as this run builds it ({shape.arch.layers} "
        f"layer{'s' if shape.arch.layers != 1 else ''}"
        + (f", {shape.arch.experts} experts per MoE layer" if shape.arch.experts else "")
        + f") needs ~{estimate.total_gb:.1f} GiB per {'rank' if on_cpu else 'GPU'} on the torch engine "
        f"({memory_breakdown(estimate)}), more than {memory.said()}; {fits}"
    )
    if shape.device == "auto":
        warnings.append(f"{said}, if the nodes run it on GPUs of this type.")
        return
    raise UsageError(
        f"{said}. Nothing was started. --no-memory-check runs it anyway (the estimate: "
        f"docs/memory-estimate.md)."
    )


def torch_shape(
    plan: Plan, options: RunOptions, ranks: int, device: str, warnings: list[str]
) -> Shape:
    """The torch engine: its compute precision on ``device``; a proxy data parallel over its ranks, or the
    recipe's layout as the torch engine runs it (CP folded into DP), refused here, not in the job, when the
    engine cannot run it."""
    recipe = plan.recipe
    dtype, dtype_warnings = compute_dtype(device, recipe.dtype)
    if not options.is_proxy:  # a proxy's precision is among its differences from the recipe
        warnings += dtype_warnings
    arch, seq_len = proxy_arch(plan.workload, recipe, options)
    proxy = _proxy(plan, options, arch, seq_len, ranks, "torch", device, dtype, warnings)
    if proxy is not None:
        ran = proxy.ran
        return Shape(
            device, dtype, arch, seq_len, ParallelLayout(), ran, ran.mbs, ran.ga, ran.gbs, proxy
        )
    # the engine's own rule (imports no torch)
    from llmb.engines.torch.parallel import check_supported

    layout, ga, layout_warnings = torch_engine_layout(recipe, ranks)
    warnings += layout_warnings
    if layout.cp != recipe.cp:
        warnings.append(folded_memory_note(plan, layout, ga, ranks))
    check_supported(layout, ranks, seq_len)
    if layout.pp > 1 and (options.checkpoint_save or options.checkpoint_load):
        raise UsageError(
            f"checkpoints of a pipeline-parallel run (PP {layout.pp}) are not written or read "
            f"by the torch engine yet; run without --checkpoint-save/--checkpoint-load, or "
            f"with the production engine."
        )
    return Shape(device, dtype, arch, seq_len, layout, recipe, recipe.mbs, ga, recipe.gbs)


def production_shape(
    plan: Plan, options: RunOptions, ranks: int, engine: str, device: str, warnings: list[str]
) -> Shape:
    """The production framework: the recipe's own layout, batch and precision (``--layers`` makes it
    shallower, nothing else)."""
    recipe = plan.recipe
    arch, seq_len = proxy_arch(plan.workload, recipe, options)
    proxy = _proxy(plan, options, arch, seq_len, ranks, engine, device, recipe.dtype, warnings)
    return Shape(
        device,
        recipe.dtype,
        arch,
        seq_len,
        ParallelLayout(),
        recipe,
        recipe.mbs,
        recipe.ga,
        recipe.gbs,
        proxy,
    )


def framework_args(options: RunOptions, framework: str, torch_engine: bool) -> tuple:
    """``--framework-arg``'s settings, checked against the production framework's configuration."""
    if not options.framework_args:
        return ()
    if torch_engine:
        raise UsageError(
            "--framework-arg sets the production framework's configuration (Megatron-Bridge, "
            "NeMo 2); this run uses the torch engine (a proxy, this machine, or --engine torch): "
            "--set changes the recipe's own fields."
        )
    from llmb.engines.frameworks.fields import check as check_framework_args

    known = redaction.environment_secrets()
    for item in options.framework_args:
        path, _, value = item.partition("=")
        path = path.strip()
        what = "a secret" if redaction.is_secret_key(path) else credential_in(value, known)
        if what:  # the job reads its configuration from run.json: masking it would change the run
            raise UsageError(
                f"--framework-arg {path}=...: {what} would be written into the job's files "
                f"(run.json, recipe.json). Give it to the framework through the environment instead: "
                f"export the variable it reads (COMET_API_KEY, MLFLOW_TRACKING_URI, "
                f"MLFLOW_TRACKING_PASSWORD, WANDB_API_KEY...) in this shell and pass it with "
                f"--secret NAME."
            )
    return check_framework_args(options.framework_args, framework)


def production_config(
    plan: Plan,
    options: RunOptions,
    run: Contributions,
    name: str,
    where: ExperimentDir,
    save_dir: str | None,
    load_dir: str | None,
) -> dict:
    """The production framework's configuration; its own decisions replace the run's steps (a profiled
    run whose steps were not asked for stops at its window's end, as the published launchers' do) and
    whole environment (it has dropped anything that must not be written down). ``options.steps`` is the
    steps asked for, or None (``profile_steps``): the framework tells the two apart."""
    from llmb.engines.frameworks import build_config

    config = build_config(
        plan.workload,
        plan.recipe,
        options,
        experiment=name,
        inner_dir=where.inner,
        checkpoint_save_dir=save_dir,
        checkpoint_load_dir=load_dir,
    )
    run.steps = config["training"]["train_iters"]
    run.env = dict(config["env"])
    return config


def profile_steps(
    plan: Plan,
    request: RecipeRequest,
    options: RunOptions,
    torch_engine: bool,
    load_dir: str | None,
    warnings: list[str],
) -> RunOptions:
    """The options with ``steps`` the steps asked for (``--steps``, else ``--set steps``; None: not
    asked) and, for a profiled run, the profile window fitted into them (``profiling.fit_window``:
    the default window moved to the run's last steps, with a warning; an asked one past the run's
    end refused): each engine then runs the steps asked for and profiles within them."""
    asked = options.steps
    if asked is None and "steps" in request.overrides:
        asked = plan.recipe.steps
    options = replace(options, steps=asked)
    if not options.profile or load_dir or options.nccl_trace:
        return options  # a loaded run trains one step; tracing and profiling are refused together
    if options.profile_window is not None:
        default = options.profile_window
    elif torch_engine:
        default = DEFAULT_WINDOW
    else:
        from llmb.engines.frameworks.description import production_of

        default = production_of(plan.workload, plan.recipe.variant).profile_window
    window, moved = fit_window(default, options.profile_window is not None, asked)
    if moved is None:
        return options
    warnings.append(moved)
    return replace(options, profile_window=window)


def contributions(
    host: PluginHost,
    plan: Plan,
    options: RunOptions,
    shape: Shape,
    steps: int,
    job_id: str,
    where: ExperimentDir,
    torch_engine: bool,
    warnings: list[str],
) -> Contributions:
    """The recipe's and the user's environment, then the profilers' (the torch engine's: the production
    framework profiles itself, with its nsys options) and NCCL tracing's limits on the steps."""
    window = options.profile_window or DEFAULT_WINDOW
    profile = (
        host.profile(
            ProfileRequest(
                profile=options.profile,
                gpu_metrics=options.gpu_metrics,
                nccl_trace=options.nccl_trace,
                start=window[0],
                stop=window[1],
                device=shape.device,
                job_id=job_id,
                inner_dir=where.inner,
            )
        )
        if torch_engine
        else []
    )
    run = Contributions(env={**dict(plan.recipe.env), **dict(options.env)}, steps=steps)
    for contribution in profile:
        run.env.update(contribution.env)
        run.wrapper += contribution.wrapper
        if contribution.max_steps:
            run.steps = min(run.steps, contribution.max_steps)
        if contribution.engine:
            run.engine_profile = contribution.engine
        if contribution.note:
            warnings.append(contribution.note)
    # a plugin's recipe rules and profilers add names too; none reaches a script unchecked
    for variable in run.env:
        if problem := env_name_problem(variable, "a plugin's environment variable"):
            raise PluginError(problem)
    if options.nccl_trace:
        run.steps = min(run.steps, NCCL_TRACE_STEPS)
        warnings.append(
            f"NCCL trace: the run stops after {NCCL_TRACE_STEPS} steps, as the published recipes' "
            f"traced runs do."
        )
    if run.engine_profile and run.steps < run.engine_profile["stop"]:
        warnings.append(
            f"the profile window {run.engine_profile['start']}-{run.engine_profile['stop']} ends after "
            f"the run's last step ({run.steps})."
        )
    return run


def _window_warning(
    plan: Plan, steps: int, load_dir: str | None, options: RunOptions, torch_engine: bool
) -> tuple[str, int] | None:
    """(what a run of ``steps`` steps that end before the statistics window will be, the steps it
    needs); None where they reach it, or the run's purpose is not its step times (a checkpoint's load,
    an NCCL trace)."""
    from llmb.results.analyze import steps_to_reach

    window = max(
        (v.window for v in plan.workload.variants if v.name == plan.recipe.variant),
        key=lambda w: w[1],
    )
    # the torch engine logs as Megatron-Bridge does (from iteration 1); NeMo 2 counts from 0
    log_format = "nemo2" if plan.recipe.framework == "nemo2" and not torch_engine else None
    needed = steps_to_reach(window, log_format)
    if steps < needed and not load_dir and not options.nccl_trace:
        return (
            f"{steps} steps end before the statistics window's end ({window[1]}): the run's result will be "
            f"too_short, with no step-time statistics to compare; run at least {needed} steps.",
            needed,
        )
    return None


def recipe_record(
    plan: Plan,
    spec: RunSpec,
    shape: Shape,
    backend_name: str,
    options: RunOptions,
    tuned: tuple,
    warnings: list[str],
) -> dict:
    """``recipe.json``: the plan, plus what actually runs (``warnings`` is the list itself: what submitting
    adds to it is recorded too)."""
    record = plan.as_dict()
    record.update(
        {
            "job_id": spec.job_id,
            "backend": backend_name,
            "engine": spec.engine,
            "proxy": spec.proxy is not None,
            "proxy_kind": spec.proxy,
            "proxy_differences": [d.as_dict() for d in shape.proxy.differences]
            if shape.proxy
            else None,
            "published_recipe": {k: record[k] for k in ("gpus", "mbs", "gbs", "ga", "dp")},
            "gpus": spec.ranks,
            "nodes": spec.nodes,
            "gpus_per_node": spec.ranks_per_node,
            "mbs": spec.mbs,
            "ga": spec.ga,
            "gbs": spec.gbs,
            "dp": spec.ranks if spec.engine == "torch" else plan.recipe.dp,
            "seq_len": spec.seq_len,
            "layers": shape.arch.layers,
            "steps": spec.steps,
            "device": spec.device,
            "compute_dtype": spec.compute_dtype,
            "model_flops_per_sample": spec.flops_per_sample,
            "arch": spec.arch,
            "warnings": warnings,
            "submitted_at": now(),
        }
    )
    if options.preflight:  # --exclude-from: the preflight file that chose the nodes to keep off
        record["preflight"] = options.preflight
    if tuned:  # tuned beyond the recipe's fields: results show it beside the official figure
        record["tuned"] = [
            *(record.get("tuned") or []),
            *({"setting": path, "published": None, "run": value} for path, value in tuned),
        ]
    return record


def _spec(
    plan: Plan,
    shape: Shape,
    run: Contributions,
    options: RunOptions,
    job_id: str,
    engine: str,
    ranks: int,
    name: str,
    where: ExperimentDir,
    checkpoints: tuple,
    framework_config: dict | None,
    flops_per_sample: float,
) -> RunSpec:
    recipe = plan.recipe
    nodes, per_node = placement(ranks, recipe.gpus_per_node)
    save_dir, load_dir, ckpt_format = checkpoints
    return RunSpec(
        job_id=job_id,
        workload=recipe.workload,
        variant=recipe.variant,
        framework=recipe.framework,
        engine=engine,
        size=recipe.size,
        arch=shape.arch.__dict__.copy(),
        proxy=options.proxy_label,
        gpu=recipe.gpu,
        dtype=recipe.dtype,
        compute_dtype=shape.dtype,
        device=shape.device,
        ranks=ranks,
        nodes=nodes,
        ranks_per_node=per_node,
        mbs=shape.mbs,
        ga=shape.ga,
        gbs=shape.gbs,
        layout=shape.layout,
        seq_len=shape.seq_len,
        steps=run.steps,
        seed=options.seed,
        compile=options.compile,
        flops_per_sample=flops_per_sample,
        experiment=name,
        run_dir=where.run_dir,
        inner_dir=where.inner,
        log=where.log,
        checkpoint_save_dir=save_dir,
        checkpoint_load_dir=load_dir,
        checkpoint_format=ckpt_format,
        profile=run.engine_profile,
        env=run.env,
        wrapper=run.wrapper,
        framework_config=framework_config,
        container=plan.container,
    )


def prepare(
    host: PluginHost,
    request: RecipeRequest,
    options: RunOptions,
    backend_name: str = "local",
    describing: bool = False,
) -> Prepared:
    """Resolve, plan and check ``request`` into a run ready to submit (or to describe), writing nothing.
    ``describing`` (a dry run, a plan): what a submission would refuse is ``Prepared.would_refuse``,
    not a refusal: a login node without GPUs shows what a run would be, and where it could run."""
    host.backend(backend_name)  # an unknown backend is refused before any work
    secret_names = check_options(host, options)
    ranks = request.gpus
    plan = make_plan(host, replace(request, any_scale=True) if options.is_proxy else request)
    recipe, warnings = plan.recipe, list(plan.warnings)
    engine = choose_engine(options, backend_name, recipe.framework)
    torch_engine = engine == "torch"
    if ranks is None or not torch_engine:
        ranks = recipe.gpus  # the production engine runs the recipe's own layout
    tuned = framework_args(options, recipe.framework, torch_engine)
    here: list[str] | None = [] if describing else None
    options, device = where_it_runs(
        host, plan, options, backend_name, engine, ranks, warnings, here
    )
    placement(ranks, recipe.gpus_per_node)  # refused before the engine's own checks
    options = choose_fit(plan, options, ranks, device)
    if options.fitted is not None:
        warnings.append(options.fitted.text())
    shape = (
        torch_shape(plan, options, ranks, device, warnings)
        if torch_engine
        else production_shape(plan, options, ranks, engine, device, warnings)
    )
    if torch_engine:
        try:
            check_memory(plan, options, shape, ranks, warnings)
        except UsageError as exc:
            _refuse_or_note(exc, here)
    load_dir = find_checkpoint(options.checkpoint_load) if options.checkpoint_load else None
    options = profile_steps(plan, request, options, torch_engine, load_dir, warnings)
    # the seeds: "1 step after checkpoint has been loaded"
    steps = 1 if load_dir else options.steps or recipe.steps
    flops = host.model_flops(plan.workload, shape.arch, shape.seq_len)

    job_id = new_job_id(backend_name)  # claimed by submit, with the experiment directory
    name = experiment.experiment_name(shape.ran, options.proxy_label, tuned=bool(tuned))
    where = experiment.locate(recipe.workload, name)
    run = contributions(host, plan, options, shape, steps, job_id, where, torch_engine, warnings)
    save_dir, ckpt_format = checkpoint_dirs(
        options, recipe.framework, where.inner, run.steps, shape.gbs
    )
    config = (
        None
        if torch_engine
        else production_config(plan, options, run, name, where, save_dir, load_dir)
    )
    if options.dump_env:
        # rank 0 writes its environment beside the log (llmb.runs.provenance)
        run.env[job_env.DUMP_VARIABLE] = "1"
    too_short = None
    if short := _window_warning(plan, run.steps, load_dir, options, torch_engine):
        too_short, needed = short
        # refused (noted where only described), but for a smoke test, or a run whose purpose is its
        # profile (a profile's window moves to the run's last steps): warned
        if options.window_check and not options.profile:
            _refuse_or_note(
                UsageError(
                    f"{too_short.removesuffix('.')} (--steps {needed}), or add --no-window-check to run "
                    f"it anyway (a smoke test). Nothing was started."
                ),
                here,
            )
        else:
            warnings.append(too_short)

    spec = _spec(
        plan,
        shape,
        run,
        options,
        job_id,
        engine,
        ranks,
        name,
        where,
        (save_dir, load_dir, ckpt_format),
        config,
        flops.per_sample if flops else 0.0,
    )
    _refuse_secrets_in(spec)
    job = Job(
        id=job_id,
        backend=backend_name,
        workload=recipe.workload,
        experiment=name,
        run_dir=where.run_dir,
        log=where.log,
        ranks=ranks,
        submitted_at=now(),
        proxy=spec.proxy,
        retries=options.submit.retries,
    )
    return Prepared(
        spec,
        job,
        plan,
        tuple(warnings),
        recipe_record(plan, spec, shape, backend_name, options, tuned, warnings),
        options.submit,
        where,
        plan.container,
        secret_names,
        options.preflight,
        too_short,
        tuple(here or ()),
    )


def _refuse_secrets_in(spec: RunSpec) -> None:
    """``run.json`` is the job's input: every file llmb writes masks its secrets
    (``llmb.redaction``), and a masked run.json would run something else. A run whose spec holds
    one (through a workload's contributions, a cluster setting) is refused, naming where."""
    where = redaction.differences(spec.to_dict())
    if where:
        raise UsageError(
            f"this run would write a secret into the job's files ({', '.join(where[:5])}); "
            f"pass it through the environment: export it in this shell and name it with --secret NAME."
        )


def plan_proxy(
    host: PluginHost, plan: Plan, proxy: str | None, ranks: int, fit: bool = False
) -> ProxyPlan:
    """What ``llmb run --proxy PROXY`` (or ``--fit``) on this machine (the local backend, the torch
    engine) runs over ``ranks``: the same functions build it there (``torch_shape``)."""
    from llmb.recipes.params import count_params

    recipe, workload = plan.recipe, plan.workload
    asked = RunOptions(proxy=proxy, fit=fit)
    refusal = None
    try:
        device, _ = check_machine(recipe, asked, detect(), ranks)
    except UsageError as exc:
        device, refusal = "cpu", str(exc)
    try:
        options = choose_fit(plan, asked, ranks, device)  # a CPU's ranks fit this machine's memory
    except UsageError as exc:  # none fits here: what a GPU of the type would hold, and why not here
        if device != "cpu":
            raise
        options, refusal = choose_fit(plan, asked, ranks, "cuda"), refusal or str(exc)
    arch, seq_len = proxy_arch(workload, recipe, options)
    dtype, _ = compute_dtype(device, recipe.dtype)
    run = proxy_run(
        recipe,
        plan.arch,
        arch,
        seq_len,
        flag=proxy_flag(proxy, None, fit),
        label=options.proxy_label,
        ranks=ranks,
        engine="torch",
        device=device,
        compute_dtype=dtype,
    )
    return ProxyPlan(
        run=run,
        flops=host.model_flops(workload, arch, seq_len),
        params=count_params(arch).total,
        experiment=experiment.experiment_name(run.ran, options.proxy_label),
        refusal=refusal,
        fit=options.fitted,
    )


def plan_with_proxy(
    host: PluginHost, request: RecipeRequest, proxy: str | None, fit: bool = False
) -> Plan:
    """The plan of ``request`` and what ``llmb run --proxy PROXY`` (or ``--fit``) would run on this machine,
    the recipe resolved as it resolves it (at its smallest tested scale where the GPU count asked for is
    not one the recipe tests), or why it would refuse to (``ProxyPlan.refusal``): ``llmb plan``'s account
    of a reduced run that ``prepare`` refuses here."""
    if problem := reduction_conflict(proxy, None, fit):  # as the shared options' check says it
        raise UsageError(problem)
    plan = make_plan(host, replace(request, any_scale=True))
    ranks = request.gpus or plan.recipe.gpus
    return replace(plan, proxy=plan_proxy(host, plan, proxy, ranks, fit))
