"""``llmb run``'s options beyond the recipe as click options, shared with
``llmb sweep``; ``llmb.lifecycle.run_option_values`` turns their values into RunOptions.
A cluster option a flag does not give comes from its variable, then from
``$LLMB_INSTALL/cluster.yaml`` (``llmb.install.cluster_settings``). Their values are
checked where they are turned into RunOptions, by the check of their kind that the
variable, the cluster file and ADDITIONAL_SLURM_PARAMS share (``llmb.install.value_checks``):
no click type here, whose refusal would read differently."""

from __future__ import annotations

import functools

import click

from llmb.install.cluster_settings import VARIABLES

_OPTIONS = [
    click.option(
        "--backend",
        envvar="LLMB_BACKEND",
        default="local",
        show_default=True,
        help="Where to run: local (this machine) or a cluster backend. [env: LLMB_BACKEND]",
    ),
    click.option(
        "--proxy",
        metavar="NAME",
        help="Run a CPU-sized model with the workload's structure (tiny).",
    ),
    click.option(
        "--layers",
        type=click.IntRange(min=1),
        help="Run the full-width model with N layers (the published recipes' own proxy, as Llama 3.1's "
        "405b-Proxy rows).",
    ),
    click.option(
        "--fit",
        is_flag=True,
        help="Run the largest slice of the model each GPU holds (torch engine): full width, fewer layers, "
        "for MoE models fewer experts per layer (top-k and expert shape kept), a smaller vocabulary only "
        "as a last resort; chosen from the memory estimate, every difference printed.",
    ),
    click.option(
        "--memory-check/--no-memory-check",
        default=True,
        show_default=True,
        help="Refuse, before submitting, a torch-engine GPU run whose memory estimate exceeds the GPU's "
        "memory (docs/memory-estimate.md).",
    ),
    click.option(
        "--steps",
        type=click.IntRange(min=1),
        help="Training steps (default 50, as in the published recipes).",
    ),
    click.option(
        "--window-check/--no-window-check",
        default=True,
        show_default=True,
        help="Refuse, before submitting, a run whose --steps end before the statistics window (its "
        "result could only be too_short); --no-window-check runs it anyway, a smoke test.",
    ),
    click.option(
        "--seed",
        type=int,
        default=1234,
        show_default=True,
        help="Random seed of the weights and synthetic data.",
    ),
    click.option(
        "--compile/--no-compile",
        "compile_",
        default=None,
        help="torch.compile each decoder layer (torch engine; default: on GPU, off on CPU).",
    ),
    click.option(
        "--profile",
        is_flag=True,
        envvar="ENABLE_PROFILE",
        help="Profile the window steps with nsys, or torch.profiler without it. [env: ENABLE_PROFILE]",
    ),
    click.option(
        "--profile-start",
        type=click.IntRange(min=1),
        help="First profiled step (default 45). [env: PROFILE_START_STEP, RUN_CONF_PROFILE_START_STEP]",
    ),
    click.option(
        "--profile-stop",
        type=click.IntRange(min=1),
        help="Last profiled step (default 50). [env: PROFILE_STOP_STEP, RUN_CONF_PROFILE_STOP_STEP]",
    ),
    click.option(
        "--gpu-metrics",
        is_flag=True,
        envvar="ENABLE_GPU_METRICS",
        help="Add GPU metrics to an nsys profile. [env: ENABLE_GPU_METRICS]",
    ),
    click.option(
        "--nccl-trace",
        is_flag=True,
        envvar="ENABLE_NCCLTRACE",
        help="Trace NCCL collectives over the first 5 steps. [env: ENABLE_NCCLTRACE]",
    ),
    click.option(
        "--checkpoint-save",
        is_flag=True,
        envvar="ENABLE_CHECKPOINT",
        help="Save a distributed checkpoint at the end. [env: ENABLE_CHECKPOINT]",
    ),
    click.option(
        "--checkpoint-dir",
        envvar="CHECKPOINT_DIR",
        type=click.Path(file_okay=False),
        help="Where checkpoints go (default: where the published recipe's launcher puts them). "
        "[env: CHECKPOINT_DIR]",
    ),
    click.option(
        "--checkpoint-load",
        envvar="LOAD_CHECKPOINT_PATH",
        type=click.Path(),
        help="Load this checkpoint and train one step. [env: LOAD_CHECKPOINT_PATH]",
    ),
    click.option(
        "--env",
        "env_items",
        multiple=True,
        metavar="NAME=VALUE",
        help="Set a variable for every rank.",
    ),
    click.option(
        "--framework-arg",
        "framework_args",
        multiple=True,
        metavar="PATH=VALUE",
        help="Set a field of the production framework's configuration (Megatron-Bridge, NeMo 2), e.g. "
        "model.recompute_granularity=full; checked before anything is submitted; the run is then "
        "tuned. Repeatable.",
    ),
    click.option(
        "--engine",
        type=click.Choice(["torch", "production"]),
        help="torch (llmb's own) or production (the recipe's framework in NVIDIA's container). "
        "Default: torch on this machine and for --proxy, production on a cluster.",
    ),
    click.option(
        "--account",
        envvar=VARIABLES["account"],
        help=f"Cluster account. [env: {VARIABLES['account']}]",
    ),
    click.option(
        "--partition",
        envvar=VARIABLES["partition"],
        help=f"Cluster partition (queue). [env: {VARIABLES['partition']}]",
    ),
    click.option(
        "--time-limit",
        envvar=VARIABLES["time_limit"],
        help=f"Job time limit: minutes, MM:SS, HH:MM:SS or D-HH:MM. [env: {VARIABLES['time_limit']}]",
    ),
    click.option(
        "--nodelist",
        envvar=VARIABLES["nodelist"],
        metavar="NODES",
        help=f"Run on these nodes, e.g. node[001-004]. [env: {VARIABLES['nodelist']}]",
    ),
    click.option(
        "--exclude",
        envvar=VARIABLES["exclude"],
        metavar="NODES",
        help=f"Never run on these nodes. [env: {VARIABLES['exclude']}]",
    ),
    click.option(
        "--exclude-from",
        "exclude_from",
        metavar="PREFLIGHT.json",
        type=click.Path(dir_okay=False),
        help="Never run on the nodes this llmb preflight file flagged (added to --exclude); the run records "
        "the file.",
    ),
    click.option(
        "--reservation",
        envvar=VARIABLES["reservation"],
        help=f"Run in this reservation. [env: {VARIABLES['reservation']}]",
    ),
    click.option(
        "--qos", envvar=VARIABLES["qos"], help=f"Quality of service. [env: {VARIABLES['qos']}]"
    ),
    click.option(
        "--constraint",
        envvar=VARIABLES["constraint"],
        metavar="FEATURES",
        help=f"Node features, e.g. gpu&ib. [env: {VARIABLES['constraint']}]",
    ),
    click.option(
        "--segment",
        envvar=VARIABLES["segment"],
        metavar="N",  # its check: llmb.install.value_checks
        help=f"Nodes per topology segment (default: llmb's rule on 4-GPU nodes). "
        f"[env: {VARIABLES['segment']}]",
    ),
    click.option(
        "--gres",
        envvar=VARIABLES["gres"],
        metavar="gpu:N|none",
        help=f"How the cluster schedules GPUs: gpu:N, gpu:TYPE:N or none (default: detected). "
        f"[env: {VARIABLES['gres']}]",
    ),
    click.option(
        "--numa-binding/--no-numa-binding",
        default=None,
        envvar=VARIABLES["numa_binding"],
        help=f"Each rank on its GPU's NUMA node (default: on). [env: {VARIABLES['numa_binding']}]",
    ),
    click.option(
        "--dump-env",
        is_flag=True,
        help="Write each run's effective environment (secrets redacted) beside its log.",
    ),
    click.option(
        "--retries",
        type=click.IntRange(min=0),
        default=0,
        show_default=True,
        help="Resubmit a fresh job, away from the failed nodes, after an infrastructure failure.",
    ),
    click.option(
        "--requeue",
        is_flag=True,
        help="Let the scheduler requeue the job in place (off by default).",
    ),
    click.option(
        "--image",
        help="Container image (registry#repo:tag or a .sqsh file); default: the recipe's.",
    ),
    click.option(
        "--mount",
        "mounts",
        multiple=True,
        metavar="SRC:DST[:ro]",
        help="Container mount. Repeatable.",
    ),
    click.option(
        "--bare",
        is_flag=True,
        help="Run the worker from the nodes' Python environment, without a container.",
    ),
    click.option(
        "--secret",
        "secrets",
        multiple=True,
        metavar="NAME",
        help="Pass variable NAME to the job only through the submission environment (HF_TOKEN always is).",
    ),
    click.option(
        "--additional-slurm-params",
        envvar="ADDITIONAL_SLURM_PARAMS",
        metavar="K=V;FLAG",
        help="Extra sbatch parameters, semicolon-separated. [env: ADDITIONAL_SLURM_PARAMS]",
    ),
    click.option(
        "--context",
        "kube_context",
        metavar="NAME",
        help="The kubeconfig context a --backend kubernetes run uses (default: the current one).",
    ),
    click.option(
        "--backend-opt",
        "backend_opts",
        multiple=True,
        metavar="KEY=VALUE",
        help="A backend's own setting (e.g. project=NAME for runai). Repeatable.",
    ),
]


