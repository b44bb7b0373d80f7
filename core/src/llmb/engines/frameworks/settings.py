"""The seeds' environment variables: where each one is handled, and the
framework settings some of them map to.

Every variable the recipe documents name is listed in ``RECIPE_VARIABLES`` (a
test reads the seeds and checks), with the part of llmb that honours it.
Variables that change what the framework is told (``TP_COMM_OVERLAP``) arrive
in the recipe's environment (a site plugin's ``Recipe.with_env``) or the
run's (``llmb run --env``) and are mapped by ``apply`` to their setting.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from llmb.errors import UsageError

TRUE = ("true", "1", "yes", "on")
FALSE = ("false", "0", "no", "off")


# Never passed to the ranks (a run's environment is recorded in run.json and recipe.json).
SECRETS = frozenset({"HF_TOKEN", "APP_SECRET"})


def parse_bool(name: str, value: str) -> bool:
    text = value.strip().lower()
    if text in TRUE or text in FALSE:
        return text in TRUE
    raise UsageError(
        f"{name}={value!r} is not a boolean; valid: {', '.join(TRUE)} or {', '.join(FALSE)} "
        f"(any case)."
    )


@dataclass(frozen=True)
class FrameworkSetting:
    """A seed variable that sets ``key`` of the framework configuration."""

    variable: str
    key: str
    parse: Callable[[str, str], object]
    meaning: str


FRAMEWORK_SETTINGS = {
    s.variable: s
    for s in (
        FrameworkSetting(
            "TP_COMM_OVERLAP",
            "tp_comm_overlap",
            parse_bool,
            "overlap tensor-parallel communication with compute (Nemotron-4's fix for GB200 NCCL "
            "watchdog timeouts is TP_COMM_OVERLAP=False)",
        ),
    )
}

# Where every variable of the seed documents is handled. Kinds: recipe (selects the
# recipe: llmb plan/run options), run (llmb run options), framework (a framework
# setting, above), backend (cluster submission), install (llmb install), paths, name
# (a part of a generated file name, not a setting).
RECIPE_VARIABLES: Mapping[str, tuple[str, str]] = {
    "MODEL_SIZE": ("recipe", "--size"),
    "DTYPE": ("recipe", "--dtype"),
    "GPU_TYPE": ("recipe", "--gpu (llmb plan/run), --gpu (llmb install)"),
    "JOB_TOTAL_GPUS": ("recipe", "--gpus"),
    "GPUS_PER_NODE": ("recipe", "--gpus-per-node"),
    "STRONG_SCALING": ("recipe", "--strong-scaling"),
    "ENABLE_PROFILE": (
        "run",
        "--profile: nsys over the profiled steps (framework profiling settings)",
    ),
    "PROFILE_START_STEP": ("run", "--profile-start (default: the published recipe's window)"),
    "PROFILE_STOP_STEP": (
        "run",
        "--profile-stop; the run ends at this step, as the published recipes' profiled runs do",
    ),
    "RUN_CONF_PROFILE_START_STEP": ("run", "--profile-start (the replaced tool's README spelling)"),
    "RUN_CONF_PROFILE_STOP_STEP": ("run", "--profile-stop (the replaced tool's README spelling)"),
    "ENABLE_GPU_METRICS": (
        "run",
        "--gpu-metrics: nsys GPU metrics, sampled by local rank 0 of each node",
    ),
    "ENABLE_NCCLTRACE": ("run", "--nccl-trace: NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL, 5 steps"),
    "ENABLE_CHECKPOINT": ("run", "--checkpoint-save: the framework saves at the last step"),
    "CHECKPOINT_DIR": ("run", "--checkpoint-dir: where the framework saves"),
    "LOAD_CHECKPOINT_PATH": ("run", "--checkpoint-load: the framework loads it and trains 1 step"),
    "TP_COMM_OVERLAP": ("framework", "tp_comm_overlap (--env TP_COMM_OVERLAP=False)"),
    "TORCH_NCCL_TRACE_BUFFER_SIZE": (
        "framework",
        "passed to every rank with --env (the recipe README quotes it from an NCCL error message)",
    ),
    "HF_TOKEN": ("install", "llmb install: the gated Hugging Face downloads; never passed to jobs"),
    "LLMB_INSTALL": ("paths", "the install directory (images, workloads, results)"),
    "LLMB_WORKLOAD": ("paths", "derived: $LLMB_INSTALL/workloads/<workload>"),
    "LLMB_REPO": ("paths", "not needed: the recipes are llmb's plugins"),
    "STAGE_PATH": (
        "paths",
        "the older recipe READMEs' LLMB_INSTALL; llmb install warns and uses LLMB_INSTALL",
    ),
    "INSTALL_PATH": ("paths", "the recipe READMEs' conda instructions; llmb needs no conda"),
    "SBATCH_ACCOUNT": ("backend", "Slurm backend"),
    "SBATCH_PARTITION": ("backend", "Slurm backend"),
    "SBATCH_GPUS_PER_NODE": ("backend", "Slurm backend"),
    "ADDITIONAL_SLURM_PARAMS": ("backend", "Slurm backend"),
    "CLUSTER_TYPE": ("backend", "--backend slurm | runai | kubernetes"),
    "RUN_CONF_MOUNTS": ("backend", "Run:ai backend"),
    "BASE_URL": ("backend", "Run:ai backend"),
    "APP_ID": ("backend", "Run:ai backend"),
    "APP_SECRET": ("backend", "Run:ai backend; never written anywhere"),
    "PROJECT_NAME": ("backend", "Run:ai backend"),
    "PVC_DIR": ("backend", "Run:ai backend"),
    "SLURM_JOB_ID": ("name", "nsys report names: profile_%q{SLURM_JOB_ID}_..."),
    "SLURM_JOBID": ("name", "nsys report names (Nemotron-H's spelling of SLURM_JOB_ID)"),
    "SLURM_NODEID": ("name", "nsys report names"),
    "SLURM_PROCID": ("name", "nsys report names (NeMo 2 recipes)"),
    "SLURM_LOCALID": ("name", "nsys report names (Megatron-Bridge recipe)"),
    "PROCESS_ID": (
        "name",
        "nsys report names (the Llama 3.1 NeMo 2 recipe's profile_${PROCESS_ID})",
    ),
}


def apply(environment: Mapping[str, str]) -> tuple[dict[str, object], list[dict], list[str]]:
    """The framework settings the variables in ``environment`` make, one
    record per variable applied, and notes about run-option variables that
    arrived as plain variables (they take effect through their options only)."""
    values: dict[str, object] = {}
    applied: list[dict] = []
    notes: list[str] = []
    for name, value in environment.items():
        setting = FRAMEWORK_SETTINGS.get(name)
        if setting is not None:
            values[setting.key] = setting.parse(name, value)
            applied.append(
                {"variable": name, "value": value, "sets": setting.key, "to": values[setting.key]}
            )
        elif RECIPE_VARIABLES.get(name, ("",))[0] == "run":
            notes.append(
                f"{name} in the run's environment does not change the run; use llmb run "
                f"{RECIPE_VARIABLES[name][1].split(':')[0]} (the variable is read as that option's default)."
            )
    return values, applied, notes
