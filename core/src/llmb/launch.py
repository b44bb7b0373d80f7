"""From ``llmb run``'s request to a submitted job.

1. resolve the recipe (proxies take the seed's smallest tested scale when
   needed) and plan it;
2. check this machine can run it (local backend), pick device and precision;
3. create the experiment directory in the seeds' layout and save the recipe
   (``recipe.json``: the plan, plus what actually runs) beside it;
4. collect the profilers' contributions;
5. hand the ``RunSpec`` to the backend.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from llmb import experiment
from llmb.capability import detect
from llmb.errors import UsageError
from llmb.host import PluginHost
from llmb.jobs import Job, new_job_dir, now, save_job
from llmb.planning import Plan, make_plan
from llmb.profiling import ProfileRequest
from llmb.records import RecipeRequest
from llmb.runspec import (
    NCCL_TRACE_STEPS,
    RunOptions,
    RunSpec,
    check_machine,
    checkpoint_dirs,
    compute_dtype,
    engine_layout,
    find_checkpoint,
    proxy_arch,
)


@dataclass(frozen=True)
class Submitted:
    job: Job
    spec: RunSpec
    plan: Plan
    warnings: tuple[str, ...]


def submit_run(host: PluginHost, request: RecipeRequest, options: RunOptions, backend_name: str = "local") -> Submitted:
    backend_record = host.backend(backend_name)
    if options.nccl_trace and options.profile:
        raise UsageError("--profile and --nccl-trace cannot be combined (the seeds run them separately: "
                         "a profile of a traced run is not valid for comparison).")
    ranks = request.gpus
    if options.is_proxy:
        request = replace(request, any_scale=True)
    plan = make_plan(host, request)
    recipe = plan.recipe
    workload = plan.workload
    warnings = list(plan.warnings)
    if ranks is None:
        ranks = recipe.gpus

    device = "cuda"
    if backend_name == "local":
        device, machine_warnings = check_machine(recipe, options, detect(), ranks)
        warnings += machine_warnings
    dtype, dtype_warnings = compute_dtype(device, recipe.dtype)
    warnings += dtype_warnings

    arch, seq_len = proxy_arch(workload, recipe, options)
    mbs, ga, gbs = engine_layout(recipe, ranks)
    steps = options.steps or recipe.steps
    load_dir = find_checkpoint(options.checkpoint_load) if options.checkpoint_load else None
    if load_dir:
        steps = 1  # the seeds: "Training will run for 1 step after checkpoint has been loaded"
    flops = host.model_flops(workload, arch, seq_len)

    job_id, _ = new_job_dir(backend_name)
    # Named after what runs: the torch engine is data parallel over the ranks.
    ran = replace(recipe, gpus=ranks, tp=1, pp=1, cp=1, vp=None, ep=1 if recipe.ep else None, mbs=mbs, gbs=gbs)
    name = experiment.experiment_name(ran, options.proxy_label)
    where = experiment.create(recipe.workload, name)

    profile = host.profile(ProfileRequest(
        profile=options.profile, gpu_metrics=options.gpu_metrics, nccl_trace=options.nccl_trace,
        start=options.profile_start, stop=options.profile_stop, device=device, job_id=job_id, inner_dir=where.inner,
    ))
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
    if options.nccl_trace:
        warnings.append(f"NCCL trace: the run stops after {NCCL_TRACE_STEPS} steps, as the seeds' traced runs do.")
    if engine_profile and steps < engine_profile["stop"]:
        warnings.append(f"the profile window {engine_profile['start']}-{engine_profile['stop']} ends after the run's "
                        f"last step ({steps}).")
    window_end = max(v.window[1] for v in workload.variants if v.name == recipe.variant)
    if steps < window_end and not load_dir and not options.nccl_trace:
        warnings.append(f"{steps} steps do not reach the end of the statistics window ({window_end}): "
                        f"the result will be incomplete.")
    save_dir, ckpt_format = checkpoint_dirs(options, recipe.framework, where.inner, steps, gbs)

    spec = RunSpec(
        job_id=job_id, workload=recipe.workload, variant=recipe.variant, framework=recipe.framework, engine="torch",
        size=recipe.size, arch=arch.__dict__.copy(), proxy=options.proxy_label, gpu=recipe.gpu, dtype=recipe.dtype,
        compute_dtype=dtype, device=device, ranks=ranks, mbs=mbs, ga=ga, gbs=gbs, seq_len=seq_len, steps=steps,
        seed=options.seed, compile=options.compile, flops_per_sample=flops.per_sample if flops else 0.0,
        experiment=name, run_dir=where.run_dir, inner_dir=where.inner, log=where.log,
        checkpoint_save_dir=save_dir, checkpoint_load_dir=load_dir, checkpoint_format=ckpt_format,
        profile=engine_profile, env=env, wrapper=wrapper,
    )
    recipe_record = plan.as_dict()
    recipe_record.update({
        "job_id": job_id, "backend": backend_name, "engine": "torch", "proxy": spec.proxy is not None,
        "proxy_kind": spec.proxy, "seed_recipe": {k: recipe_record[k] for k in ("gpus", "mbs", "gbs", "ga", "dp")},
        "gpus": ranks, "mbs": mbs, "ga": ga, "gbs": gbs, "dp": ranks, "seq_len": seq_len, "layers": arch.layers,
        "steps": steps, "device": device, "compute_dtype": dtype, "model_flops_per_sample": spec.flops_per_sample,
        "arch": spec.arch, "warnings": warnings, "submitted_at": now(),
    })
    experiment.write_json(where.recipe_file, recipe_record)
    with open(where.log, "a", encoding="utf-8") as handle:
        for warning in warnings:
            handle.write(f"[llmb] warning: {warning}\n")

    job = Job(id=job_id, backend=backend_name, workload=recipe.workload, experiment=name, run_dir=where.run_dir,
              log=where.log, ranks=ranks, submitted_at=now(), proxy=spec.proxy)
    save_job(job)
    job = backend_record.load().submit(spec, job)
    save_job(job)
    return Submitted(job, spec, plan, tuple(warnings))


def default_backend() -> str:
    """``LLMB_BACKEND``, else local (the default when no cluster backend is configured)."""
    return os.environ.get("LLMB_BACKEND", "local")
