"""From ``llmb run``'s request to a submitted job.

1. resolve the recipe (proxies take the seed's smallest tested scale when
   needed) and plan it;
2. check this machine can run it (local backend), pick device and precision;
3. create the experiment directory in the seeds' layout and save the recipe
   (``recipe.json``: the plan, plus what actually runs) and what submits it
   (``provenance.json``'s submission section, ``llmb.runs.provenance``) in it;
4. collect the profilers' contributions;
5. hand the ``RunSpec`` to the backend.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, replace

from llmb.engines.torch.parallel import check_supported
from llmb.errors import PluginError, UsageError
from llmb.plugins.host import PluginHost
from llmb.recipes.memory import MARGIN, estimate_memory
from llmb.recipes.planning import Plan, make_plan
from llmb.recipes.proxies import proxy_flag, proxy_run
from llmb.recipes.records import RecipeRequest
from llmb.recipes.time_limit import derive as derive_time_limit
from llmb.redaction import credential_in, is_secret_name
from llmb.runs import experiment, job_env, provenance
from llmb.runs.capability import detect
from llmb.runs.env_names import env_name_problem
from llmb.runs.jobs import Job, new_job_dir, new_job_id, now, save_job
from llmb.runs.profiling import DEFAULT_WINDOW, ProfileRequest
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


def folded_memory_note(plan: Plan, layout: ParallelLayout, ga: int, ranks: int) -> str:
    """The memory estimate of a row whose CP the torch engine runs as DP (whole sequences per GPU), beside
    the plan's estimate of the row as published."""
    folded = replace(plan.recipe, cp=layout.cp, dp=layout.dp(ranks), ga=ga)
    estimate = estimate_memory(folded, plan.arch, plan.memory.capacity_gb)
    note = (f"with CP run as DP the memory estimate is {estimate.total_gb:.1f} GB per GPU "
            f"(the row as published: {plan.memory.total_gb:.1f} GB")
    if estimate.capacity_gb is None:
        return note + ")."
    note += f"; the {plan.recipe.gpu} has {estimate.capacity_gb:g} GB)"
    if estimate.exceeds_margin:
        return note + ": this will not fit; use the production engine for this row."
    if estimate.exceeds_capacity:
        return note + f": just above capacity, within the estimate's ~{MARGIN:.0%} margin, so it may still fit."
    return note + "."


@dataclass(frozen=True)
class Submitted:
    job: Job
    spec: RunSpec
    plan: Plan
    warnings: tuple[str, ...]
    description: dict | None = None  # a dry run: what the backend would do (nothing was written or sent)
    submit: SubmitOptions | None = None  # what the backend was given: the options, with the derived time limit


def choose_engine(options: RunOptions, backend_name: str, framework: str) -> str:
    """``torch`` for proxies of a CPU-sized shrink and on this machine, the
    recipe's production framework on a cluster (``--engine`` decides when given)."""
    if options.engine == "torch":
        return "torch"
    if options.engine == "production":
        if options.proxy:
            raise UsageError(f"--proxy {options.proxy} is a torch-engine model; the production engine runs the "
                             f"published recipe's architecture (use --layers N for a shallower one).")
        return framework
    if options.engine is not None:
        raise UsageError(f"unknown --engine {options.engine!r}; valid: torch, production.")
    return "torch" if backend_name == "local" or options.proxy else framework


def placement(ranks: int, per_node: int) -> tuple[int, int]:
    """(nodes, ranks per node): whole nodes, or one partly used node."""
    if ranks <= per_node:
        return 1, ranks
    if ranks % per_node:
        raise UsageError(f"{ranks} ranks do not fill whole {per_node}-rank nodes; use a multiple of {per_node} "
                         f"or set --gpus-per-node.")
    return ranks // per_node, per_node


