"""What a plugin may import from llmb: one flat namespace, ``from llmb import Workload, hookimpl``.

``FACADE`` maps each name a workload or backend plugin builds on to the module that defines it;
``llmb/__init__.py`` imports that module the first time the name is asked for (``import llmb``
itself imports none of them: a rank's and the CLI's start-up stay as cheap as they were). A name
equal to its module's last part (``value_checks``, ``http_safety``, ``redaction``) is the module
itself: a plugin that uses many of a helper module's functions reads them from it. Everything else
in ``llmb`` is internal and may move; ``tests/test_public_api.py`` fails when a name no longer
resolves, when a plugin in this repository imports anything but ``from llmb import ...``, and when
``docs/plugin-api.md`` no longer lists exactly these names.

``MOVED`` keeps the module paths plugins imported before: importing an old path gives the module
at its new one, with a DeprecationWarning naming it (for one release). The internal paths the
plugin API named before the facade (``llmb.recipes.records``, ...) are real modules and keep
importing, without a warning.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import warnings

FACADE: dict[str, str] = {
    # hooks, logging, errors
    "hookimpl": "llmb",
    "get_logger": "llmb.log",
    "LlmbError": "llmb.errors",
    "UsageError": "llmb.errors",
    # workloads: records, workload files, FLOPs, parameters, GPUs
    "Workload": "llmb.recipes.records",
    "ModelArch": "llmb.recipes.records",
    "ModelFlops": "llmb.recipes.records",
    "load_workload": "llmb.recipes.workload_file",
    "resolve_from_tables": "llmb.recipes.resolve",
    "dense_transformer": "llmb.recipes.flops",
    "megatron_bridge_sample": "llmb.recipes.flops",
    "mamba_d_inner": "llmb.recipes.params",
    "catalogue": "llmb.recipes.gpus",
    "gpu_type": "llmb.recipes.gpus",
    # the torch engine's building blocks (llmb_build_model); importing one imports torch
    "CausalLM": "llmb.engines.torch.blocks",
    "GroupedQueryAttention": "llmb.engines.torch.blocks",
    "LatentAttention": "llmb.engines.torch.latent",
    "LayerNorm1p": "llmb.engines.torch.blocks",
    "LayerParts": "llmb.engines.torch.blocks",
    "Mamba2Mixer": "llmb.engines.torch.blocks",
    "RMSNorm": "llmb.engines.torch.blocks",
    "RotaryEmbedding": "llmb.engines.torch.blocks",
    "RoutedMoE": "llmb.engines.torch.blocks",
    "SquaredReLUMLP": "llmb.engines.torch.blocks",
    "SwiGLU": "llmb.engines.torch.blocks",
    # backends: the contract, what a job runs, its record and how it ended
    "Backend": "llmb.backends",
    "RunSpec": "llmb.runs.runspec",
    "SubmitOptions": "llmb.runs.runspec",
    "SECRET_VARIABLES": "llmb.runs.runspec",
    "Job": "llmb.runs.jobs",
    "JobStatus": "llmb.runs.jobs",
    "Ending": "llmb.runs.jobs",
    "NothingSubmitted": "llmb.runs.jobs",
    "Unconfirmed": "llmb.runs.jobs",
    "TERMINAL": "llmb.runs.jobs",
    "job_dir": "llmb.runs.jobs",
    "cancel_requested": "llmb.runs.jobs",
    "RUN_FILE": "llmb.runs.jobs",
    "now": "llmb.runs.jobs",
    "read_json": "llmb.runs.experiment",
    "write_json": "llmb.runs.experiment",
    "install_dir": "llmb.paths",
    "read_tail": "llmb.files",
    "image_path": "llmb.install.images",
    "VARIABLES": "llmb.install.cluster_settings",
    # safe inputs: one check per kind of value, environment names, HTTP, secrets, YAML
    "value_checks": "llmb.install.value_checks",
    "env_name_problem": "llmb.env_names",
    "http_safety": "llmb.http_safety",
    "redaction": "llmb.redaction",
    "load_yaml_file": "llmb.yamlio",
    "load_user_yaml_file": "llmb.yamlio",
}


def resolve(name: str):
    """The object ``from llmb import name`` gives: the module itself for a module's own name, else the
    attribute of that name of its module (KeyError: not in the facade)."""
    path = FACADE[name]
    module = importlib.import_module(path)
    return module if path.rpartition(".")[2] == name else getattr(module, name)


# Where the plugin-facing modules were before the core was grouped by stage (llmb 0.1).
MOVED: dict[str, str] = {
    "llmb.host": "llmb.plugins.host",
    "llmb.records": "llmb.recipes.records",
    "llmb.workload_file": "llmb.recipes.workload_file",
    "llmb.flops": "llmb.recipes.flops",
    "llmb.params": "llmb.recipes.params",
    "llmb.gpus": "llmb.recipes.gpus",
    "llmb.engine": "llmb.engines.torch",
    "llmb.engine.blocks": "llmb.engines.torch.blocks",
    "llmb.runspec": "llmb.runs.runspec",
    "llmb.jobs": "llmb.runs.jobs",
    "llmb.outcome": "llmb.lifecycle.outcome",
    "llmb.flaky": "llmb.lifecycle.flaky",
    "llmb.experiment": "llmb.runs.experiment",
    "llmb.provenance": "llmb.runs.provenance",
    "llmb.images": "llmb.install.images",
    # llmb 0.3: a run's life moved from llmb.runs to llmb.lifecycle (docs/architecture.md)
    "llmb.runs.launch": "llmb.lifecycle.submit",
    "llmb.lifecycle.launch": "llmb.lifecycle.submit",  # split into lifecycle.prepare and lifecycle.submit
    "llmb.runs.outcome": "llmb.lifecycle.outcome",
    "llmb.runs.flaky": "llmb.lifecycle.flaky",
    "llmb.runs.follow": "llmb.lifecycle.follow",
    "llmb.runs.sweep_runner": "llmb.lifecycle.sweep_runner",
    "llmb.runs.run_option_values": "llmb.lifecycle.run_option_values",
    "llmb.cluster_settings": "llmb.install.cluster_settings",
    # llmb 0.3: an environment variable name's check is a base module (docs/architecture.md, The stages)
    "llmb.runs.env_names": "llmb.env_names",
}


class MovedModules:
    """Answers an import of an old path in ``MOVED`` with the module at its new path (the same
    object, so ``isinstance`` and monkeypatching agree), warning once per path. A meta-path finder
    and its loader by protocol, not by subclassing ``importlib.abc`` (importing that costs every
    ``llmb`` command ~10 ms)."""

    def find_spec(self, fullname, path=None, target=None):
        return importlib.machinery.ModuleSpec(fullname, self) if fullname in MOVED else None

    def create_module(self, spec):
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} has moved to {new}; import it from there (or from llmb, "
            f"the plugin API: docs/plugin-api.md)",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(new)

    def exec_module(self, module) -> None:
        """The module at the new path is already executed."""


def install_moved_modules() -> None:
    """Put the ``MOVED`` finder on ``sys.meta_path`` (once); ``import llmb`` does this."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModules())
