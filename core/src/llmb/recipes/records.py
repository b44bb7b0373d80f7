"""Typed, frozen records that plugins hand to the core and the core hands back.

Every record that is registered has a unique ``name``; the core indexes them
and refuses duplicates. Nothing here does I/O or imports anything heavy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from llmb.recipes.scale_expr import ScaleExpr

# --------------------------------------------------------------------------
# Hardware


@dataclass(frozen=True, eq=False)  # identity equality: cheaper to define, never compared
class GpuType:
    """A GPU model: how many sit in a node, its memory and its dense peaks."""

    name: str
    gpus_per_node: int
    memory_gb: float | None  # GiB, as nvidia-smi and torch report it
    peak_tflops: Mapping[str, float]  # dtype -> dense peak TFLOP/s
    source: str = ""
    sm: int | None = None  # architecture (SM version): 90 Hopper, 100 and 103 Blackwell
    # The GPU type whose recipes, published figures and peaks this one uses (``runs_recipes_of``: the H200
    # runs the H100's), and why in the user's words; None: its own.
    runs_recipes_of: str | None = None
    why: str = ""

    def peak(self, dtype: str) -> float | None:
        """Dense peak TFLOP/s used for MFU at ``dtype``; None when unknown."""
        return self.peak_tflops.get(dtype)


# --------------------------------------------------------------------------
# Models


@dataclass(frozen=True, eq=False)  # identity equality: cheaper to define, never compared
class ModelArch:
    """One model size's architecture, as its public config describes it.

    ``layer_pattern`` describes hybrid models one character per layer:
    ``M`` Mamba2 mixer, ``*`` attention, ``-`` MLP (Nemotron-H's notation).
    ``moe_layer_step`` k makes every k-th layer (1-based) a MoE layer, as
    Llama 4's ``interleave_moe_layer_step`` does; 0 means no MoE layers.
    """

    size: str
    family: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    query_groups: int
    vocab: int
    head_dim: int
    activation: str  # "swiglu" | "squared_relu" | "swiglu_clamped" (GPT-OSS's clamped SwiGLU)
    norm: str  # "rmsnorm" | "layernorm1p"
    tied_embeddings: bool = False
    experts: int = 0
    topk: int = 0
    moe_ffn: int = 0
    shared_expert_ffn: int = 0
    moe_layer_step: int = 0
    layer_pattern: str | None = None
    mamba_heads: int = 0
    mamba_head_dim: int = 0
    mamba_state: int = 0
    mamba_groups: int = 0
    mamba_expand: int = 0
    mamba_conv_kernel: int = 0
    mamba_chunk: int = 0
    qk_norm: bool = False  # per-head RMSNorm of queries and keys before RoPE (Qwen3)
    # Multi-head latent attention (DeepSeek-V3, Kimi-K2): keys and values pass through one low-rank
    # compression of ``kv_lora_rank`` (nonzero: the attention is MLA), queries through one of
    # ``q_lora_rank`` (0: queries are projected in full); each head's query and key are ``head_dim``
    # wide, of which ``rope_head_dim`` carry the decoupled RoPE; its value is ``v_head_dim`` wide.
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    rope_head_dim: int = 0
    v_head_dim: int = 0
    # DeepSeekMoE: the first ``dense_layers`` layers are dense MLPs of ``ffn`` (first_k_dense_replace);
    # experts' scores are ``router_score`` ("softmax" | "sigmoid") of the router's logits; routing is
    # limited to the best ``topk_groups`` of ``expert_groups`` groups (0: not grouped); the chosen
    # weights are scaled by ``routed_scaling``; ``mtp_layers`` multi-token prediction modules.
    dense_layers: int = 0
    router_score: str = "softmax"
    expert_groups: int = 0
    topk_groups: int = 0
    routed_scaling: float = 1.0
    mtp_layers: int = 0
    # GPT-OSS: every ``full_attention_step``-th layer (1-based) attends to the whole sequence, the others
    # to a window of the last ``sliding_window`` tokens (0: every layer full); ``attention_sinks``: a
    # learned logit per head that takes part in the softmax; ``attention_bias``: the attention's
    # projections have biases; ``expert_bias``: the router and the experts' projections have biases.
    sliding_window: int = 0
    full_attention_step: int = 0
    attention_sinks: bool = False
    attention_bias: bool = False
    expert_bias: bool = False
    # RoPE: its base (rope_theta) and YaRN scaling (``rope_scaling_factor`` > 1, of a model trained at
    # ``rope_original_positions`` tokens); 0 / 1.0: the engine's default base, no scaling.
    rope_base: float = 0.0
    rope_scaling_factor: float = 1.0
    rope_original_positions: int = 0
    # YaRN's ramp (rope_scaling's beta_fast / beta_slow): a pair that turns more than beta_fast times over
    # the original positions keeps its frequency, fewer than beta_slow is interpolated; the defaults are
    # the YaRN paper's and DeepSeek-V3's, Kimi-K2's config.json sets both to 1.
    rope_beta_fast: float = 32.0
    rope_beta_slow: float = 1.0
    published_params: float | None = None
    source: str = ""

    @property
    def gated(self) -> bool:
        return self.activation in ("swiglu", "swiglu_clamped")

    @property
    def moe_layers(self) -> int:
        return self.layer_kinds().count("E")

    def layer_kinds(self) -> str:
        """One character per layer: ``A`` attention+MLP, ``E`` attention+MoE,
        or the hybrid pattern's ``M``/``*``/``-``."""
        if self.layer_pattern is not None:
            return self.layer_pattern
        if not self.moe_layer_step:
            return "A" * self.layers
        return "".join(
            "E" if i >= self.dense_layers and (i + 1) % self.moe_layer_step == 0 else "A"
            for i in range(self.layers)
        )

    def with_experts(self, experts: int) -> ModelArch:
        """The same model with ``experts`` routed experts a MoE layer, top-k unchanged (``--fit``'s cut).

        Group-limited routing (DeepSeek-V3's best 4 of 8 groups) keeps as many groups as still hold the
        top-k among the kept ones, the same share of them kept: the most groups that divide ``experts``
        for which it does, down to one (no grouping)."""
        if experts == self.experts:
            return self
        if self.expert_groups <= 1:
            return replace(self, experts=experts)
        for groups in range(min(self.expert_groups, experts), 0, -1):
            kept = max(1, groups * self.topk_groups // self.expert_groups)
            if experts % groups == 0 and kept * (experts // groups) >= self.topk:
                return replace(self, experts=experts, expert_groups=groups, topk_groups=kept)
        raise ValueError(f"{experts} experts cannot hold top-{self.topk}")

    def with_layers(self, layers: int) -> ModelArch:
        """The same width with ``layers`` layers (the seeds' proxy idea).

        A hybrid pattern is cut to its first ``layers`` characters.
        """
        if layers == self.layers:
            return self
        pattern = self.layer_pattern[:layers] if self.layer_pattern else None
        return replace(self, layers=layers, layer_pattern=pattern)


@dataclass(frozen=True, eq=False)  # identity equality: cheaper to define, never compared
class ModelFlops:
    """Model FLOPs for one sample (one sequence, forward and backward).

    ``terms`` splits ``per_sample`` the way the workload's seed does, so a
    reader can check each line of the seed's worked example.
    """

    per_sample: float
    terms: Mapping[str, float]
    formula: str


# --------------------------------------------------------------------------
# Recipes as the seeds print them


@dataclass(frozen=True, eq=False)  # identity equality: cheaper to define, never compared
class Provenance:
    """Where a record came from: seed file, table (0-based, in file order;
    None for a worked example in the text) and the table's row numbers
    (0-based, after the header)."""

    seed: str  # the recipe document's file (llmb's tests check the data against it)
    table: int | None
    rows: tuple[int, ...]
    title: str = ""  # the document's public name, what users are shown

    @property
    def document(self) -> str:
        return self.title or self.seed

    def describe(self) -> str:
        if self.table is None:
            return f"{self.document} (worked example)"
        rows = ", ".join(str(r + 1) for r in self.rows)
        return (
            f"{self.document} table {self.table + 1}, row{'s' if len(self.rows) > 1 else ''} {rows}"
        )


@dataclass(frozen=True, eq=False)  # identity equality: cheaper to define, never compared
class Erratum:
    """A place where a published recipe document is wrong, and what llmb does instead.

    ``kind`` says how it was found: ``dp-ga`` (the printed DP or GA contradict
    DP = GPUs/(TP*PP*CP), GA = GBS/(MBS*DP)), ``memory`` (the row cannot fit
    in GPU memory as printed), ``figure`` (a printed number is wrong).
    """

    id: str
    document: str  # the public name of the recipe document it corrects
    recipe_says: str  # what the document prints, and why it is wrong
    resolution: str
    source: str = ""
    kind: str = "figure"

    def describe(self) -> str:
        return f"[{self.id}] {self.recipe_says} — llmb uses {self.resolution}"


# identity equality: cheaper to define, never compared
@dataclass(frozen=True, eq=False, kw_only=True)
class RecipeLayout:
    """What a seed table row fixes: the model size and precisions, sequence
    and layers, the parallel layout, the batch, and the options."""

    variant: str
    gpu: str
    scaling: str
    size: str
    dtypes: tuple[str, ...]
    seq_len: int
    layers: int
    fsdp: bool
    cuda_graphs: bool
    tp: int
    pp: int
    cp: int
    ep: int | None
    etp: int | None
    vp: int | None
    mbs: int
    gbs: ScaleExpr
    provenance: Provenance
    recompute_layers: int = 0
    offload_layers: int = 0


@dataclass(frozen=True, eq=False, kw_only=True)
class SeedRow(RecipeLayout):
    """One table row exactly as the seed prints it (before any erratum).

    ``gpus`` is the printed scale: one count, or ``(low, high)`` for a range
    such as ``8-128``. DP and GA keep their printed expressions (0 where the
    table has no such column); llmb only uses them to find seed errata.
    """

    gpus: tuple[int, int]
    dp: ScaleExpr
    ga: ScaleExpr

    @property
    def is_range(self) -> bool:
        return self.gpus[0] != self.gpus[1]


@dataclass(frozen=True, eq=False, kw_only=True)
class RecipeSeries(RecipeLayout):
    """A configuration that the seed tests at one or more GPU counts.

    Rows of a seed table that differ only in their scale (and the GBS that
    follows from it) form one series, one per dtype. ``gbs`` is a multiple of
    the GPU count under weak scaling and a constant under strong scaling.
    """

    min_gpus: int
    max_gpus: int
    listed_gpus: tuple[int, ...]
    is_range: bool
    errata: tuple[Erratum, ...] = ()
    adjustments: tuple[str, ...] = ()  # seed prose or framework presets applied
    # the layout fields (tp, mbs, ...) its errata and adjustments set: the rest are as printed
    amended: frozenset[str] = frozenset()

    def describe_scales(self) -> str:
        if self.is_range:
            return f"{self.min_gpus}-{self.max_gpus}"
        return ",".join(str(g) for g in self.listed_gpus)

    def tests(self, gpus: int) -> bool:
        """Whether the recipe's table tests ``gpus``: one of the counts its rows list, or any count inside a
        range row (``8-128``: the row's layout, weak-scaled, at every count from 8 to 128; a count there must
        also be whole nodes and give a possible layout, which resolution checks). A count between two
        listed rows (192 between 128 and 256) is not tested."""
        if self.is_range:
            return self.min_gpus <= gpus <= self.max_gpus
        return gpus in self.listed_gpus


@dataclass(frozen=True, eq=False)  # identity equality: cheaper to define, never compared
class ProductionRule:
    """A setting the production launcher applies to some recipes only, e.g.
    MXFP8 instead of FP8 current scaling for Llama 3.1 70b on B200 from 128
    GPUs. ``match`` maps ``size``/``gpu``/``dtype``/``scaling`` to the values
    it accepts; ``min_gpus`` is the smallest GPU count it applies to."""

    match: Mapping[str, tuple[str, ...]]
    why: str
    min_gpus: int = 0
    # the framework's mixed-precision preset to use instead of its default
    precision: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)  # production environment variables to add
    max_gpus: int = 0  # the largest GPU count it applies to (0: no limit)
    # framework configuration fields the launcher sets on these recipes only (DeepSeek-V3's
    # recompute modules), as llmb.engines.frameworks.overrides paths and plain JSON values
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def applies(self, size: str, gpu: str, dtype: str, scaling: str, gpus: int) -> bool:
        have = {"size": size, "gpu": gpu, "dtype": dtype, "scaling": scaling}
        return (
            gpus >= self.min_gpus
            and (not self.max_gpus or gpus <= self.max_gpus)
            and all(have[key] in values for key, values in self.match.items())
        )


@dataclass(frozen=True, eq=False)  # identity equality: cheaper to define, never compared
class HuggingFaceFiles:
    """What ``llmb install`` downloads from Hugging Face for a variant: the
    repository of each size and which of its files (``config``, ``tokenizer``)."""

    repos: Mapping[str, str]  # size -> repository id, e.g. 8b -> meta-llama/Meta-Llama-3-8B
    assets: tuple[str, ...]
    gated: bool  # the repositories need an access token (HF_TOKEN)


# the steps the seeds profile, [first, last]: a variant's default, and a run's
PROFILE_WINDOW = (45, 50)


@dataclass(frozen=True, eq=False)  # identity equality: cheaper to define, never compared
class Production:
    """How the variant's production framework is driven (``llmb.engines.frameworks``):
    the framework's recipe per size, the seed's profiling defaults, the
    launcher's per-recipe rules and the Hugging Face files it needs."""

    recipes: Mapping[str, str]  # size -> the framework's recipe name, e.g. 8b -> llama3_8b
    # the seed's default profiled steps (PROFILE_WINDOW unless it says)
    profile_window: tuple[int, int]
    # ranks [first, last) the seed profiles; None: every rank
    profile_ranks: tuple[int, int] | None = None
    # NeMo 2: the model name its FLOPs callback knows (TFLOPS_per_GPU)
    flops_callback: str | None = None
    rules: tuple[ProductionRule, ...] = ()
    huggingface: HuggingFaceFiles | None = None


@dataclass(frozen=True, eq=False)  # identity equality: cheaper to define, never compared
class UpstreamRecipe:
    """Which public recipe a variant's document is (the collection's release, the file at that commit),
    and the collection's current release where its recipe is another one."""

    repository: str  # NVIDIA/dgxc-benchmarking
    release: str  # the release tag whose file the document is, e.g. v25.12.01
    commit: str  # that tag's commit
    path: str  # the recipe README in it, e.g. llama3.1/README.md
    current_release: str = ""  # the collection's current release, where its recipe differs
    # the container the current release's recipe runs (empty: that release has no such recipe)
    current_container: str = ""
    # how the current release's recipe differs, e.g. "prints other layouts"
    current_differs: str = ""

    def follows(self, container: str) -> str:
        """One line: the recipe llmb follows and why, and the current release's where it differs."""
        text = f"the {self.release} recipe ({_image_name(container)}), whose tables these are"
        if self.current_release and self.current_release != self.release:
            text += (
                f"; the current release's recipe ({self.current_release}, "
                f"{_image_name(self.current_container)}) {self.current_differs}"
                if self.current_container
                else f"; the current release ({self.current_release}) {self.current_differs}"
            )
        return text

    def as_dict(self, container: str) -> dict[str, str]:
        return {
            "repository": self.repository,
            "release": self.release,
            "commit": self.commit,
            "path": self.path,
            "container": container,
            "current_release": self.current_release,
            "current_container": self.current_container,
            "current_differs": self.current_differs,
            "text": self.follows(container),
        }


@dataclass(frozen=True, eq=False)  # identity equality: cheaper to define, never compared
class Deprecation:
    """A workload its publisher's collection no longer runs (``deprecated:`` in workload.yaml): kept,
    listed and runnable here, and marked so in ``llmb list`` and in a plan's and a run's warnings."""

    by: str  # who deprecated it, e.g. "NVIDIA's LLM Benchmarking Collection (NVIDIA/exemplar-performance)"
    release: str  # the release that lists it as deprecated, e.g. v26.08.00
    document: str  # where that release says so, e.g. "README.md, Deprecated table"
    last_release: str = ""  # the last release that shipped its recipe, where the document says
    commit: str = ""  # the commit of ``document`` read

    def describe(self) -> str:
        """One line, e.g. ``deprecated by X in its release v26.08.00 (README.md, Deprecated table; last
        shipped in 25.08)``."""
        where = self.document + (
            f"; last shipped in {self.last_release}" if self.last_release else ""
        )
        return f"deprecated by {self.by} in its release {self.release} ({where})"

    def as_dict(self) -> dict[str, str]:
        return {
            "by": self.by,
            "release": self.release,
            "document": self.document,
            "last_release": self.last_release,
            "commit": self.commit,
            "text": self.describe(),
        }


def _image_name(image: str) -> str:
    """``nvcr.io#nvidia/nemo:25.11.01`` -> ``nemo:25.11.01``."""
    return image.replace("#", "/").rsplit("/", 1)[-1]


@dataclass(frozen=True, eq=False)  # identity equality: cheaper to define, never compared
class Variant:
    """One recipe family of a workload (Llama 3.1 has two: Megatron-Bridge
    and NeMo 2), with the production framework that runs it."""

    name: str
    framework: str  # "megatron_bridge" | "nemo2"
    seed: str
    # The container image its recipes run in: the default image of a run, the one its document's tables were
    # measured with. ``containers_by_gpu`` names another for a GPU type where the recipe runs another there
    # (Nemotron-4 340B: nemo:25.07.01 on GB200 and B200); ``container_for`` picks.
    container: str
    window: tuple[int, int]
    description: str
    defaults: Mapping[str, str]
    series: tuple[RecipeSeries, ...]
    seed_rows: tuple[SeedRow, ...]
    errata: tuple[Erratum, ...]
    log_tflops_valid: bool = True  # False: the framework logs no usable TFLOPS (compute them)
    # how the seed computes MFU: "formula" (GBS*FLOPs/step/GPUs) or "log" (logged TFLOPS)
    mfu_from: str = "formula"
    production: Production | None = None  # None: the torch engine only
    # the public recipe its document is, and the collection's current one (None: not recorded)
    upstream: UpstreamRecipe | None = None
    # GPU type -> the container its recipes run in there, where not ``container`` (``containers_by_gpu:``)
    containers_by_gpu: Mapping[str, str] = field(default_factory=dict)

    def container_for(self, gpu: str | None) -> str:
        """The container image this variant's recipe runs in on ``gpu``: the GPU type's own where the recipe
        names one, else ``container`` (also for ``None``, no GPU type known)."""
        return self.containers_by_gpu.get(gpu, self.container) if gpu else self.container

    def containers(self, gpu: str | None = None) -> tuple[str, ...]:
        """Every container image the variant's recipes on ``gpu`` run in (on any GPU type its tables have
        when None), each once, in table order; empty where the variant names none."""
        gpus = dict.fromkeys(s.gpu for s in self.series if gpu is None or s.gpu == gpu)
        return tuple(c for c in dict.fromkeys(map(self.container_for, gpus)) if c)


# What a run's log can say it failed of (``llmb.results`` finds them), causes first (``cancelled``: Slurm
# cancelled the job or step and names no cause), then what a launcher says of the worker that failed first
# (``worker_failed``: torchrun's root cause, ``llmb.results.records.LAUNCHER_CAUSES``), then the symptoms
# that follow another failure (``llmb.results.records.SYMPTOMS``). A failure hint names one.
FAILURE_KINDS = (
    "node_failure",
    "cuda_oom",
    "cuda_error",
    "nan_loss_or_grad",
    "nccl_timeout",
    "python_exception",
    "killed",
    "time_limit",
    "preempted",
    "cancelled",
    "worker_failed",
    "task_exit",
    "child_failed",
    "signal",
)


@dataclass(frozen=True, eq=False)  # identity equality: cheaper to define, never compared
class FailureHint:
    """Advice a seed gives for a failure, e.g. Nemotron-4 on GB200:
    NCCL watchdog timeouts -> run with TP_COMM_OVERLAP=False."""

    failure: str  # one of FAILURE_KINDS: cuda_oom, nccl_timeout, ...
    hint: str
    gpu: str | None = None
    source: str = ""


@dataclass(frozen=True, eq=False)  # identity equality: cheaper to define, never compared
class ReferenceResult:
    """One published performance figure set from a seed's tables."""

    variant: str
    size: str
    gpu: str
    dtype: str
    gpus: int
    step_time_s: float
    tokens_per_s: float | None
    mfu_pct: float | None
    days_1t: float | None
    provenance: Provenance
    tflops_per_gpu: float | None = None
    scaling: str = "weak"
    note: str = ""
    erratum: str | None = None  # id of a workload note that explains a printed figure
    # set when mfu_pct is llmb's correction of the printed figure (the erratum)
    printed_mfu_pct: float | None = None
    # set when tflops_per_gpu is llmb's correction of the printed figure (the erratum)
    printed_tflops_per_gpu: float | None = None
    # the global batch the figure was measured with, where its document prints it
    gbs: int | None = None
    container: str | None = None  # the container it was measured with, where not the variant's
    date: str | None = None  # when its document published it, where it says

    def mfu_label(self) -> str:
        """The MFU as users see it: a corrected figure is marked, with the printed one beside it."""
        if self.mfu_pct is None:
            return "-"
        if self.printed_mfu_pct is None:
            return f"{self.mfu_pct:g}%"
        return f"{self.mfu_pct:g}% (corrected, erratum [{self.erratum}]; printed {self.printed_mfu_pct:g}%)"


@dataclass(frozen=True, eq=False)  # identity equality: cheaper to define, never compared
class Workload:
    """A registered benchmark workload: its recipes, models and references."""

    name: str
    description: str
    variants: tuple[Variant, ...]
    architectures: Mapping[str, ModelArch]
    references: tuple[ReferenceResult, ...] = ()
    notes: tuple[Erratum, ...] = ()  # errata outside the recipe tables
    experiment_prefixes: tuple[str, ...] = ()  # experiment names the seeds' launchers give its runs
    failure_hints: tuple[FailureHint, ...] = ()
    # recipe document file -> public title
    documents: Mapping[str, str] = field(default_factory=dict)
    # Figures of the framework's per-release performance summary (``--reference summary``), not a recipe's.
    summary: tuple[ReferenceResult, ...] = ()
    # Figures of the framework's model verification cards (``--reference card``): one verified run each.
    cards: tuple[ReferenceResult, ...] = ()
    # Other names users know it by, lower case: NVIDIA's llmb-run workload names (pretrain_llama3.1)
    # and the collection's model names (llama3.1). ``llmb run``, ``plan``, ``list`` and sweep files take them.
    aliases: tuple[str, ...] = ()
    # Deprecated by its publisher's collection (kept and runnable here); None: current.
    deprecated: Deprecation | None = None

    def cite(self, seed: str, part: str = "") -> str:
        """A recipe document as users are shown it, e.g. ``cite("llama31-nemo2.md", "Notes")``."""
        title = self.documents.get(seed, seed)
        return f"{title}, {part}" if part else title

    @property
    def default_variant(self) -> Variant:
        return self.variants[0]

    def variant(self, name: str | None) -> Variant | None:
        if name is None:
            return self.default_variant
        wanted = name.lower().replace("_", "-")
        return next((v for v in self.variants if v.name == wanted), None)

    def sizes(self) -> list[str]:
        seen: dict[str, None] = {}
        for v in self.variants:
            for s in v.series:
                seen.setdefault(s.size, None)
        return list(seen)

    def architecture(self, size: str) -> ModelArch:
        return self.architectures[size]

    def published(
        self,
        variant: str | None,
        size: str | None,
        gpu: str | None,
        dtype: str | None,
        scaling: str,
        gpus: int | None = None,
    ) -> tuple[ReferenceResult, ...]:
        """The published figures for one configuration: at ``gpus`` GPUs, or at
        every GPU count the seed published (ordered by GPU count, the seed's
        first row winning where a count appears twice)."""
        by_gpus: dict[int, ReferenceResult] = {}
        for ref in self.references:
            if (ref.variant, ref.size, ref.gpu, ref.dtype, ref.scaling) == (
                variant,
                size,
                gpu,
                dtype,
                scaling,
            ) and (gpus is None or ref.gpus == gpus):
                by_gpus.setdefault(ref.gpus, ref)
        return tuple(by_gpus[n] for n in sorted(by_gpus))


# --------------------------------------------------------------------------
# Resolved runs


@dataclass(frozen=True, eq=False)  # identity equality: cheaper to define, never compared
class RecipeRequest:
    """What the user asked for, before validation. ``None`` means "default"."""

    workload: str
    size: str | None
    gpu: str | None
    dtype: str | None
    gpus: int | None
    variant: str | None = None
    strong_scaling: bool = False
    gpus_per_node: int | None = None
    overrides: Mapping[str, object] = field(default_factory=dict)
    # Proxies: when ``gpus`` is not a scale the seed accepts, take the recipe at
    # its smallest tested scale (the proxy itself runs on ``gpus`` ranks).
    any_scale: bool = False


# A resolved recipe's GPU count (``Recipe.scale_status``): one the recipe's table tests, one between tested
# counts, one above the largest tested count.
TESTED, NOT_TESTED, NOT_VALIDATED = "tested", "not tested", "not validated"


@dataclass(frozen=True, eq=False)  # identity equality: cheaper to define, never compared
class Recipe:
    """A resolved, validated run: every size derived, every choice traced."""

    workload: str
    variant: str
    framework: str
    size: str
    gpu: str
    dtype: str
    gpus: int
    nodes: int
    gpus_per_node: int
    tp: int
    pp: int
    cp: int
    ep: int | None
    etp: int | None
    vp: int | None
    dp: int
    mbs: int
    gbs: int
    ga: int
    fsdp: bool
    cuda_graphs: bool
    seq_len: int
    layers: int
    scaling: str
    # the GPU count is one the recipe's table tests (``RecipeSeries.tests``): a listed count, or one
    # inside a range row; a count resolution accepts between or above the tested ones is not
    validated: bool
    steps: int = 50
    recompute_layers: int = 0
    offload_layers: int = 0
    env: tuple[tuple[str, str], ...] = ()
    warnings: tuple[str, ...] = ()
    errata: tuple[Erratum, ...] = ()
    adjustments: tuple[str, ...] = ()
    overrides: tuple[tuple[str, object], ...] = ()
    provenance: Provenance | None = None
    gbs_rule: str = ""
    # where not validated, why: NOT_TESTED (between the counts the table tests) or NOT_VALIDATED (above
    # the largest); empty at a tested count
    untested: str = ""

    @property
    def scale_status(self) -> str:
        """``tested`` at a count the recipe's table tests, else ``not tested`` (between tested counts) or
        ``not validated`` (above the largest): what plan prints and its JSON's ``scale_status`` says."""
        if self.validated:
            return TESTED
        return self.untested or NOT_VALIDATED

    def with_env(self, **env: str) -> Recipe:
        """A copy with ``env`` added (later values win). For site plugins."""
        merged = dict(self.env)
        merged.update({k: str(v) for k, v in env.items()})
        return replace(self, env=tuple(sorted(merged.items())))

    def with_warning(self, text: str) -> Recipe:
        return replace(self, warnings=self.warnings + (text,))


def as_fraction(value: int | Fraction) -> Fraction:
    return value if isinstance(value, Fraction) else Fraction(value)


class WorkloadIndex(dict):
    """The registered workloads by name (``PluginHost.workloads``), each with the aliases it was given,
    and ``unresolved``: the names that some workload claimed but none was given (an alias two claim),
    each with what to tell whoever types it (``llmb.plugins.names``)."""

    def __init__(self, workloads=(), unresolved: Mapping[str, str] | None = None):
        super().__init__(workloads)
        self.unresolved: dict[str, str] = dict(unresolved or {})


def workload_named(workloads: Mapping[str, Workload], name: str) -> Workload | None:
    """The workload ``name`` names, by its own name or one of its aliases (any case); None when none
    does, or when two workloads claim the alias (neither is guessed). A name the host's index holds
    as unresolved (``WorkloadIndex``: claimed by two workloads) raises ``UsageError`` saying so."""
    key = name.strip().lower()
    if key in workloads:
        return workloads[key]
    claimed = [w for w in workloads.values() if key in w.aliases]
    if len(claimed) == 1:
        return claimed[0]
    unresolved = getattr(workloads, "unresolved", None) or {}
    if key in unresolved:
        from llmb.errors import UsageError

        raise UsageError(f"{unresolved[key]}.")
    return None