def submit_run(host: PluginHost, request: RecipeRequest, options: RunOptions, backend_name: str = "local",
               dry_run: bool = False) -> Submitted:
    """Resolve, plan and submit; with ``dry_run``, plan everything and ask the backend what it
    would do, writing and sending nothing."""
    host.backend(backend_name)  # an unknown backend is refused before any work
    if options.nccl_trace and options.profile:
        raise UsageError("--profile and --nccl-trace cannot be combined (the published recipes run them "
                         "separately: a profile of a traced run is not valid for comparison).")
    backend_secrets = {name for backend in host.backends().values() for name in backend.secrets}
    declared = {*SECRET_VARIABLES, *backend_secrets, *options.submit.secrets}
    for name, value in options.env:
        what = "a secret" if is_secret_name(name, declared) else credential_in(value)
        if what:
            raise UsageError(f"--env {name}=...: {what} would be written into the job's files; export {name} in "
                             f"this shell instead (HF_TOKEN always travels that way, a backend's credentials stay on "
                             f"this machine; others with --secret {name}).")
    ranks = request.gpus
    if options.is_proxy:
        request = replace(request, any_scale=True)
    plan = make_plan(host, request)
    recipe = plan.recipe
    workload = plan.workload
    warnings = list(plan.warnings)
    engine = choose_engine(options, backend_name, recipe.framework)
    torch_engine = engine == "torch"
    if ranks is None or not torch_engine:
        ranks = recipe.gpus  # the production engine runs the recipe's own layout
    framework_args: tuple = ()  # checked before anything is written
    if options.framework_args:
        if torch_engine:
            raise UsageError("--framework-arg sets the production framework's configuration (Megatron-Bridge, "
                             "NeMo 2); this run uses the torch engine (a proxy, this machine, or --engine torch): "
                             "--set changes the recipe's own fields.")
        from llmb.engines.frameworks.fields import check as check_framework_args

        framework_args = check_framework_args(options.framework_args, recipe.framework)

    if backend_name == "local":
        from llmb.backends.local_slots import job_limit

        job_limit()  # a bad LLMB_LOCAL_JOBS is refused before anything is written
        given = options.submit.given()
        if given:
            warnings.append(f"the local backend ignores {', '.join(given)} (cluster options).")
        device, machine_warnings = check_machine(recipe, options, detect(), ranks)
        warnings += machine_warnings
        if not torch_engine and importlib.util.find_spec("megatron") is None and importlib.util.find_spec("nemo") is None:
            raise UsageError(f"the production engine ({engine}) runs inside NVIDIA's NeMo container "
                             f"({workload.variant(recipe.variant).container}); it is not installed here. "
                             f"Use a cluster backend, or the torch engine (--engine torch).")
    else:
        if options.submit.time_limit is None:  # none given (flag, variable, cluster file): the plan's
            limit = plan.time_limit if not options.is_proxy else derive_time_limit(recipe.steps, None, "none", 0)
            options = replace(options, submit=replace(options.submit, time_limit=limit.slurm))
        # A cluster's nodes are not this machine: the torch engine takes their GPUs when it finds any.
        device = "auto" if torch_engine else "cuda"
    if torch_engine:
        dtype, dtype_warnings = compute_dtype(device, recipe.dtype)
        if not options.is_proxy:  # a proxy's precision is among its differences from the recipe, below
            warnings += dtype_warnings
    else:
        dtype = recipe.dtype  # the production framework computes in the recipe's precision
    nodes, per_node = placement(ranks, recipe.gpus_per_node)

    arch, seq_len = proxy_arch(workload, recipe, options)
    layout = ParallelLayout()
    proxy = None
    if options.is_proxy:
        # What it runs and every difference from the published recipe, in one warning (llmb plan --proxy
        # shows the same list).
        proxy = proxy_run(recipe, plan.arch, arch, seq_len, flag=proxy_flag(options.proxy, options.layers),
                          label=options.proxy_label, ranks=ranks, engine="torch" if torch_engine else engine,
                          device=device, compute_dtype=dtype)
        warnings.append(proxy.warning())
    if torch_engine and proxy is not None:
        ran = proxy.ran  # named after what runs: a proxy is data parallel over its ranks
        mbs, ga, gbs = ran.mbs, ran.ga, ran.gbs
    else:  # the production engine, and the torch engine at full size: the recipe's own layout and batch
        mbs, ga, gbs = recipe.mbs, recipe.ga, recipe.gbs
        ran = recipe
        if torch_engine:
            layout, ga, layout_warnings = torch_engine_layout(recipe, ranks)
            warnings += layout_warnings
            if layout.cp != recipe.cp:
                warnings.append(folded_memory_note(plan, layout, ga, ranks))
            check_supported(layout, ranks, seq_len)  # refused here, not in the job
            if layout.pp > 1 and (options.checkpoint_save or options.checkpoint_load):
                raise UsageError(f"checkpoints of a pipeline-parallel run (PP {layout.pp}) are not written or read "
                                 f"by the torch engine yet; run without --checkpoint-save/--checkpoint-load, or "
                                 f"with the production engine.")
    steps = options.steps or recipe.steps
    load_dir = find_checkpoint(options.checkpoint_load) if options.checkpoint_load else None
    if load_dir:
        steps = 1  # the seeds: "Training will run for 1 step after checkpoint has been loaded"
    flops = host.model_flops(workload, arch, seq_len)

    job_id = new_job_id(backend_name) if dry_run else new_job_dir(backend_name)[0]
    name = experiment.experiment_name(ran, options.proxy_label, tuned=bool(framework_args))
    where = (experiment.locate if dry_run else experiment.create)(recipe.workload, name)

    profile = host.profile(ProfileRequest(
        profile=options.profile, gpu_metrics=options.gpu_metrics, nccl_trace=options.nccl_trace,
        start=(options.profile_window or DEFAULT_WINDOW)[0], stop=(options.profile_window or DEFAULT_WINDOW)[1],
        device=device, job_id=job_id, inner_dir=where.inner,
    )) if torch_engine else []  # the production framework profiles itself (its nsys options)
    env = dict(recipe.env)
    env.update(dict(options.env))
    wrapper: tuple[str, ...] = ()
    engine_profile = None
    for contribution in profile:
        env.update(contribution.env)
        wrapper += contribution.wrapper
        if contribution.max_steps:
            steps = min(steps, contribution.max_steps)
        if contribution.engine:
            engine_profile = contribution.engine
        if contribution.note:
            warnings.append(contribution.note)
    for variable in env:  # a plugin's recipe rules and profilers add names too; none reaches a script unchecked
        if problem := env_name_problem(variable, "a plugin's environment variable"):
            raise PluginError(problem)
    if options.nccl_trace:
        steps = min(steps, NCCL_TRACE_STEPS)
        warnings.append(f"NCCL trace: the run stops after {NCCL_TRACE_STEPS} steps, as the published recipes' "
                        f"traced runs do.")
    if engine_profile and steps < engine_profile["stop"]:
        warnings.append(f"the profile window {engine_profile['start']}-{engine_profile['stop']} ends after the run's "
                        f"last step ({steps}).")
    save_dir, ckpt_format = checkpoint_dirs(options, recipe.framework, where.inner, steps, gbs)

    framework_config = None
    if not torch_engine:
        from llmb.engines.frameworks import build_config

        framework_config = build_config(
            workload, recipe, replace(options, steps=steps), experiment=name, inner_dir=where.inner,
            checkpoint_save_dir=save_dir, checkpoint_load_dir=load_dir,
        )
        # The framework's own decisions: how many steps (a profiled NeMo 2 run stops at its window's
        # end), and the whole environment (it has dropped anything that must not be written down).
        steps = framework_config["training"]["train_iters"]
        env = dict(framework_config["env"])

    if options.dump_env:
        env[job_env.DUMP_VARIABLE] = "1"  # rank 0 writes its environment beside the log (llmb.runs.provenance)

    window_end = max(v.window[1] for v in workload.variants if v.name == recipe.variant)
    if steps < window_end and not load_dir and not options.nccl_trace:
        warnings.append(f"{steps} steps end before the statistics window's end ({window_end}): the run's result "
                        f"will be too_short, with no step-time statistics to compare; run at least {window_end} "
                        f"steps.")

    spec = RunSpec(
        job_id=job_id, workload=recipe.workload, variant=recipe.variant, framework=recipe.framework, engine=engine,
        size=recipe.size, arch=arch.__dict__.copy(), proxy=options.proxy_label, gpu=recipe.gpu, dtype=recipe.dtype,
        compute_dtype=dtype, device=device, ranks=ranks, nodes=nodes, ranks_per_node=per_node, mbs=mbs, ga=ga,
        gbs=gbs, layout=layout, seq_len=seq_len, steps=steps, seed=options.seed, compile=options.compile,
        flops_per_sample=flops.per_sample if flops else 0.0, experiment=name, run_dir=where.run_dir,
        inner_dir=where.inner, log=where.log, checkpoint_save_dir=save_dir, checkpoint_load_dir=load_dir,
        checkpoint_format=ckpt_format, profile=engine_profile, env=env, wrapper=wrapper,
        framework_config=framework_config,
    )
    recipe_record = plan.as_dict()
    recipe_record.update({
        "job_id": job_id, "backend": backend_name, "engine": engine, "proxy": spec.proxy is not None,
        "proxy_kind": spec.proxy,
        "proxy_differences": [d.as_dict() for d in proxy.differences] if proxy else None,
        "published_recipe": {k: recipe_record[k] for k in ("gpus", "mbs", "gbs", "ga", "dp")},
        "gpus": ranks, "nodes": nodes, "gpus_per_node": per_node, "mbs": mbs, "ga": ga, "gbs": gbs,
        "dp": ranks if torch_engine else recipe.dp, "seq_len": seq_len, "layers": arch.layers, "steps": steps,
        "device": device, "compute_dtype": dtype, "model_flops_per_sample": spec.flops_per_sample,
        "arch": spec.arch, "warnings": warnings, "submitted_at": now(),
    })
    if options.preflight:  # --exclude-from: the preflight file that chose the nodes to keep off
        recipe_record["preflight"] = options.preflight
    if framework_args:  # tuned beyond the recipe's fields: results show it beside the official figure
        recipe_record["tuned"] = [*(recipe_record.get("tuned") or []),
                                  *({"setting": path, "published": None, "run": value} for path, value in framework_args)]
    job = Job(id=job_id, backend=backend_name, workload=recipe.workload, experiment=name, run_dir=where.run_dir,
              log=where.log, ranks=ranks, submitted_at=now(), proxy=spec.proxy)
    if dry_run:
        description = host.backend_impl(backend_name).describe(spec, job, options.submit)
        return Submitted(job, spec, plan, tuple(warnings), description, options.submit)
    secret_names = {*SECRET_VARIABLES, *backend_secrets, *options.submit.secrets}
    if problem := provenance.record_submission(where.run_dir, host, backend_name, spec, options.submit,
                                               workload.variant(recipe.variant).container, secret_names):
        warnings.append(problem)  # before the job exists: the job's side is merged into the file later
    if options.preflight and (problem := provenance.write_section(where.run_dir, "preflight", options.preflight)):
        warnings.append(problem)
    experiment.write_json(where.recipe_file, recipe_record)
    with open(where.log, "a", encoding="utf-8") as handle:
        for warning in warnings:
            handle.write(f"[llmb] warning: {warning}\n")

    save_job(job)
    job = host.backend_impl(backend_name).submit(spec, job, options.submit)
    save_job(job)
    return Submitted(job, spec, plan, tuple(warnings), submit=options.submit)


def default_backend() -> str:
    """``LLMB_BACKEND``, else local (the default when no cluster backend is configured)."""
    return os.environ.get("LLMB_BACKEND", "local")
