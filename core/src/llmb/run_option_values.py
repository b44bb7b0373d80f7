"""The values of ``llmb run``'s options beyond the recipe, by parameter name
(``proxy``, ``steps``, ``profile``, ``env_items``, ``account``, ...), turned
into RunOptions and a backend name. The command line gives them through
``llmb.cli.run_options``; a sweep file gives them by the same names."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from llmb.env_names import env_name_problem
from llmb.errors import UsageError

if TYPE_CHECKING:
    from llmb.runspec import RunOptions


def _env_pairs(items: tuple[str, ...], flag: str = "--env") -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            example = "--env TP_COMM_OVERLAP=False" if flag == "--env" else f"{flag} project=llmb-testing"
            raise UsageError(f"malformed {flag} {item!r}: expected NAME=VALUE, e.g. {example}.")
        name = name.strip()
        if flag == "--env" and (problem := env_name_problem(name, flag)):
            raise UsageError(problem)
        pairs.append((name, value))
    return tuple(pairs)


def _secret_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """Secret variables: named, and set here (their values travel only in the submission environment)."""
    for name in names:
        if env_name_problem(name, "--secret"):
            raise UsageError(f"--secret {name!r}: give the variable's name (e.g. --secret WANDB_API_KEY), not its value.")
        if name not in os.environ:
            raise UsageError(f"--secret {name}: the variable is not set in this shell; export it first.")
    return tuple(dict.fromkeys(names))


def options_from(kw: dict) -> tuple[RunOptions, str]:
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
