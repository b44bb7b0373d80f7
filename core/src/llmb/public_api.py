"""What a plugin may import from llmb: the names workload and backend plugins build on.

``PUBLIC`` maps each module to the names in it that plugins use. Anything
else in ``llmb`` is internal and may move (the core's folders are being
regrouped by stage). ``tests/test_public_api.py`` fails when a listed name
disappears, when a plugin or backend in this repository imports a name that
is not listed, and when ``docs/plugin-api.md`` no longer shows this list.
"""

from __future__ import annotations

PUBLIC: dict[str, tuple[str, ...]] = {
    # hooks and the plugin host
    "llmb": ("hookimpl",),
    "llmb.host": ("PluginHost",),
    "llmb.errors": ("LlmbError", "UsageError"),
    "llmb.log": ("get_logger",),
    # workloads: records, workload files, FLOPs, parameters, the torch engine's building blocks
    "llmb.records": ("ModelArch", "ModelFlops", "Workload"),
    "llmb.workload_file": ("load_workload",),
    "llmb.flops": ("dense_transformer",),
    "llmb.params": ("mamba_d_inner",),
    "llmb.engine.blocks": ("CausalLM", "GroupedQueryAttention", "LayerNorm1p", "LayerParts", "Mamba2Mixer",
                           "RMSNorm", "RotaryEmbedding", "RoutedMoE", "SquaredReLUMLP", "SwiGLU"),
    "llmb.gpus": ("catalogue", "gpu_type"),
    # backends: the backend contract, run specs, jobs and their outcome
    "llmb.backends": ("Backend",),
    "llmb.runspec": ("RunSpec", "SECRET_VARIABLES", "SubmitOptions"),
    "llmb.jobs": ("CANCEL_FILE", "Job", "JobStatus", "TERMINAL", "cancel_requested", "job_dir", "job_lock",
                  "last_iteration", "load_job", "now", "read_exit", "request_cancel", "save_job", "wait_until_ended"),
    "llmb.outcome": ("finish",),
    "llmb.flaky": ("FlakyFailure", "flaky_failure", "retry_nan_asked"),
    "llmb.experiment": ("RECIPE_FILE", "create", "read_json", "write_json"),
    "llmb.provenance": ("read", "write_section"),
    "llmb.results.scan": ("read_tail",),
    # installation, cluster settings, and safe inputs
    "llmb.paths": ("install_dir",),
    "llmb.images": ("check_reference", "image_path"),
    "llmb.cluster_settings": ("VARIABLES", "time_limit"),
    "llmb.env_names": ("env_name_problem",),
    "llmb.http_safety": ("DeadlineExceeded", "RedirectRefused", "TooLarge", "fetch", "mask"),
    "llmb.yamlio": ("load_yaml_file",),
}
