"""The published figures of one configuration, from every public document that has one.

A workload's figures come from several documents; a *source* names one:

``auto``     the policy every command judges by (the default): the configuration's own
             recipe's figure; else the first other public document's figure for exactly
             that configuration (the same GPU count and global batch size);
``recipe``   the recipe document of the configuration's own variant, strictly;
``VARIANT``  another variant's recipe document for the same model size, GPU type,
             precision, GPU count and scaling (Llama 3.1: ``nemo2`` for a
             Megatron-Bridge configuration, whose own document publishes only one example);
``summary``  the framework's per-release performance summary (Megatron-Bridge's, for
             Llama 3.1): tokens/s and TFLOP/s per GPU by GPU type and precision.
``card``     the framework's model verification card (Megatron-Bridge's, for DeepSeek-V3,
             GPT-OSS 120B, Qwen3): one verified run's last ten steps (step time, TFLOP/s and
             tokens/s per GPU), its command, commit and container (``llmb.recipes.card_file``).

Every figure names its document, the container release it was measured with
and, where the document dates it, the date; a figure measured with an older
container than the run's is marked, and so is one measured at another global
batch size than the configuration's (``Figure.batch_note``): such a figure is
never compared by step time nor taken for a time limit. Where a source has no
figure, ``find`` says so in the user's words and names a document that has one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from llmb.recipes.gpus import recipes_of
from llmb.recipes.metrics import days_to_train, tokens_per_second
from llmb.recipes.records import RecipeSeries, ReferenceResult, Workload

AUTO = (
    "auto"  # the one reference policy: the own recipe's figure, else another document's exact one
)
DEFAULT_SOURCE = (
    "recipe"  # the configuration's own recipe document (``--reference recipe``: strictly)
)
SUMMARY = "summary"
CARD = "card"
_RELEASE = re.compile(r"nemo:(\d{2})\.(\d{2})(?:\.(\d+))?")


@dataclass(frozen=True)
class Configuration:
    """What a figure is looked up by."""

    variant: str | None  # None: the workload's default variant
    size: str
    gpu: str
    dtype: str
    gpus: int
    scaling: str = "weak"
    container: str | None = None  # the container release the run used, where known
    gbs: int | None = None  # the run's global batch size (None: the own recipe's at ``gpus``)
    seq_len: int | None = None  # the run's sequence length (None: the own recipe's)
    layers: int | None = None  # the layers the run trained (None: the model's)


@dataclass(frozen=True)
class Figure:
    """One published figure set to compare a run with."""

    source: str  # the source name it answers: recipe | a variant | summary
    label: str  # how verdicts name it: "published", "the nemo2 recipe's figure", ...
    document: str  # the document, table and row, as users are shown them
    gpus: int
    step_time_ms: float | None
    tokens_per_s: float | None  # the whole job's
    tflops_per_gpu: float | None
    gbs: int | None
    container: str | None  # the container release it was measured with (``25.04.01``)
    date: str | None = None
    # the run's newer container release, when the figure's is older
    older_than_run: str | None = None
    # the run's older container release, when the figure's is newer (a run in nemo:26.06.01 against a 26.08
    # figure): shown with both, and never judged by TFLOP/s (``llmb.results.compare.judge_published``)
    newer_than_run: str | None = None
    mfu_pct: float | None = None  # the MFU the document publishes with it (recipes), where it does
    # the configuration's global batch size, when the figure was measured at another one: then it is
    # shown as such and never compared by step time (``batch_note``)
    other_batch_of: int | None = None
    # the GPU type the figure is published for, where not the configuration's: an H200 is judged against
    # the H100's figure (gpus.yaml runs_recipes_of), and ``label`` says so (``published (h100)``)
    of_gpu: str | None = None

    @property
    def same_batch(self) -> bool:
        """Measured at the configuration's global batch size (and GPU count): comparable by step time."""
        return self.other_batch_of is None

    def batch_note(self) -> str | None:
        """``measured at GBS 256, not this configuration's 128: not comparable by step time``; None when the
        figure is at the configuration's own batch."""
        if self.other_batch_of is None:
            return None
        at = f"GBS {self.gbs}" if self.gbs else "an unstated global batch size"
        return (
            f"measured at {at} on {self.gpus} GPUs, not this configuration's GBS {self.other_batch_of}: "
            f"not comparable by step time"
        )

    def describe(self) -> str:
        """The document, and the container and date where the document's name does not say them."""
        shown = self.container and f"nemo:{self.container}" not in self.document
        when = ", ".join(
            part for part in (shown and f"container {self.container}", self.date) if part
        )
        older = (
            f"measured with nemo:{self.container}, older than the run's nemo:{self.older_than_run}"
            if self.older_than_run
            else f"measured with nemo:{self.container}, newer than the run's nemo:{self.newer_than_run}"
            if self.newer_than_run
            else ""
        )
        notes = "; ".join(part for part in (when, older, self.batch_note()) if part)
        return self.document + (f" ({notes})" if notes else "")

    def headline(self) -> str:
        """``9.86 s per step``; ``19.69 s per step at GBS 256`` for a figure at another batch."""
        at = f" at GBS {self.gbs}" if self.other_batch_of is not None and self.gbs else ""
        if self.step_time_ms is not None:
            return f"{self.step_time_ms / 1000:.4g} s per step{at}"
        return f"{self.tflops_per_gpu:g} TFLOP/s per GPU{at}" if self.tflops_per_gpu else "a figure"


