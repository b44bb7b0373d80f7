"""A plan: a resolved recipe with everything llmb can say before running it
(model FLOPs, memory estimate, published expectations, warnings, errata)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from llmb.plugins.host import PluginHost
from llmb.recipes.flops import megatron_bridge_step
from llmb.recipes.gpus import gpu_type, peak_source
from llmb.recipes.memory import MARGIN, MemoryEstimate, estimate_memory
from llmb.recipes.metrics import mfu_at_bf16_pct
from llmb.recipes.records import ModelArch, ModelFlops, Recipe, RecipeRequest, ReferenceResult, Workload
from llmb.recipes.references import Configuration, Figure, others


@dataclass(frozen=True)
class Plan:
    workload: Workload
    recipe: Recipe
    arch: ModelArch
    flops: ModelFlops | None
    megatron_step_flops: float | None
    memory: MemoryEstimate
    expected: ReferenceResult | None
    other_figures: tuple[Figure, ...] = ()  # what other public documents publish for the same configuration

    @property
    def warnings(self) -> tuple[str, ...]:
        out = list(self.recipe.warnings)
        out += [f"recipe erratum {e.describe()}" for e in self.recipe.errata]
        m = self.memory
        if m.exceeds_margin:
            out.append(
                f"estimated {m.total_gb:.1f} GB per GPU exceeds the {self.recipe.gpu}'s {m.capacity_gb:g} GB "
                f"by more than the estimate's ~{MARGIN:.0%} margin: this will not fit as configured "
                f"(recompute {self.recipe.recompute_layers} and offload {self.recipe.offload_layers} layers; "
                f"model more with --set recompute_layers=N or offload_layers=N)."
            )
        elif m.exceeds_capacity:
            out.append(
                f"estimated {m.total_gb:.1f} GB per GPU is just above the {self.recipe.gpu}'s {m.capacity_gb:g} GB; "
                f"the estimate runs up to ~{MARGIN:.0%} high (docs/memory-estimate.md), so it may still fit."
            )
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
            "validated": r.validated,
            "model_flops_per_sample": self.flops.per_sample if self.flops else None,
            "model_flops_terms": dict(self.flops.terms) if self.flops else None,
            "model_flops_formula": self.flops.formula if self.flops else None,
            "megatron_bridge_flops_per_step": self.megatron_step_flops,
            "memory_gb_per_gpu": round(self.memory.total_gb, 2),
            "memory": self.memory.as_dict(),
            "expected": _expected(self.expected),
            "other_figures": [asdict(f) for f in self.other_figures],
            "mfu_peak": asdict(peak) if (peak := peak_source(r.gpu, r.dtype)) else None,
            "env": dict(r.env),
            "overrides": {k: str(v) for k, v in r.overrides},
            "source": r.provenance.describe() if r.provenance else None,
            "warnings": list(self.warnings),
            "errata": [asdict(e) for e in r.errata],
            "adjustments": list(r.adjustments),
        }
        return data


def published_mfu_bf16_pct(ref: ReferenceResult) -> float | None:
    """The published MFU (against its dtype's peak) against the GPU type's BF16 peak; None without both peaks."""
    value = mfu_at_bf16_pct(ref.mfu_pct, gpu_type(ref.gpu).peak_tflops, ref.dtype)
    return None if value is None else round(value, 2)


def _expected(ref: ReferenceResult | None) -> dict[str, Any] | None:
    if ref is None:
        return None
    return {
        "step_time_s": ref.step_time_s,
        "tokens_per_s": ref.tokens_per_s,
        "mfu_pct": ref.mfu_pct,
        "mfu_bf16_pct": published_mfu_bf16_pct(ref),
        "printed_mfu_pct": ref.printed_mfu_pct,  # set when mfu_pct corrects the printed figure (see erratum)
        "days_1t": ref.days_1t,
        "tflops_per_gpu": ref.tflops_per_gpu,
        "source": ref.provenance.describe(),
        "note": ref.note or None,
        "erratum": ref.erratum,
    }


def find_reference(workload: Workload, recipe: Recipe) -> ReferenceResult | None:
    """The published figures for exactly this configuration, if the recipe document has them."""
    if recipe.overrides:
        return None
    found = workload.published(recipe.variant, recipe.size, recipe.gpu, recipe.dtype, recipe.scaling, recipe.gpus)
    return found[0] if found else None


def other_figures(workload: Workload, recipe: Recipe) -> tuple[Figure, ...]:
    """The figures other documents publish for exactly this configuration (another variant's recipe,
    the framework's performance summary): ``llmb compare --reference SOURCE`` judges against them."""
    if recipe.overrides:
        return ()
    return tuple(others(workload, Configuration(recipe.variant, recipe.size, recipe.gpu, recipe.dtype, recipe.gpus,
                                                recipe.scaling)))


def make_plan(host: PluginHost, request: RecipeRequest) -> Plan:
    recipe = host.resolve(request)
    workload = host.workload(recipe.workload)
    arch = workload.architecture(recipe.size).with_layers(recipe.layers)
    flops = host.model_flops(workload, arch, recipe.seq_len)
    hardware = gpu_type(recipe.gpu)
    return Plan(
        workload=workload,
        recipe=recipe,
        arch=arch,
        flops=flops,
        megatron_step_flops=megatron_bridge_step(arch, recipe.seq_len, recipe.gbs, recipe.tp),
        memory=estimate_memory(recipe, arch, hardware.memory_gb),
        expected=find_reference(workload, recipe),
        other_figures=other_figures(workload, recipe),
    )
