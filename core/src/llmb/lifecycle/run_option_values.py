"""The values of ``llmb run``'s options beyond the recipe, by parameter name
(``proxy``, ``steps``, ``profile``, ``env_items``, ``account``, ...), turned
into RunOptions and a backend name. The command line gives them through
``llmb.cli.run_options``; a sweep file gives them by the same names.

A cluster run (any backend but ``local``) takes from the cluster file
(``llmb.install.cluster_config``) each setting that neither a flag nor its variable
gave (a value of None here; an empty flag value clears the file's), the
container image for its workload, the file's mounts beside ``--mount``'s and
its environment (``--env`` wins); its ``gpu`` and ``gpus_per_node`` are the
request's defaults, and a ``--gpu`` that disagrees with ``gpu`` is refused."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING

from llmb.env_names import env_name_problem
from llmb.errors import UsageError
from llmb.install import cluster_settings, value_checks

if TYPE_CHECKING:
    from llmb.install.cluster_config import ClusterConfig
    from llmb.recipes.records import RecipeRequest
    from llmb.runs.runspec import RunOptions

# The settings SubmitOptions holds; gpu and gpus_per_node belong to the request.
_SUBMIT_SETTINGS = tuple(
    s for s in cluster_settings.SETTINGS if s.name not in ("gpu", "gpus_per_node")
)


def _env_pairs(items: tuple[str, ...], flag: str = "--env") -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            example = (
                "--env TP_COMM_OVERLAP=False" if flag == "--env" else f"{flag} project=llmb-testing"
            )
            raise UsageError(f"malformed {flag} {item!r}: expected NAME=VALUE, e.g. {example}.")
        name = name.strip()
        if flag == "--env":
            value_checks.env_name(name, flag)  # each kind's one check, as for the cluster file's
            value = value_checks.env_value(name, value, f"{flag} {name}")
        pairs.append((name, value))
    return tuple(pairs)


def _secret_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """Secret variables: named, and set here (their values travel only in the submission environment)."""
    for name in names:
        if env_name_problem(name, "--secret"):
            raise UsageError(
                f"--secret {name!r}: give the variable's name (e.g. --secret WANDB_API_KEY), not its value."
            )
        if name not in os.environ:
            raise UsageError(
                f"--secret {name}: the variable is not set in this shell; export it first."
            )
    return tuple(dict.fromkeys(names))


def _named(setting: cluster_settings.Setting, value: object) -> str:
    """How the user gave ``value``: the variable when click took it from there, else the flag."""
    import click

    ctx = click.get_current_context(silent=True)
    if (
        ctx is not None
        and ctx.params.get(setting.name) == value
        and ctx.get_parameter_source(setting.name) == click.core.ParameterSource.ENVIRONMENT
    ):
        return setting.variable
    return setting.flag


def _cluster_values(kw: dict, config: ClusterConfig | None) -> dict:
    """The dedicated cluster settings: a flag's (or its variable's) checked value, else the file's."""
    values = {}
    for setting in _SUBMIT_SETTINGS:
        given = kw.get(setting.name)
        if given is None:
            value = config.value(setting.name) if config is not None else None
        elif given == "":
            value = None  # --qos '': none, whatever the file says
        else:
            value = setting.check(given, _named(setting, given))
        if value is not None:
            values[setting.name] = value
    return values


def cluster_config_for(backend: str) -> ClusterConfig | None:
    """The cluster file a run on ``backend`` reads: none for the local backend."""
    if backend == "local":
        return None
    from llmb.install.cluster_config import load

    return load()


def _backend_settings(kw: dict, backend: str) -> tuple[tuple[str, str], ...]:
    """The backend's own settings: ``--backend-opt KEY=VALUE``, and ``--context NAME`` as the Kubernetes
    backend's ``context`` (the kubeconfig's, as kubectl's ``--context``)."""
    extra = _env_pairs(tuple(kw.get("backend_opts") or ()), "--backend-opt")
    context = kw.get("kube_context")
    if context is None:
        return extra
    if backend != "kubernetes":
        raise UsageError(
            f"--context names a kubeconfig context, which only --backend kubernetes uses; this run's "
            f"backend is {backend}. Drop --context, or add --backend kubernetes."
        )
    if any(name == "context" for name, _ in extra):
        raise UsageError(
            "--context and --backend-opt context=... both name the kubeconfig context: give one."
        )
    return (*extra, ("context", context))