@dataclass(frozen=True)
class Missing:
    """Why there is no figure to compare with (``source``: the one asked for)."""

    source: str
    reason: str


def release(text: str | None) -> tuple[int, ...] | None:
    """``nvcr.io#nvidia/nemo:26.04.01`` or ``26.04.01`` -> (26, 4, 1); None when it names no release."""
    if not text:
        return None
    m = _RELEASE.search(text if "nemo:" in text else f"nemo:{text}")
    return None if m is None else tuple(int(g) for g in m.groups() if g is not None)


def release_text(container: str | None) -> str | None:
    """``nvcr.io#nvidia/nemo:25.04.01`` -> ``25.04.01`` (as written); other text after its last colon."""
    if not container:
        return None
    m = _RELEASE.search(container)
    return container.rsplit(":", 1)[-1] if m is None else m.group(0).split(":", 1)[1]


def sources(workload: Workload) -> list[str]:
    """The source names this workload has figures from (``auto`` chooses among them)."""
    names = [AUTO, DEFAULT_SOURCE] + [
        v.name for v in workload.variants if len(workload.variants) > 1
    ]
    return names + ([SUMMARY] if workload.summary else []) + ([CARD] if workload.cards else [])


def all_sources(workloads) -> list[str]:
    seen: dict[str, None] = {AUTO: None, DEFAULT_SOURCE: None}
    for workload in workloads.values():
        for name in sources(workload):
            seen.setdefault(name, None)
    return list(seen)


def _series(
    workload: Workload, variant: str, ref: ReferenceResult | Configuration
) -> RecipeSeries | None:
    """The recipe series a published figure (or a configuration) belongs to: its size, GPU type, dtype,
    scaling and scale."""
    for series in (s for v in workload.variants if v.name == variant for s in v.series):
        if (
            (series.size, series.gpu, series.scaling) == (ref.size, ref.gpu, ref.scaling)
            and ref.dtype in series.dtypes
            and series.min_gpus <= ref.gpus <= series.max_gpus
        ):
            return series
    return None


def _recipe_gbs(
    workload: Workload, variant: str, ref: ReferenceResult | Configuration
) -> int | None:
    series = _series(workload, variant, ref)
    if series is None:
        return None
    value = series.gbs.at(ref.gpus)
    return int(value) if value.denominator == 1 else None


@dataclass(frozen=True)
class Throughput:
    """A published figure's tokens/s and days to train 1T tokens: as printed, or computed from its step
    time where the document prints none (``computed`` names those): tokens/s = sequence x GBS / step
    time, days = 1e12 / tokens/s / 86400, with the recipe's sequence and GBS at the figure's GPU count
    (its own GBS where the document prints one). Never written into the data: the references keep what
    the documents print."""

    tokens_per_s: float | None
    days_1t: float | None
    computed: tuple[str, ...] = ()


def throughput(workload: Workload, ref: ReferenceResult) -> Throughput:
    """``ref``'s tokens/s and days per 1T tokens, computed from its step time where it prints neither.
    A row that prints tokens/s but no days (Llama 3.1's 405b-Proxy rows: n/a, a proxy model's time to
    train means nothing) keeps its n/a."""
    if ref.tokens_per_s is not None or not ref.step_time_s:
        return Throughput(ref.tokens_per_s, ref.days_1t)
    series = _series(workload, ref.variant, ref)
    gbs = ref.gbs or _recipe_gbs(workload, ref.variant, ref)
    if series is None or not gbs:
        return Throughput(None, ref.days_1t)
    tokens = tokens_per_second(series.seq_len, gbs, ref.step_time_s)
    if ref.days_1t is not None:
        return Throughput(tokens, ref.days_1t, ("tokens_per_s",))
    return Throughput(tokens, days_to_train(tokens), ("tokens_per_s", "days_1t"))