def run_options(func):
    """The options above on the command ``func``, and the checks of their combination that every
    command taking them makes, in the same words, before anything else (``checked_combination``)."""

    @functools.wraps(func)
    def checked(*args, **kwargs):
        checked_combination(kwargs)
        return func(*args, **kwargs)

    for option in reversed(_OPTIONS):
        checked = option(checked)
    return checked


def checked_combination(values: dict) -> None:
    """Refuse options that exclude each other (``--proxy``, ``--layers``, ``--fit``: one reduced model at
    most), with the message a sweep file's section gets for them too (``reduction_conflict``)."""
    given = (values.get("proxy"), values.get("layers") is not None, values.get("fit"))
    if sum(map(bool, given)) < 2:
        return  # the common case, without importing the recipes
    from llmb.errors import UsageError
    from llmb.recipes.proxies import reduction_conflict

    problem = reduction_conflict(values.get("proxy"), values.get("layers"), values.get("fit"))
    if problem:
        raise UsageError(problem)


# The options of a job that is not a recipe's run (llmb preflight): where and how to submit.
CLUSTER_OPTIONS = (
    "backend",
    "env_items",
    "account",
    "partition",
    "time_limit",
    "nodelist",
    "exclude",
    "exclude_from",
    "reservation",
    "qos",
    "constraint",
    "segment",
    "gres",
    "numa_binding",
    "image",
    "mounts",
    "bare",
    "secrets",
    "additional_slurm_params",
    "kube_context",
    "backend_opts",
)


def cluster_options(func):
    """``CLUSTER_OPTIONS`` of the options above, as ``run_options`` gives them."""
    for option in reversed(_OPTIONS):
        probe = option(lambda: None).__click_params__[0]
        if probe.name in CLUSTER_OPTIONS:
            func = option(func)
    return func


def parameter_names() -> dict[str, str]:
    """Each option above by its flag name as a sweep file writes it ('--time-limit' -> 'time_limit'),
    to the parameter click passes it as ('time_limit'; '--compile' -> 'compile_', '--env' -> 'env_items')."""
    params = run_options(lambda: None).__click_params__
    return {
        param.opts[0].removeprefix("--").replace("-", "_"): param.name for param in reversed(params)
    }
