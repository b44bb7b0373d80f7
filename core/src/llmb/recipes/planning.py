"""A plan: a resolved recipe with everything llmb can say before running it
(model FLOPs and which count a run's TFLOP/s/GPU and MFU use, memory estimate
with recompute and offload, published expectations, warnings, errata) and,
with ``proxy``, what ``llmb run --proxy`` runs and every way it differs from
the published recipe."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from llmb.recipes.fit import Fit
from llmb.recipes.flops import megatron_bridge_step
from llmb.recipes.gpus import catalogue, gpu_type, peak_source, recipes_of
from llmb.recipes.memory import MARGIN, MemoryEstimate, estimate_memory
from llmb.recipes.metrics import mfu_at_bf16_pct
from llmb.recipes.params import count_params
from llmb.recipes.proxies import ProxyRun
from llmb.recipes.records import (
    ModelArch,
    ModelFlops,
    Recipe,
    RecipeRequest,
    ReferenceResult,
    Variant,
    Workload,
)
from llmb.recipes.references import Configuration, Figure, Throughput, others, throughput
from llmb.recipes.time_limit import TimeLimit, estimated_step_s
from llmb.recipes.time_limit import derive as derive_time_limit

if TYPE_CHECKING:  # the host is passed in: recipes come before plugins (docs/architecture.md)
    from llmb.plugins.host import PluginHost

# The FLOPs counts a run's TFLOP/s/GPU and MFU can be on (``FlopsUse``), as users read them.
# the published recipe's Notes formula (llmb_model_flops), per sample
WORKLOAD_FORMULA = "workload_formula"
# Megatron-Bridge's MODEL_TFLOP/s/GPU count (causal attention)
MEGATRON_BRIDGE = "megatron_bridge_count"
NEMO2_CALLBACK = "nemo2_flops_callback"  # NeMo 2's FLOPs callback, its log's TFLOPS_per_GPU
COUNT_WORDS = {
    WORKLOAD_FORMULA: "the workload's formula",
    MEGATRON_BRIDGE: "Megatron-Bridge's count",
    NEMO2_CALLBACK: "NeMo 2's FLOPs callback",
}
FRAMEWORK_TITLES = {"megatron_bridge": "Megatron-Bridge", "nemo2": "NeMo 2"}


@dataclass(frozen=True)
class FlopsUse:
    """Which FLOPs count a run's TFLOP/s/GPU and MFU are on, by engine (``llmb.results.analyze`` computes
    them): the torch engine logs MODEL_TFLOP/s/GPU on the workload's formula; a production framework's
    log carries its own count, which becomes the MFU only where the published recipe computes MFU from
    the logged figure (``mfu_from: log``: Llama 3.1's Megatron-Bridge recipe), and is replaced by the
    workload's formula where the recipe calls it invalid (``log_tflops_valid: false``: Nemotron-H).
    ``tflops`` None: the log carries no TFLOP/s/GPU."""

    engine: str  # torch | the variant's framework
    tflops: str | None
    mfu: str
    callback: str | None = None  # NeMo 2: the model name its FLOPs callback is given
    # the log's TFLOP/s are invalid: llmb computes them from the workload's formula
    computed: bool = False

    def words(self, count: str | None) -> str:
        if count == NEMO2_CALLBACK and self.callback:
            return f"NeMo 2's FLOPs callback ({self.callback})"
        return COUNT_WORDS.get(count, "-")

    def as_dict(self) -> dict[str, Any]:
        return {"tflops_per_gpu": self.tflops, "mfu": self.mfu, "tflops_computed": self.computed}


def flops_use(variant: Variant) -> tuple[FlopsUse, ...]:
    """The torch engine's use, then the production framework's where the variant has one."""
    uses = [FlopsUse("torch", WORKLOAD_FORMULA, WORKLOAD_FORMULA)]
    production = variant.production
    if production is not None:
        callback = production.flops_callback if variant.framework == "nemo2" else None
        if not variant.log_tflops_valid:
            # computed from the formula: the logged figure is invalid
            tflops: str | None = WORKLOAD_FORMULA
        elif variant.framework == "megatron_bridge":
            tflops = MEGATRON_BRIDGE
        else:
            tflops = NEMO2_CALLBACK if callback else None
        mfu = tflops if variant.mfu_from == "log" and tflops else WORKLOAD_FORMULA
        uses.append(
            FlopsUse(
                variant.framework, tflops, mfu, callback, computed=not variant.log_tflops_valid
            )
        )
    return tuple(uses)


@dataclass(frozen=True)
class ProxyPlan:
    """``llmb plan --proxy``: the proxy run (``llmb.recipes.proxies.ProxyRun``) ``llmb run --proxy`` makes
    on this machine, with its FLOPs, parameters and experiment name; ``refusal``: why ``llmb run`` would
    refuse it here (more ranks than this machine's cores carry), None when it would run."""

    run: ProxyRun
    flops: ModelFlops | None
    params: int
    experiment: str
    refusal: str | None = None
    fit: Fit | None = None  # --fit: the slice chosen (llmb.recipes.fit)

    def as_dict(self) -> dict[str, Any]:
        data = self.run.as_dict()
        data.update(
            {
                "model_flops_per_sample": self.flops.per_sample if self.flops else None,
                "params": self.params,
                "experiment": self.experiment,
                "refusal": self.refusal,
                "fit": self.fit.as_dict() if self.fit else None,
            }
        )
        return data


@dataclass(frozen=True)
class TunedSetting:
    """A recipe setting a tuned run changed: its name, the official configuration's value and the run's."""

    setting: str
    published: object
    run: object

    def text(self) -> str:
        return f"{self.setting} {'-' if self.published is None else self.published} -> {self.run}"

    def as_dict(self) -> dict[str, Any]:
        return {"setting": self.setting, "published": self.published, "run": self.run}


# What a --set can change that a reader compares, beside the keys given: the derived DP and GA.
_TUNED_FIELDS = (
    "tp",
    "pp",
    "cp",
    "ep",
    "etp",
    "vp",
    "dp",
    "mbs",
    "gbs",
    "ga",
    "seq_len",
    "layers",
    "fsdp",
    "cuda_graphs",
    "steps",
    "recompute_layers",
    "offload_layers",
)


def tuned_settings(official: Recipe, recipe: Recipe) -> tuple[TunedSetting, ...]:
    """The settings of ``recipe`` (with --set) that differ from ``official`` (the same request without)."""
    return tuple(
        TunedSetting(name, getattr(official, name), getattr(recipe, name))
        for name in _TUNED_FIELDS
        if getattr(official, name, None) != getattr(recipe, name, None)
    )


@dataclass(frozen=True)
class Plan:
    workload: Workload
    recipe: Recipe
    arch: ModelArch
    flops: ModelFlops | None
    megatron_step_flops: float | None
    memory: MemoryEstimate
    expected: ReferenceResult | None
    # what other public documents publish for the same configuration
    other_figures: tuple[Figure, ...] = ()
    proxy: ProxyPlan | None = None
    # A tuned request (--set): every setting that differs from the official configuration's, and the
    # official configuration's published figure, which a tuned run is shown beside.
    tuned: tuple[TunedSetting, ...] = ()
    official_expected: ReferenceResult | None = None

    @property
    def variant(self) -> Variant:
        return self.workload.variant(self.recipe.variant) or self.workload.default_variant

    @property
    def container(self) -> str:
        """The container image the recipe runs in on its GPU type (a run's default image): that of the type
        whose recipe it is (an H200 runs the H100's)."""
        return self.variant.container_for(recipes_of(self.recipe.gpu))

    @property
    def flops_use(self) -> tuple[FlopsUse, ...]:
        return flops_use(self.variant)

    @property
    def megatron_ratio(self) -> float | None:
        """Megatron-Bridge's count over the workload's formula, per step (0.889 for Llama 3.1 8b)."""
        if not self.megatron_step_flops or not self.flops or not self.flops.per_sample:
            return None
        return self.megatron_step_flops / (self.flops.per_sample * self.recipe.gbs)

    @property
    def time_limit(self) -> TimeLimit:
        """The cluster job's time limit when none is given (``llmb.recipes.time_limit``): from the published
        step time, else an estimate from the model FLOPs and the GPUs' peak."""
        r = self.recipe
        # only a figure measured at this configuration's batch: another batch's step time is another job's
        others = sorted(
            (f for f in self.other_figures if f.step_time_ms and f.same_batch),
            key=lambda f: -f.step_time_ms,
        )
        if self.expected is not None:
            step, source = self.expected.step_time_s, "published"
        elif self.official_expected is not None:  # a tuned run: the official configuration's
            step, source = (
                self.official_expected.step_time_s,
                "published for the official configuration",
            )
        # another public document's figure for this configuration: the slowest, to err long
        elif others:
            step, source = others[0].step_time_ms / 1000.0, others[0].label
        else:
            peak = gpu_type(r.gpu).peak_tflops.get(r.dtype) if r.gpu in catalogue() else None
            step = estimated_step_s(
                self.flops.per_sample if self.flops else None, r.gbs, r.gpus, peak
            )
            source = "estimate" if step else "none"
        return derive_time_limit(r.steps, step, source, count_params(self.arch).total)

    @property
    def judged_against(self) -> str | None:
        """The source of the figure a run of this configuration is judged against by the one reference
        policy (``auto``): ``recipe`` (its own), another document's at exactly its batch, or None."""
        if self.recipe.overrides:
            return None
        if self.expected is not None:
            return "recipe"
        return next((f.source for f in self.other_figures if f.same_batch), None)

    @property
    def held_to(self) -> dict[str, Any] | None:
        """What a run of this configuration is held to by the one reference policy: the published step time
        (``measure`` ``step_time``) of the figure ``judged_against`` names, with its GBS, GPU count and
        document; the TFLOP/s and MFU beside it are shown on ``shown_on`` (the count the production
        framework's log gives, which the published recipe computes MFU from), never judged. None: none."""
        source = self.judged_against
        if source is None:
            return None
        if source == "recipe" and self.expected is not None:
            step, gbs = self.expected.step_time_s, self.expected.gbs or self.recipe.gbs
            document = self.expected.provenance.describe()
        else:
            figure = next(f for f in self.other_figures if f.source == source)
            step, gbs, document = (
                figure.step_time_ms / 1000.0,
                figure.gbs or self.recipe.gbs,
                figure.document,
            )
        production = self.flops_use[-1]
        return {
            "measure": "step_time",
            "step_time_s": step,
            "gbs": gbs,
            "gpus": self.recipe.gpus,
            "source": source,
            "document": document,
            "shown_on": production.words(production.mfu),
        }

    @property
    def expected_throughput(self) -> Throughput | None:
        """The expected figure's tokens/s and days, computed from its step time where it prints neither."""
        return throughput(self.workload, self.expected) if self.expected else None

    @property
    def warnings(self) -> tuple[str, ...]:
        out = list(self.recipe.warnings)
        if d := self.workload.deprecated:  # still runs; said once, first
            out.insert(0, f"{self.workload.name} is {d.describe()}; llmb still runs its recipes.")
        out += [f"recipe erratum {e.describe()}" for e in self.recipe.errata]
        m = self.memory
        if m.exceeds_margin:
            out.append(
                f"estimated {m.total_gb:.1f} GiB per GPU exceeds the {self.recipe.gpu}'s {m.capacity_gb:g} GiB "
                f"by more than the estimate's ~{MARGIN:.0%} margin: this will not fit as configured "
                f"(recompute {self.recipe.recompute_layers} and offload {self.recipe.offload_layers} layers; "
                f"model more with --set recompute_layers=N or offload_layers=N)."
            )
        elif m.exceeds_capacity:
            out.append(
                f"estimated {m.total_gb:.1f} GiB per GPU is just above the {self.recipe.gpu}'s {m.capacity_gb:g} GiB; "
                f"the estimate runs up to ~{MARGIN:.0%} high (docs/memory-estimate.md), so it may still fit."
            )
        if self.proxy and self.proxy.refusal:
            out.append(f"llmb run {self.proxy.run.flag} here would refuse it: {self.proxy.refusal}")
        return tuple(out)

    def as_dict(self) -> dict[str, Any]:
        r = self.recipe
        data: dict[str, Any] = {
            "workload": r.workload,
            "variant": r.variant,
            "framework": r.framework,
            "size": r.size,
            "gpu": r.gpu,
            "dtype": r.dtype,
            "gpus": r.gpus,
            "nodes": r.nodes,
            "gpus_per_node": r.gpus_per_node,
            "tp": r.tp,
            "pp": r.pp,
            "cp": r.cp,
            "ep": r.ep,
            "etp": r.etp,
            "vp": r.vp,
            "dp": r.dp,
            "mbs": r.mbs,
            "gbs": r.gbs,
            "gbs_rule": r.gbs_rule,
            "ga": r.ga,
            "seq_len": r.seq_len,
            "layers": r.layers,
            "fsdp": r.fsdp,
            "cuda_graphs": r.cuda_graphs,
            "steps": r.steps,
            "scaling": r.scaling,
            # the GPU count is one the recipe's table tests; scale_status: tested | not tested (between
            # tested counts) | not validated (above the largest)
            "validated": r.validated,
            "scale_status": r.scale_status,
            "model_flops_per_sample": self.flops.per_sample if self.flops else None,
            "model_flops_terms": dict(self.flops.terms) if self.flops else None,
            "model_flops_formula": self.flops.formula if self.flops else None,
            "megatron_bridge_flops_per_step": self.megatron_step_flops,
            # Megatron-Bridge's count over the workload's formula, per step (both at this GBS)
            "megatron_bridge_to_workload_formula": _ratio(self.megatron_ratio),
            # which count each engine's TFLOP/s/GPU and MFU are on: workload_formula, megatron_bridge_count,
            # nemo2_flops_callback (None: the log has no TFLOP/s/GPU)
            "flops_used": {use.engine: use.as_dict() for use in self.flops_use},
            "recompute_layers": r.recompute_layers,
            "offload_layers": r.offload_layers,
            "recompute": recompute_dict(r),
            "offload": offload_dict(r),
            "memory_gb_per_gpu": round(self.memory.total_gb, 2),
            "memory": self.memory.as_dict(),
            "expected": _expected(self.expected, self.expected_throughput),
            "other_figures": [asdict(f) for f in self.other_figures],
            "judged_against": self.judged_against,
            "held_to": self.held_to,
            "mfu_peak": asdict(peak) if (peak := peak_source(r.gpu, r.dtype)) else None,
            "time_limit": self.time_limit.as_dict(),  # a cluster job's, when none is given
            "env": dict(r.env),
            "overrides": {k: str(v) for k, v in r.overrides},
            "source": r.provenance.describe() if r.provenance else None,
            # the public recipe the tables are (release, commit, container) and the current release's
            "follows": (u := self.variant.upstream) and u.as_dict(self.container),
            "warnings": list(self.warnings),
            "errata": [asdict(e) for e in r.errata],
            "adjustments": list(r.adjustments),
            # --set: the settings that differ from the official configuration, and its published figure
            "tuned": [t.as_dict() for t in self.tuned] if self.tuned else None,
            "official_expected": _expected(
                self.official_expected, throughput(self.workload, self.official_expected)
            )
            if self.official_expected
            else None,
        }
        if self.proxy is not None:
            data["proxy"] = self.proxy.as_dict()
        return data


def _ratio(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def recompute_dict(recipe: Recipe) -> dict[str, Any] | None:
    """The recipe's activation recompute as the frameworks are told it (``llmb.engines.frameworks``: full
    recompute of the first N layers of each stage, Megatron's block method; the torch engine does the same),
    None without."""
    if not recipe.recompute_layers:
        return None
    return {"layers": recipe.recompute_layers, "granularity": "full", "method": "block"}


def offload_dict(recipe: Recipe) -> dict[str, Any] | None:
    """The recipe's CPU offload: the activations (not the weights) of N layers, on the production engine;
    None without."""
    if not recipe.offload_layers:
        return None
    return {"layers": recipe.offload_layers, "what": "activations", "engines": ["production"]}


def published_mfu_bf16_pct(ref: ReferenceResult) -> float | None:
    """The published MFU (against its dtype's peak) against the GPU type's BF16 peak; None without both peaks."""
    value = mfu_at_bf16_pct(ref.mfu_pct, gpu_type(ref.gpu).peak_tflops, ref.dtype)
    return None if value is None else round(value, 2)


def _expected(ref: ReferenceResult | None, made: Throughput | None) -> dict[str, Any] | None:
    if ref is None or made is None:
        return None
    return {
        "step_time_s": ref.step_time_s,
        "tokens_per_s": made.tokens_per_s,
        "mfu_pct": ref.mfu_pct,
        "mfu_bf16_pct": published_mfu_bf16_pct(ref),
        "printed_mfu_pct": ref.printed_mfu_pct,  # set when mfu_pct corrects the printed figure (see erratum)
        "days_1t": made.days_1t,
        # the figures llmb computed from the published step time (the document prints none)
        "computed": list(made.computed),
        "tflops_per_gpu": ref.tflops_per_gpu,
        # set when tflops_per_gpu corrects the printed figure (see erratum)
        "printed_tflops_per_gpu": ref.printed_tflops_per_gpu,
        "source": ref.provenance.describe(),
        "note": ref.note or None,
        "erratum": ref.erratum,
    }


def find_reference(workload: Workload, recipe: Recipe) -> ReferenceResult | None:
    """The published figures for exactly this configuration, if the recipe document has them: those of the
    GPU type whose recipe it runs (an H200's are the H100's; ``ReferenceResult.gpu`` says whose)."""
    if recipe.overrides:
        return None
    found = workload.published(
        recipe.variant,
        recipe.size,
        recipes_of(recipe.gpu),
        recipe.dtype,
        recipe.scaling,
        recipe.gpus,
    )
    return found[0] if found else None


def other_figures(workload: Workload, recipe: Recipe) -> tuple[Figure, ...]:
    """The figures other documents publish for exactly this configuration (another variant's recipe,
    the framework's performance summary): ``llmb compare --reference SOURCE`` judges against them."""
    if recipe.overrides:
        return ()
    return tuple(
        others(
            workload,
            Configuration(
                recipe.variant,
                recipe.size,
                recipe.gpu,
                recipe.dtype,
                recipe.gpus,
                recipe.scaling,
                gbs=recipe.gbs,
            ),
        )
    )


def make_plan(host: PluginHost, request: RecipeRequest) -> Plan:
    """The plan of ``request`` (``llmb plan`` of the recipe alone; given any of ``llmb run``'s options,
    plan prepares that run as ``llmb run --dry-run`` does: ``llmb.cli.plan_cmd``)."""
    recipe = host.resolve(request)
    workload = host.workload(recipe.workload)
    arch = workload.architecture(recipe.size).with_layers(recipe.layers)
    flops = host.model_flops(workload, arch, recipe.seq_len)
    hardware = gpu_type(recipe.gpu)
    plan = Plan(
        workload=workload,
        recipe=recipe,
        arch=arch,
        flops=flops,
        megatron_step_flops=megatron_bridge_step(arch, recipe.seq_len, recipe.gbs, recipe.tp),
        memory=estimate_memory(recipe, arch, hardware.memory_gb),
        expected=find_reference(workload, recipe),
        other_figures=other_figures(workload, recipe),
    )
    if recipe.overrides:
        plan = replace(plan, **_official(host, request, recipe, workload))
    return plan


def _official(
    host: PluginHost, request: RecipeRequest, recipe: Recipe, workload: Workload
) -> dict[str, Any]:
    """What a tuned request changes, against the same request without its --set (none where that one does
    not resolve, e.g. a GPU count only the tuned layout fits)."""
    from llmb.errors import RecipeError

    try:
        official = host.resolve(replace(request, overrides={}))
    except RecipeError:
        return {"tuned": tuple(TunedSetting(k, None, v) for k, v in recipe.overrides)}
    return {
        "tuned": tuned_settings(official, recipe),
        "official_expected": find_reference(workload, official),
    }