def _from_recipe(
    workload: Workload, variant_name: str, ref: ReferenceResult, source: str, label: str
) -> Figure:
    variant = workload.variant(variant_name)
    return Figure(
        source=source,
        label=label,
        document=ref.provenance.describe(),
        gpus=ref.gpus,
        step_time_ms=ref.step_time_s * 1000.0,
        tokens_per_s=throughput(workload, ref).tokens_per_s,
        tflops_per_gpu=ref.tflops_per_gpu,
        gbs=ref.gbs or _recipe_gbs(workload, variant_name, ref),
        container=release_text(
            ref.container or (variant.container_for(ref.gpu) if variant else None)
        ),
        mfu_pct=ref.mfu_pct,
    )


def _from_summary(ref: ReferenceResult) -> Figure:
    return Figure(
        source=SUMMARY,
        label="the performance summary's figure",
        document=ref.note or ref.provenance.describe(),
        gpus=ref.gpus,
        step_time_ms=ref.step_time_s * 1000.0 if ref.step_time_s else None,
        tokens_per_s=ref.tokens_per_s,
        tflops_per_gpu=ref.tflops_per_gpu,
        gbs=ref.gbs,
        container=release_text(ref.container),
        date=ref.date,
        mfu_pct=ref.mfu_pct,
    )


def _from_card(ref: ReferenceResult) -> Figure:
    return replace(_from_summary(ref), source=CARD, label="the verification card's figure")


def of_tables(config: Configuration) -> Configuration:
    """The configuration as the published tables know it: on the GPU type whose recipes and figures its
    own runs (``llmb.recipes.gpus.recipes_of``: an H200's are the H100's)."""
    table = recipes_of(config.gpu)
    return config if table == config.gpu else replace(config, gpu=table)


def _pairs(workload: Workload, config: Configuration) -> list[tuple[Figure, ReferenceResult]]:
    """Every figure a document publishes for the configuration's GPU count, its own recipe's first, each
    with the published row it comes from and marked where its global batch size is not the configuration's.
    A GPU type that runs another's recipes gets the other's figures, labelled with it (``published (h100)``)."""
    asked, config = config.gpu, of_tables(config)
    whose = f" ({config.gpu})" if config.gpu != asked else ""
    own = workload.variant(config.variant) or workload.default_variant
    wanted = config.gbs or own_gbs(workload, config)
    found: list[tuple[Figure, ReferenceResult]] = []
    for variant in [own] + [v for v in workload.variants if v is not own]:
        refs = workload.published(
            variant.name, config.size, config.gpu, config.dtype, config.scaling, config.gpus
        )
        if refs:
            source = DEFAULT_SOURCE if variant is own else variant.name
            label = (
                "published" if variant is own else f"the {variant.name} recipe's figure"
            ) + whose
            found.append((_from_recipe(workload, variant.name, refs[0], source, label), refs[0]))
    this = (config.size, config.gpu, config.dtype, config.gpus, config.scaling)
    # the first figure of the performance summary, then of the verification cards, of this configuration
    for figures, made in ((workload.summary, _from_summary), (workload.cards, _from_card)):
        ref = next(
            (r for r in figures if (r.size, r.gpu, r.dtype, r.gpus, r.scaling) == this), None
        )
        if ref is not None:
            figure = made(ref)
            found.append((replace(figure, label=figure.label + whose), ref))
    mapped = {"of_gpu": config.gpu} if whose else {}
    return [
        (
            replace(figure, **mapped)
            if _same_batch(figure, wanted)
            else replace(figure, other_batch_of=wanted, **mapped),
            ref,
        )
        for figure, ref in found
    ]


def _same_batch(figure: Figure, wanted: int | None) -> bool:
    """Whether a figure was measured at the configuration's global batch size. Where either is unknown, only
    the own recipe's figure is taken as its own configuration's."""
    if figure.gbs is None or wanted is None:
        return figure.source == DEFAULT_SOURCE
    return figure.gbs == wanted


def own_gbs(workload: Workload, config: Configuration) -> int | None:
    """The global batch size the configuration's own recipe runs at ``config.gpus`` (None: no such series)."""
    own = workload.variant(config.variant) or workload.default_variant
    return _recipe_gbs(workload, own.name, of_tables(config))


def candidates(workload: Workload, config: Configuration) -> list[Figure]:
    """Every figure a document publishes for the configuration, its own recipe's first (a figure at another
    global batch size is marked: ``Figure.batch_note``)."""
    return [figure for figure, _ in _pairs(workload, config)]


