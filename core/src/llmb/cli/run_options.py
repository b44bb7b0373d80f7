"""``llmb run``'s options beyond the recipe, shared with ``llmb sweep`` (and a
sweep file's keys, which are these options' names: ``proxy``, ``steps``,
``profile``, ``env``, ...)."""

from __future__ import annotations

import click

from llmb.errors import UsageError

_OPTIONS = [
    click.option("--backend", envvar="LLMB_BACKEND", default="local", show_default=True,
                 help="Where to run: local (this machine) or a cluster backend. [env: LLMB_BACKEND]"),
    click.option("--proxy", metavar="NAME", help="Run a CPU-sized model with the workload's structure (tiny)."),
    click.option("--layers", type=click.IntRange(min=1), help="Run the full-width model with N layers (the seeds' proxy)."),
    click.option("--steps", type=click.IntRange(min=1), help="Training steps (default 50, as in the seeds)."),
    click.option("--seed", type=int, default=1234, show_default=True, help="Seed of the weights and synthetic data."),
    click.option("--compile", "compile_", is_flag=True, help="torch.compile the model (torch engine)."),
    click.option("--profile", is_flag=True, envvar="ENABLE_PROFILE",
                 help="Profile the window steps with nsys, or torch.profiler without it. [env: ENABLE_PROFILE]"),
    click.option("--profile-start", type=click.IntRange(min=1),
                 help="First profiled step (default 45). [env: PROFILE_START_STEP, RUN_CONF_PROFILE_START_STEP]"),
    click.option("--profile-stop", type=click.IntRange(min=1),
                 help="Last profiled step (default 50). [env: PROFILE_STOP_STEP, RUN_CONF_PROFILE_STOP_STEP]"),
    click.option("--gpu-metrics", is_flag=True, envvar="ENABLE_GPU_METRICS",
                 help="Add GPU metrics to an nsys profile. [env: ENABLE_GPU_METRICS]"),
    click.option("--nccl-trace", is_flag=True, envvar="ENABLE_NCCLTRACE",
                 help="Trace NCCL collectives over the first 5 steps. [env: ENABLE_NCCLTRACE]"),
    click.option("--checkpoint-save", is_flag=True, envvar="ENABLE_CHECKPOINT",
                 help="Save a distributed checkpoint at the end. [env: ENABLE_CHECKPOINT]"),
    click.option("--checkpoint-dir", envvar="CHECKPOINT_DIR", type=click.Path(file_okay=False),
                 help="Where checkpoints go (default: the seeds' layout). [env: CHECKPOINT_DIR]"),
    click.option("--checkpoint-load", envvar="LOAD_CHECKPOINT_PATH", type=click.Path(),
                 help="Load this checkpoint and train one step. [env: LOAD_CHECKPOINT_PATH]"),
    click.option("--env", "env_items", multiple=True, metavar="NAME=VALUE", help="Set a variable for every rank."),
    click.option("--engine", type=click.Choice(["torch", "production"]),
                 help="torch (llmb's own) or production (the recipe's framework in NVIDIA's container). "
                      "Default: torch on this machine and for --proxy, production on a cluster."),
    click.option("--account", envvar="SBATCH_ACCOUNT", help="Cluster account. [env: SBATCH_ACCOUNT]"),
    click.option("--partition", envvar="SBATCH_PARTITION", help="Cluster partition (queue). [env: SBATCH_PARTITION]"),
    click.option("--time-limit", envvar="SBATCH_TIMELIMIT",
                 help="Job time limit: minutes, MM:SS, HH:MM:SS or D-HH:MM. [env: SBATCH_TIMELIMIT]"),
    click.option("--retries", type=click.IntRange(min=0), default=0, show_default=True,
                 help="Resubmit a fresh job, away from the failed nodes, after an infrastructure failure."),
    click.option("--requeue", is_flag=True, help="Let the scheduler requeue the job in place (off by default)."),
    click.option("--image", help="Container image (registry#repo:tag or a .sqsh file); default: the recipe's."),
    click.option("--mount", "mounts", multiple=True, metavar="SRC:DST[:ro]", help="Container mount. Repeatable."),
    click.option("--bare", is_flag=True, help="Run the worker from the nodes' Python environment, without a container."),
    click.option("--secret", "secrets", multiple=True, metavar="NAME",
                 help="Pass variable NAME to the job only through the submission environment (HF_TOKEN always is)."),
    click.option("--additional-slurm-params", envvar="ADDITIONAL_SLURM_PARAMS", metavar="K=V;FLAG",
                 help="Extra sbatch parameters, semicolon-separated. [env: ADDITIONAL_SLURM_PARAMS]"),
    click.option("--backend-opt", "backend_opts", multiple=True, metavar="KEY=VALUE",
                 help="A backend's own setting (e.g. project=NAME for runai). Repeatable."),
]


def run_options(func):
    for option in reversed(_OPTIONS):
        func = option(func)
    return func


def _env_pairs(items: tuple[str, ...], flag: str = "--env") -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            example = "--env TP_COMM_OVERLAP=False" if flag == "--env" else f"{flag} project=llmb-testing"
            raise UsageError(f"malformed {flag} {item!r}: expected NAME=VALUE, e.g. {example}.")
        pairs.append((name.strip(), value))
    return tuple(pairs)


def _secret_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """Secret variables: named, and set here (their values travel only in the submission environment)."""
    import os
    import re

    for name in names:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise UsageError(f"--secret {name!r}: give the variable's name (e.g. --secret WANDB_API_KEY), not its value.")
        if name not in os.environ:
            raise UsageError(f"--secret {name}: the variable is not set in this shell; export it first.")
    return tuple(dict.fromkeys(names))


def options_from(kw: dict):
    """(RunOptions, backend name) from the run options' values, by parameter name."""
    from llmb.profiling import asked_window
    from llmb.proxies import PROXIES
    from llmb.runspec import RunOptions, SubmitOptions

    proxy = kw.get("proxy")
    if proxy is not None and proxy not in PROXIES:
        raise UsageError(f"unknown --proxy {proxy!r}; valid: {', '.join(PROXIES)}.")
    options = RunOptions(
        proxy=proxy, layers=kw.get("layers"), steps=kw.get("steps"), seed=kw.get("seed", 1234),
        compile=bool(kw.get("compile_")), profile=bool(kw.get("profile")), gpu_metrics=bool(kw.get("gpu_metrics")),
        nccl_trace=bool(kw.get("nccl_trace")), profile_window=asked_window(kw.get("profile_start"), kw.get("profile_stop")),
        checkpoint_save=bool(kw.get("checkpoint_save")), checkpoint_dir=kw.get("checkpoint_dir"),
        checkpoint_load=kw.get("checkpoint_load"), env=_env_pairs(tuple(kw.get("env_items") or ())),
        engine=kw.get("engine"),
        submit=SubmitOptions(
            account=kw.get("account") or None, partition=kw.get("partition") or None,
            time_limit=kw.get("time_limit") or None, retries=kw.get("retries") or 0, requeue=bool(kw.get("requeue")),
            image=kw.get("image"), mounts=tuple(kw.get("mounts") or ()), bare=bool(kw.get("bare")),
            secrets=_secret_names(tuple(kw.get("secrets") or ())), additional=kw.get("additional_slurm_params") or None,
            extra=_env_pairs(tuple(kw.get("backend_opts") or ()), "--backend-opt"),
        ),
    )
    return options, kw.get("backend") or "local"