def options_from(
    kw: dict,
    workload: str | None = None,
    gpus_per_node: int | None = None,
    config: ClusterConfig | None = None,
    gpu: str | None = None,
) -> tuple[RunOptions, str]:
    """(RunOptions, backend name) from the run options' values, by parameter name; on a cluster
    backend, with the cluster file's values (``config``, read when not given) where none was given.
    ``gpu``: the run's GPU type, which an ``--exclude-from`` preflight of another type is warned of."""
    from llmb.recipes.proxies import PROXIES
    from llmb.runs.profiling import asked_window
    from llmb.runs.runspec import RunOptions, SubmitOptions

    backend = kw.get("backend") or "local"
    if config is None:
        config = cluster_config_for(backend)
    proxy = kw.get("proxy")
    if proxy is not None and proxy not in PROXIES:
        raise UsageError(f"unknown --proxy {proxy!r}; valid: {', '.join(PROXIES)}.")
    env = _env_pairs(tuple(kw.get("env_items") or ()))
    cluster = _cluster_values(kw, config)
    preflight = None
    # a preflight file's flagged nodes join the exclude list (llmb.preflight)
    if kw.get("exclude_from"):
        from llmb.runs.exclusion import merged, read

        preflight = read(kw["exclude_from"], gpu=gpu, backend=backend)
        exclude = merged(cluster.get("exclude"), preflight["exclude"])
        if exclude:
            cluster["exclude"] = cluster_settings.BY_NAME["exclude"].check(
                exclude, "--exclude-from"
            )
    image = (
        value_checks.image(kw["image"], "--image")
        if kw.get("image")
        else (config.image(workload) if config is not None and workload else None)
    )
    mounts = tuple(
        dict.fromkeys(
            [
                *(config.mounts if config else ()),
                *(value_checks.mount(m, "--mount") for m in kw.get("mounts") or ()),
            ]
        )
    )
    cluster_env = tuple((k, v) for k, v in (config.env if config else ()) if k not in dict(env))
    if backend == "local":
        gpus_per_node = None  # this machine's GPUs: nothing to tell a scheduler
    elif gpus_per_node is None and config is not None:
        gpus_per_node = config.gpus_per_node
    options = RunOptions(
        proxy=proxy,
        layers=kw.get("layers"),
        fit=bool(kw.get("fit")),
        memory_check=kw.get("memory_check", True) is not False,
        window_check=kw.get("window_check", True) is not False,
        steps=kw.get("steps"),
        seed=kw.get("seed", 1234),
        compile=kw.get("compile_"),
        profile=bool(kw.get("profile")),
        gpu_metrics=bool(kw.get("gpu_metrics")),
        nccl_trace=bool(kw.get("nccl_trace")),
        profile_window=asked_window(kw.get("profile_start"), kw.get("profile_stop")),
        checkpoint_save=bool(kw.get("checkpoint_save")),
        checkpoint_dir=kw.get("checkpoint_dir"),
        checkpoint_load=kw.get("checkpoint_load"),
        env=env,
        engine=kw.get("engine"),
        dump_env=bool(kw.get("dump_env")),
        framework_args=tuple(kw.get("framework_args") or ()),
        preflight=preflight,
        submit=SubmitOptions(
            retries=kw.get("retries") or 0,
            requeue=bool(kw.get("requeue")),
            image=image,
            mounts=mounts,
            bare=bool(kw.get("bare")),
            secrets=_secret_names(tuple(kw.get("secrets") or ())),
            additional=kw.get("additional_slurm_params") or None,
            extra=_backend_settings(kw, backend),
            gpus_per_node=gpus_per_node,
            cluster_env=cluster_env,
            **cluster,
        ),
    )
    return options, backend


def cluster_request(request: RecipeRequest, config: ClusterConfig | None) -> RecipeRequest:
    """The request with the cluster file's GPU type and GPUs per node where it names none;
    UsageError when it names a GPU type other than the cluster's."""
    if config is None:
        return request
    if config.gpu is not None:
        if request.gpu is None:
            request = replace(request, gpu=config.gpu)
        elif request.gpu.strip().lower() != config.gpu:
            named = _named(cluster_settings.BY_NAME["gpu"], request.gpu)
            raise UsageError(
                f"{named} {request.gpu} disagrees with the cluster file {config.path}, which says the "
                f"cluster's GPUs are gpu: {config.gpu}. Ask for {config.gpu}, or for no GPU type (the file's is "
                f"taken), or correct gpu in the file if the cluster has changed."
            )
    if request.gpus_per_node is None and config.gpus_per_node is not None:
        request = replace(request, gpus_per_node=config.gpus_per_node)
    return request


def run_inputs(kw: dict, request: RecipeRequest) -> tuple[RecipeRequest, RunOptions, str]:
    """(request, RunOptions, backend) of one run: ``options_from`` and ``cluster_request`` on one
    reading of the cluster file."""
    config = cluster_config_for(kw.get("backend") or "local")
    request = cluster_request(request, config)
    options, backend = options_from(
        kw, request.workload, request.gpus_per_node, config, gpu=request.gpu
    )
    return request, options, backend
