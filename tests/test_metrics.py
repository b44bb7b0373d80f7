"""Every worked example of the seeds, through llmb's metric functions, and
every published performance figure against llmb's formulas."""

from __future__ import annotations

import pytest
from llmb.recipes.gpus import gpu_type
from llmb.recipes.metrics import days_to_train, mfu, tflops_per_gpu, tokens_per_second
from llmb.recipes.records import RecipeRequest
from printed import agrees


def pct(fraction: float) -> float:
    return 100 * fraction


def test_llama31_megatron_bridge_example():
    tps = tokens_per_second(8192, 64, 5.74)
    assert agrees(tps, "91339")
    assert agrees(days_to_train(91339), "126.72")
    assert agrees(pct(mfu(1636.8, gpu_type("gb200").peak("fp8"))), "33.40")


def test_llama31_nemo2_example():
    assert agrees(tokens_per_second(8192, 128, 12.39), "84631")
    assert agrees(days_to_train(84631), "136.76")
    tf = tflops_per_gpu(4.74e14, 128, 12.39, 8)
    assert agrees(pct(mfu(tf, gpu_type("h100").peak("fp8"))), "30.93")


def test_llama4_example(host):
    # "E.g. 8192 * 1024 / 7.781 = 1077749": the division gives 1078089
    # (erratum llama4-tokens-example).
    assert round(tokens_per_second(8192, 1024, 7.781)) == 1078089
    assert "llama4-tokens-example" in {n.id for n in host.workload("llama4").notes}
    assert agrees(days_to_train(1077749), "10.74")
    # The MFU line's arithmetic, with the FP8 peak it (wrongly) uses:
    tf = tflops_per_gpu(8.92e14, 1024, 7.781, 128)
    assert agrees(pct(mfu(tf, 4900)), "18.71")
    # With GB200's BF16 peak, as llmb computes it:
    assert round(pct(mfu(tf, gpu_type("gb200").peak("bf16"))), 2) == 37.43


def test_nemotron4_examples():
    assert agrees(tokens_per_second(4096, 256, 2.693), "389371")
    assert agrees(days_to_train(389371), "29.7")
    tf = tflops_per_gpu(8.62124e15, 64, 4.31, 256)
    assert agrees(pct(mfu(tf, gpu_type("h100").peak("bf16"))), "50.5")


def test_nemotronh_example():
    assert agrees(tokens_per_second(8192, 768, 15.892), "395888")
    assert agrees(days_to_train(395895), "29.24")  # the seed divides by 395895
    tf = tflops_per_gpu(2.816e15, 768, 15.892, 256)
    assert agrees(pct(mfu(tf, gpu_type("h100").peak("fp8"))), "26.86")


@pytest.mark.parametrize(
    ("gpu", "peaks"),
    [
        ("gb300", {"bf16": 2450, "fp8": 4900, "nvfp4": 14700}),
        ("gb200", {"bf16": 2450, "fp8": 4900, "nvfp4": 9800}),
        ("b300", {"bf16": 2250, "fp8": 4500, "nvfp4": 13500}),
        ("b200", {"bf16": 2250, "fp8": 4500, "nvfp4": 9000}),
        ("h100", {"bf16": 989, "fp8": 1979, "nvfp4": None}),
    ],
)
def test_peak_table_is_field_facts_section_5(gpu, peaks):
    assert {dtype: gpu_type(gpu).peak(dtype) for dtype in peaks} == peaks


def test_published_figures_follow_from_the_published_step_times(host):
    """Tokens/s and days within 0.1%/0.2% (the seeds round step times to 3-4
    digits), MFU within 0.1 point (they round model FLOPs to 3 digits). A
    row outside that must cite an erratum that explains it, and only such
    rows may."""
    checked, explained = 0, []
    for workload in host.workloads().values():
        for ref in workload.references:
            recipe = host.resolve(
                RecipeRequest(
                    workload.name,
                    ref.size,
                    ref.gpu,
                    ref.dtype,
                    ref.gpus,
                    variant=ref.variant,
                    strong_scaling=ref.scaling == "strong",
                )
            )
            arch = workload.architecture(recipe.size).with_layers(recipe.layers)
            flops = host.model_flops(workload, arch, recipe.seq_len).per_sample
            tps = tokens_per_second(recipe.seq_len, recipe.gbs, ref.step_time_s)
            problems = []
            if ref.tokens_per_s is not None and abs(tps / ref.tokens_per_s - 1) > 1e-3:
                problems.append(f"tokens/s {tps:.0f} vs {ref.tokens_per_s:.0f}")
            if ref.days_1t is not None and abs(days_to_train(tps) / ref.days_1t - 1) > 2e-3:
                problems.append(f"days {days_to_train(tps):.3f} vs {ref.days_1t}")
            printed_mfu = ref.mfu_pct if ref.printed_mfu_pct is None else ref.printed_mfu_pct
            if printed_mfu is not None:
                peak = gpu_type(recipe.gpu).peak(recipe.dtype)
                tf = ref.tflops_per_gpu or tflops_per_gpu(
                    flops, recipe.gbs, ref.step_time_s, recipe.gpus
                )
                if abs(pct(mfu(tf, peak)) - printed_mfu) > 0.1:
                    problems.append(f"MFU {pct(mfu(tf, peak)):.2f}% vs {printed_mfu}%")
                # llmb's correction must itself follow from the figures
                if ref.printed_mfu_pct is not None:
                    assert abs(pct(mfu(tf, peak)) - ref.mfu_pct) <= 0.1, (
                        ref.provenance.describe(),
                        ref.mfu_pct,
                    )
            checked += 1
            if ref.erratum:
                assert problems, f"{ref.provenance.describe()} cites {ref.erratum} but agrees"
                explained.append((ref.provenance.describe(), ref.gpus, problems))
            else:
                assert not problems, (
                    f"{workload.name} {ref.provenance.describe()} at {ref.gpus}: {problems}"
                )
    assert checked >= 50
    print("\n".join(f"explained by an erratum: {row}" for row in explained))
