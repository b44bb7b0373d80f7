"""What a run is: the seed's recipe, and what the worker actually runs.

``RunSpec`` is the worker's whole input (written as ``run.json`` in the job
directory). At full size the torch engine runs the recipe's own layout
(``recipe_layout``: TP, PP, VP, EP, FSDP, sequence parallel, recompute; DP
derived) and batch. A proxy (``--proxy tiny``, ``--layers N``) runs data
parallel only over the ranks asked for, keeping the recipe's micro-batch size
and gradient accumulation, so its global batch is ``MBS * GA * ranks``
(``engine_layout``); it takes the recipe at the seed's smallest tested scale
of the chosen configuration when the requested GPU count is not one the seed
tests.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields, replace

from llmb.errors import UsageError
from llmb.recipes.fit import Fit
from llmb.recipes.records import ModelArch, Recipe, Workload
from llmb.runs.capability import Machine
from llmb.runs.checkpoint_metadata import check_metadata

# The torch engine (embedded) and the production frameworks (inside NVIDIA's container).
ENGINES = ("torch", "megatron_bridge", "nemo2", "preflight")  # preflight: llmb.preflight.worker
# Transformer Engine's block-scaled formats: the torch engine runs them through Transformer Engine's layers
# where it is installed and the GPU supports them, else in bfloat16 with a warning; fp8 runs as torchao float8
# on GPUs with float8 matrix products (llmb.engines.torch.parallel.float8 decides in the job).
BLOCK_SCALED = ("nvfp4", "mxfp8", "fp8_mx")
NCCL_TRACE_STEPS = 5
# Never written into a job's files: they travel in the submission environment only.
# the seeds trace only the first five steps: the logs grow past a gigabyte
SECRET_VARIABLES = ("HF_TOKEN",)


@dataclass(frozen=True)
class SubmitOptions:
    """How a cluster backend submits (``llmb run``'s cluster flags). Each
    backend reads what applies to it and says what it ignores."""

    account: str | None = None
    partition: str | None = None
    time_limit: str | None = None  # Slurm's forms: minutes, MM:SS, HH:MM:SS, D-HH:MM
    retries: int = 0  # fresh resubmissions after infrastructure failures
    requeue: bool = False  # let the scheduler requeue in place (off: benchmark jobs cannot resume)
    image: str | None = None  # container image, registry#repo:tag or a .sqsh file
    mounts: tuple[str, ...] = ()  # SRC:DST[:ro]
    bare: bool = False  # run the worker from the nodes' Python environment, without a container
    secrets: tuple[str, ...] = ()  # variables passed only through the submission environment
    # extra scheduler parameters in the seeds' ADDITIONAL_SLURM_PARAMS form
    additional: str | None = None
    extra: tuple[tuple[str, str], ...] = ()  # --backend-opt KEY=VALUE: a backend's own settings
    # Dedicated Slurm options (flags > environment > $LLMB_INSTALL/cluster.yaml); None: not given.
    nodelist: str | None = None
    exclude: str | None = None  # nodes never to use (retries add the failed ones)
    reservation: str | None = None
    qos: str | None = None
    constraint: str | None = None
    segment: int | None = None  # None: llmb's rule on 4-GPU-node systems
    gres: str | None = None  # "gpu:N" / "none" / None: detected from the cluster (sinfo %G)
    numa_binding: bool = True  # each rank under numactl on its GPU's socket
    # the cluster's, when it differs from the GPU type's usual count
    gpus_per_node: int | None = None
    cluster_env: tuple[tuple[str, str], ...] = ()  # the cluster file's extra environment

    def given(self) -> list[str]:
        """The options set away from their defaults, by flag name."""
        defaults = SubmitOptions()
        return [
            f"--{f.name.replace('_', '-')}"
            for f in fields(self)
            if getattr(self, f.name) != getattr(defaults, f.name) and f.name != "secrets"
        ]


@dataclass(frozen=True)
class RunOptions:
    """How to run, beyond the recipe (``llmb run``'s flags)."""

    proxy: str | None = None
    layers: int | None = None
    # --fit: the largest slice of the model each GPU holds (``llmb.recipes.fit``); ``fitted`` is that slice
    # once ``llmb.lifecycle.prepare`` has chosen it for the run's GPU type and batch
    fit: bool = False
    fitted: Fit | None = None
    # refuse, before submitting, a torch-engine GPU run whose memory estimate exceeds the GPU's memory
    memory_check: bool = True
    # refuse, before submitting, a run whose steps end before the statistics window (a smoke test: off)
    window_check: bool = True
    steps: int | None = None
    seed: int = 1234
    # torch.compile per block; None: the torch engine's default (on GPU only)
    compile: bool | None = None
    profile: bool = False
    gpu_metrics: bool = False
    nccl_trace: bool = False
    profile_window: tuple[int, int] | None = None  # steps asked for; None: the workload's default
    checkpoint_save: bool = False
    checkpoint_dir: str | None = None
    checkpoint_load: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    engine: str | None = None  # torch | production; None: torch for proxies and on this machine
    # write the run's effective environment (secrets redacted) beside its log
    dump_env: bool = False
    # --framework-arg PATH=VALUE: fields of the production framework's configuration, checked against
    # llmb.engines.frameworks.fields at submission; a run with any is tuned
    framework_args: tuple[str, ...] = ()
    submit: SubmitOptions = field(default_factory=SubmitOptions)
    # --exclude-from PREFLIGHT.json: the preflight file whose flagged nodes were added to submit.exclude
    # (llmb.preflight.exclusion.read); recorded in recipe.json and provenance.json
    preflight: dict | None = None

    @property
    def is_proxy(self) -> bool:
        return self.proxy is not None or self.layers is not None or self.fit

    @property
    def proxy_label(self) -> str | None:
        if self.proxy:
            return self.proxy
        if self.fitted is not None:
            return self.fitted.label
        if self.fit:
            return "fit"
        return f"layers{self.layers}" if self.layers else None


@dataclass(frozen=True)
class ParallelLayout:
    """The parallel layout the torch engine applies (``llmb.engines.torch.parallel``).

    The recipe's TP, PP, CP, EP and VP sizes, whether parameters are sharded
    (FSDP), whether TP also splits the sequence between its matmuls (sequence
    parallel), and how many decoder layers recompute their activations in
    the backward pass. The default is data parallel only. DP is derived:
    ``ranks / (TP * PP * CP)``.
    """

    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    vp: int | None = None
    fsdp: bool = False
    sequence_parallel: bool = False
    recompute_layers: int = 0

    def model_parallel(self) -> int:
        """Ranks that hold one copy of the model between them: TP * PP * CP."""
        return self.tp * self.pp * self.cp

    def dp(self, ranks: int) -> int:
        """Data-parallel replicas over ``ranks``; ValueError when they do not divide."""
        if ranks % self.model_parallel():
            raise ValueError(
                f"{ranks} ranks do not divide into TP {self.tp} x PP {self.pp} x CP {self.cp}"
            )
        return ranks // self.model_parallel()


@dataclass(frozen=True)
class RunSpec:
    """Everything a worker needs; JSON-serialisable."""

    job_id: str
    workload: str
    variant: str
    framework: str
    engine: str
    size: str
    arch: dict
    proxy: str | None
    gpu: str
    dtype: str  # the recipe's precision
    compute_dtype: str  # what the engine computes in: float32 | bfloat16
    # cpu | cuda | auto (the torch engine on a cluster: the nodes' GPUs if it finds any)
    device: str
    ranks: int
    mbs: int
    ga: int
    gbs: int
    seq_len: int
    steps: int
    seed: int
    compile: bool | None  # None: on GPU, off on CPU (decided where the job runs)
    flops_per_sample: float
    experiment: str
    run_dir: str
    inner_dir: str
    log: str
    checkpoint_save_dir: str | None = None
    checkpoint_load_dir: str | None = None
    checkpoint_format: str = "megatron"  # megatron | nemo: which log lines the timings use
    profile: dict | None = None  # {"kind": "nsys"|"torch", "start": 45, "stop": 50, "dir": ...}
    env: dict = field(default_factory=dict)
    wrapper: tuple[str, ...] = ()  # argv prefix for every rank (e.g. nsys)
    # The production framework's configuration (``llmb.engines.frameworks``), when ``engine`` is one.
    framework_config: dict | None = None
    nodes: int = 1
    ranks_per_node: int | None = None  # None: all ranks on one node
    # the torch engine's; default: DP only
    layout: ParallelLayout = field(default_factory=ParallelLayout)
    preflight: dict | None = None  # engine "preflight": its sizes (llmb.preflight.worker.DEFAULTS)
    # The container image the recipe names (the workload's variant): a cluster backend runs it unless
    # --image (or the production framework's configuration) names another.
    container: str | None = None

    def relocated(self, old_root: str, new_root: str) -> RunSpec:
        """This spec with every path under ``old_root`` moved under ``new_root`` (a retry's fresh
        run directory; the install directory as a cluster's pods see it)."""

        def move(value):
            if isinstance(value, str) and (
                value == old_root or value.startswith(old_root + os.sep)
            ):
                return new_root + value[len(old_root) :]
            if isinstance(value, dict):
                return {k: move(v) for k, v in value.items()}
            if isinstance(value, list | tuple):
                return type(value)(move(v) for v in value)
            return value

        return RunSpec.from_dict(move(self.to_dict()))

    def model_arch(self) -> ModelArch:
        return ModelArch(**self.arch)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> RunSpec:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["wrapper"] = tuple(values.get("wrapper", ()))
        if isinstance(values.get("layout"), dict):
            values["layout"] = ParallelLayout(**values["layout"])
        return cls(**values)


def engine_layout(recipe: Recipe, ranks: int) -> tuple[int, int, int]:
    """(MBS, GA, GBS) of the torch engine running a proxy: the recipe's MBS and GA, data parallel over ``ranks``."""
    return recipe.mbs, recipe.ga, recipe.mbs * recipe.ga * ranks


def recipe_layout(recipe: Recipe) -> ParallelLayout:
    """The recipe row's own parallel layout. Sequence parallel is on whenever TP is above 1, as the
    production frameworks configure these recipes."""
    return ParallelLayout(
        tp=recipe.tp,
        pp=recipe.pp,
        cp=recipe.cp,
        ep=recipe.ep or 1,
        vp=recipe.vp,
        fsdp=recipe.fsdp,
        sequence_parallel=recipe.tp > 1,
        recompute_layers=recipe.recompute_layers,
    )


def torch_engine_layout(recipe: Recipe, ranks: int) -> tuple[ParallelLayout, int, list[str]]:
    """(layout, GA, warnings) of the torch engine running ``recipe`` at full size over ``ranks``.

    The recipe's own layout and global batch, except context parallelism, which the torch engine does
    not apply (``llmb.engines.torch.parallel``): its CP ranks become data-parallel ranks, each holding whole
    sequences, and GA shrinks so that the global batch stays the recipe's. UsageError when the global
    batch does not split that way."""
    layout = recipe_layout(recipe)
    warnings = []
    if (recipe.etp or 1) > 1 and layout.ep > 1:
        warnings.append(
            f"the torch engine has no expert tensor parallelism: the recipe's ETP {recipe.etp} runs "
            f"each expert whole on every TP rank (the experts are still spread over EP {layout.ep})."
        )
    if layout.cp == 1:
        return layout, recipe.ga, warnings
    folded = replace(layout, cp=1)
    dp = ranks // folded.model_parallel()
    if recipe.gbs % (recipe.mbs * dp):
        raise UsageError(
            f"the torch engine runs {recipe.workload} {recipe.size}'s CP {layout.cp} as data "
            f"parallelism (it has no context parallelism), but GBS {recipe.gbs} does not split into "
            f"MBS {recipe.mbs} x DP {dp}; use the production engine for this row."
        )
    ga = recipe.gbs // (recipe.mbs * dp)
    return (
        folded,
        ga,
        [
            *warnings,
            f"the torch engine has no context parallelism: the recipe's CP {layout.cp} runs as data parallelism "
            f"(DP {dp}, GA {ga}, the same GBS {recipe.gbs}); each GPU holds whole sequences of {recipe.seq_len} "
            f"tokens.",
        ],
    )


def check_machine(
    recipe: Recipe, options: RunOptions, machine: Machine, ranks: int
) -> tuple[str, list[str]]:
    """The device to run on, and warnings; UsageError when this machine cannot run it."""
    warnings: list[str] = []
    if not options.is_proxy:
        if machine.gpus == 0:
            raise UsageError(
                f"{recipe.workload} {recipe.size} at full size needs {ranks} GPUs and this machine has none. "
                f"Run a proxy here (add --proxy tiny, a CPU-sized model with the same structure, or "
                f"--layers N), or submit to a cluster backend (--backend slurm)."
            )
        if ranks > machine.gpus:
            raise UsageError(
                f"--gpus {ranks} but this machine has {machine.gpus} GPU{'s' if machine.gpus != 1 else ''}; "
                f"use --gpus {machine.gpus} or fewer, a proxy (--proxy tiny, --layers N), or a cluster backend."
            )
        return "cuda", warnings
    if machine.gpus >= ranks:
        device = "cuda"
    else:
        device = "cpu"
        limit = 2 * machine.cpus
        if ranks > limit:
            raise UsageError(
                f"a CPU proxy runs one process per requested GPU; --gpus {ranks} is more than this machine's "
                f"{machine.cpus} cores can carry (at most {limit}). Use --gpus {min(2, limit)}, or a cluster backend."
            )
    return device, warnings


def compute_dtype(device: str, requested: str) -> tuple[str, list[str]]:
    """The torch engine's high precision: bf16 autocast on GPU, float32 on CPU; a warning when the recipe
    asked for a precision that will not run. An fp8 recipe runs as torchao float8 on GPUs of SM 8.9 or
    newer (the job decides and records ``compute_precision``); nvfp4 and mxfp8 compute in the high
    precision. ``auto``: decided where the job runs (recorded in ``recipe.json`` then)."""
    gpu_path = (
        f"through Transformer Engine's {requested} layers where it is installed and the GPUs support "
        f"{requested}"
        if requested in BLOCK_SCALED
        else "as torchao float8 on GPUs of SM 8.9 or newer"
    )
    if device == "auto":
        warnings = []
        if requested != "bf16":
            warnings.append(
                f"the recipe's {requested} runs {gpu_path}, else in bfloat16 (float32 on CPU nodes); "
                f"what ran is recorded with the run."
            )
        return "auto", warnings
    actual = "bfloat16" if device == "cuda" else "float32"
    warnings = []
    if device == "cpu":
        warnings.append(
            f"the recipe's {requested} is computed in {actual} by the torch engine on {device} "
            f"(both are recorded with the run)."
        )
    elif requested != "bf16":
        warnings.append(
            f"the recipe's {requested} runs {gpu_path}, else in bfloat16; what ran is recorded with "
            f"the run."
        )
    return actual, warnings


def proxy_arch(workload: Workload, recipe: Recipe, options: RunOptions) -> tuple[ModelArch, int]:
    """The model to build and its sequence length."""
    from llmb.recipes.proxies import PROXIES, reduction_conflict, shrink

    arch = workload.architecture(recipe.size).with_layers(recipe.layers)
    # the words the shared options' check gives (llmb.cli.run_options): here for a sweep file's section
    if problem := reduction_conflict(options.proxy, options.layers, options.fit):
        raise UsageError(problem)
    if options.fitted is not None:
        fitted = options.fitted.arch
        return replace(fitted, size=f"{arch.size}-{options.fitted.label}"), recipe.seq_len
    if options.layers is not None:
        if not 1 <= options.layers <= arch.layers:
            raise UsageError(
                f"--layers {options.layers}: the {recipe.size} model has {arch.layers} layers; "
                f"use 1 to {arch.layers}."
            )
        return replace(
            arch.with_layers(options.layers), size=f"{arch.size}-layers{options.layers}"
        ), recipe.seq_len
    if options.proxy:
        return shrink(arch, options.proxy), PROXIES[options.proxy].seq_len
    return arch, recipe.seq_len


def checkpoint_dirs(
    options: RunOptions, framework: str, inner_dir: str, steps: int, gbs: int
) -> tuple[str | None, str]:
    """Where ``--checkpoint-save`` writes, in the seeds' layout (or under CHECKPOINT_DIR)."""
    fmt = "megatron" if framework == "megatron_bridge" else "nemo"
    if not options.checkpoint_save:
        return None, fmt
    base = options.checkpoint_dir or os.path.join(
        inner_dir, "code", "nemo_experiments", "default", "checkpoints"
    )
    if fmt == "megatron":
        return os.path.join(base, f"iter_{steps:07d}"), fmt
    samples = float(steps * gbs)
    return os.path.join(
        base, f"default--None=0.0000-epoch=0-consumed_samples={samples}", "weights"
    ), fmt


def find_checkpoint(path: str) -> str:
    """The directory holding ``.distcp`` files: ``path`` itself, or its ``weights/``
    (the NeMo seeds point LOAD_CHECKPOINT_PATH at the parent of weights/)."""
    for candidate in (path, os.path.join(path, "weights")):
        if os.path.isdir(candidate) and any(
            name.endswith(".distcp") for name in os.listdir(candidate)
        ):
            check_metadata(candidate)
            return os.path.abspath(candidate)
    raise UsageError(
        f"--checkpoint-load {path}: no .distcp files there or in its weights/ directory."
    )
