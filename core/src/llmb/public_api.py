"""What a plugin may import from llmb: the names workload and backend plugins build on.

``PUBLIC`` maps each module to the names in it that plugins use. Anything
else in ``llmb`` is internal and may move. ``tests/test_public_api.py`` fails
when a listed name disappears, when a plugin or backend in this repository
imports a name that is not listed, and when ``docs/plugin-api.md`` no longer
shows this list.

``MOVED`` keeps the paths plugins imported before the core was grouped by
stage (``llmb.records`` is now ``llmb.recipes.records``, ...): importing an old
path gives the module at its new one, with a DeprecationWarning naming it.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import warnings

PUBLIC: dict[str, tuple[str, ...]] = {
    # hooks and the plugin host
    "llmb": ("hookimpl",),
    "llmb.plugins.host": ("PluginHost",),
    "llmb.errors": ("LlmbError", "UsageError"),
    "llmb.log": ("get_logger",),
    # workloads: records, workload files, FLOPs, parameters, the torch engine's building blocks
    "llmb.recipes.records": ("ModelArch", "ModelFlops", "Workload"),
    "llmb.recipes.workload_file": ("load_workload",),
    "llmb.recipes.flops": ("dense_transformer",),
    "llmb.recipes.params": ("mamba_d_inner",),
    "llmb.engines.torch.blocks": ("CausalLM", "GroupedQueryAttention", "LayerNorm1p", "LayerParts", "Mamba2Mixer",
                           "RMSNorm", "RotaryEmbedding", "RoutedMoE", "SquaredReLUMLP", "SwiGLU"),
    "llmb.recipes.gpus": ("catalogue", "gpu_type"),
    # backends: the backend contract, run specs, jobs and their outcome
    "llmb.backends": ("Backend",),
    "llmb.runs.runspec": ("RunSpec", "SECRET_VARIABLES", "SubmitOptions"),
    "llmb.runs.jobs": ("CANCEL_FILE", "Job", "JobStatus", "TERMINAL", "cancel_requested", "job_dir", "job_lock",
                  "last_iteration", "load_job", "now", "read_exit", "request_cancel", "save_job", "wait_until_ended"),
    "llmb.runs.outcome": ("finish",),
    "llmb.runs.flaky": ("FlakyFailure", "flaky_failure", "retry_nan_asked"),
    "llmb.runs.experiment": ("RECIPE_FILE", "create", "read_json", "write_json"),
    "llmb.runs.provenance": ("read", "write_section"),
    "llmb.results.scan": ("read_tail",),
    # installation, cluster settings, and safe inputs
    "llmb.paths": ("install_dir",),
    "llmb.install.images": ("check_reference", "image_path"),
    "llmb.install.cluster_settings": ("VARIABLES", "time_limit"),
    "llmb.install.value_checks": ("features", "gres", "hostlist", "image", "mount", "names", "sbatch_option",
                                  "segment", "time_limit"),
    "llmb.runs.env_names": ("env_name_problem",),
    "llmb.http_safety": ("DeadlineExceeded", "RedirectRefused", "TooLarge", "copy_bounded", "exchange", "fetch",
                         "mask"),
    "llmb.redaction": ("MASK", "credential_in", "is_secret_name", "mask"),
    "llmb.yamlio": ("load_user_yaml_file", "load_yaml_file"),
}

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
    "llmb.outcome": "llmb.runs.outcome",
    "llmb.flaky": "llmb.runs.flaky",
    "llmb.experiment": "llmb.runs.experiment",
    "llmb.provenance": "llmb.runs.provenance",
    "llmb.env_names": "llmb.runs.env_names",
    "llmb.images": "llmb.install.images",
    "llmb.cluster_settings": "llmb.install.cluster_settings",
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
        warnings.warn(f"{spec.name} has moved to {new}; import it from there (llmb's plugin API: "
                      f"docs/plugin-api.md)", DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module) -> None:
        """The module at the new path is already executed."""


def install_moved_modules() -> None:
    """Put the ``MOVED`` finder on ``sys.meta_path`` (once); ``import llmb`` does this."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModules())
