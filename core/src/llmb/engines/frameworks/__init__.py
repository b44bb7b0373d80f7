"""The production frameworks: Megatron-Bridge and NeMo 2, inside NVIDIA's NeMo container.

``build_config`` describes, as JSON, exactly what a framework will be told
about a run (``RunSpec.framework_config``); ``train`` runs that on one rank
(``llmb.worker`` calls it when ``RunSpec.engine`` is ``megatron_bridge`` or
``nemo2``). Importing this package imports no framework and no torch: the
frameworks need Python 3.12 and GPUs and are imported by ``train`` only.

    description.py      the framework-independent flow: layout, batch, steps, profiling, env
    settings.py         the seeds' variables and the settings they map to
    megatron_bridge.py  Megatron-Bridge's names, and its run
    nemo2.py            NeMo 2's names, and its run
    overrides.py        applying a configuration's overrides to the framework's recipe object
    runtime.py          environment, rank and import checks around a run
"""

from __future__ import annotations

import importlib
from types import ModuleType

from llmb.errors import UsageError

MODULES = {
    "megatron_bridge": "llmb.engines.frameworks.megatron_bridge",
    "nemo2": "llmb.engines.frameworks.nemo2",
}


def framework(name: str) -> ModuleType:
    """The module that speaks to framework ``name``."""
    if name not in MODULES:
        raise UsageError(
            f"unknown production framework {name!r}; llmb drives {', '.join(MODULES)}."
        )
    return importlib.import_module(MODULES[name])


def build_config(
    workload,
    recipe,
    options,
    *,
    experiment: str,
    inner_dir: str,
    checkpoint_save_dir: str | None,
    checkpoint_load_dir: str | None,
) -> dict:
    """What ``recipe.framework`` will be told to run ``recipe`` with ``options``
    (a ``Workload``, ``Recipe`` and ``RunOptions``); JSON-serialisable.
    ``checkpoint_save_dir``/``checkpoint_load_dir`` are ``llmb.runs.runspec``'s."""
    from llmb.engines.frameworks.description import describe

    return describe(
        framework(recipe.framework),
        workload,
        recipe,
        options,
        experiment=experiment,
        inner_dir=inner_dir,
        checkpoint_save_dir=checkpoint_save_dir,
        checkpoint_load_dir=checkpoint_load_dir,
    )


def train(spec, rank: int, world: int, local_rank: int) -> None:
    """Run ``spec`` (a ``RunSpec``) on this rank with its production framework."""
    if not spec.framework_config:
        raise ValueError(
            f"run {spec.job_id} asks for the {spec.engine} engine but carries no framework_config "
            f"(llmb.engines.frameworks.build_config makes it)."
        )
    framework(spec.engine).train(
        spec.framework_config, rank=rank, world=world, local_rank=local_rank
    )