def chosen(
    workload: Workload, config: Configuration, source: str = AUTO
) -> tuple[Figure, ReferenceResult] | None:
    """The figure ``source`` gives for exactly this configuration and the published row it comes from.
    ``auto``: the own recipe's figure at the configuration's batch, else the first other document's at it;
    a named source: its figure, at whatever batch it was measured (marked)."""
    pairs = _pairs(workload, config)
    if source == AUTO:
        return next(((f, r) for f, r in pairs if f.same_batch), None)
    own = (workload.variant(config.variant) or workload.default_variant).name
    wanted = DEFAULT_SOURCE if source == own else source
    return next(((f, r) for f, r in pairs if f.source == wanted), None)


def find(workload: Workload, config: Configuration, source: str = AUTO) -> Figure | Missing:
    """The figure ``source`` publishes for exactly this configuration, or why there is none."""
    valid = sources(workload)
    own = (workload.variant(config.variant) or workload.default_variant).name
    if source not in valid and source != own:
        return Missing(
            source,
            f"there are no {source} figures for {workload.name} (it has: {', '.join(valid)})",
        )
    if (other_work := _other_work(workload, config)) is not None:
        return Missing(source, other_work)
    picked = chosen(workload, config, source)
    if picked is None:
        wanted = DEFAULT_SOURCE if source == own else source
        return Missing(source, _none_from(workload, config, wanted, candidates(workload, config)))
    figure = picked[0]
    run_release, figure_release = (
        comparable_release(config.container),
        comparable_release(figure.container),
    )
    if run_release and figure_release and figure_release < run_release:
        figure = replace(figure, older_than_run=release_text(config.container))
    elif run_release and figure_release and figure_release > run_release:
        figure = replace(figure, newer_than_run=release_text(config.container))
    return figure


def comparable_release(text: str | None) -> tuple[int, ...] | None:
    """``release`` without trailing zero parts, so that ``26.08`` and ``26.08.00`` are one release."""
    parts = release(text)
    if parts is None:
        return None
    while len(parts) > 2 and parts[-1] == 0:
        parts = parts[:-1]
    return parts


def same_container(run: str | None, figure: str | None) -> bool | None:
    """Whether a run and a figure were measured in the same container release; None where either is
    unknown. Across releases a framework's FLOP count can change (Megatron-Bridge's GPT-OSS 120B count
    moved from 27.2 to 32.6 GFLOP per token between its 26.04.01 and 26.06 figures), so TFLOP/s per GPU
    is judged only within one release (docs/verdicts.md, "Across containers")."""
    a, b = comparable_release(run), comparable_release(figure)
    return None if a is None or b is None else a == b


def _other_work(workload: Workload, config: Configuration) -> str | None:
    """Why no published figure measured the configuration's work: a sequence length other than its
    recipe's, or fewer layers than the model's; None where neither differs. (The global batch size, the
    GPU count and the precision are part of the figure's own key: ``_pairs``.)"""
    series = _series(
        workload,
        (workload.variant(config.variant) or workload.default_variant).name,
        of_tables(config),
    )
    if config.seq_len is not None and series is not None and config.seq_len != series.seq_len:
        return (
            f"the run's sequence length is {config.seq_len:,}, not the published recipe's "
            f"{series.seq_len:,}: no published figure measured its work"
        )
    if config.layers is not None and config.size in workload.architectures:
        model = workload.architecture(config.size).layers
        if config.layers != model:
            return (
                f"the run trained {config.layers:,} layers, not the model's {model:,}: no published "
                f"figure measured its work"
            )
    return None


def _none_from(workload: Workload, config: Configuration, source: str, others: list[Figure]) -> str:
    what = f"{config.size} {config.dtype} on {config.gpus} {config.gpu} GPUs"
    if (table := recipes_of(config.gpu)) != config.gpu:
        what += f" (the {table}'s figures: {config.gpu} runs the {table} recipes)"
    if not others:
        return f"no published document has a figure for {what}"
    if source == AUTO:
        shown = "; ".join(
            f"{f.document}: {f.headline()} ({f.batch_note()}; --reference {f.source})"
            for f in others
        )
        return f"no published document has a figure for {what} at its global batch size: {shown}"
    if source == DEFAULT_SOURCE:
        document = workload.cite(
            (workload.variant(config.variant) or workload.default_variant).seed
        )
    elif source == SUMMARY:
        document = "the performance summary"
    elif source == CARD:
        document = "the model verification card"
    else:
        document = f"the {source} recipe"
    other = others[0]
    return (
        f"{document} publishes no figure for {what}; {other.document} does: {other.headline()} "
        f"(--reference {other.source})"
    )


def others(workload: Workload, config: Configuration) -> list[Figure]:
    """The figures documents other than the configuration's own recipe publish for it."""
    return [f for f in candidates(workload, config) if f.source != DEFAULT_SOURCE]
