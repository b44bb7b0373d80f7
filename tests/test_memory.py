"""The per-GPU memory estimate against the measurements the seeds print, and
its structure (sharding, pipeline split, recompute, offload, warnings)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from llmb.recipes.memory import GIB, MARGIN, estimate_memory
from llmb.recipes.params import count_params
from llmb.recipes.records import RecipeRequest


def recipe_and_arch(host, workload, size, gpu, dtype, gpus, **kw):
    recipe = host.resolve(RecipeRequest(workload, size, gpu, dtype, gpus, **kw))
    arch = host.workload(workload).architecture(recipe.size)
    return recipe, arch


def test_weights_and_optimizer_match_megatrons_theoretical_footprint(host):
    # seeds/llama31-megatron-bridge.md, a log of 8b at 8 GPUs (TP 1, PP 1, DP 8):
    # "Theoretical memory footprints: weight and optimizer=57438.81 MB" (MiB).
    recipe, arch = recipe_and_arch(host, "llama31", "8b", "b200", "fp8", 8)
    recipe = replace(recipe, dtype="bf16", mbs=4, ga=4)
    m = estimate_memory(recipe, arch, None)
    static_mib = (m.weights_gb + m.gradients_gb + m.optimizer_gb) * GIB / 2**20
    assert static_mib == pytest.approx(57438.81, rel=2e-4)


# docs/memory-estimate.md: "the estimate runs high by up to ~15%"; the number is the test's own, so
# that widening the code's margin fails here until the docs say so too (issue 36)
DOCUMENTED_MARGIN = 0.15


def test_the_margin_is_the_documented_one():
    assert MARGIN == DOCUMENTED_MARGIN
    text = " ".join(
        (Path(__file__).resolve().parents[1] / "docs" / "memory-estimate.md").read_text().split()
    )
    assert "runs high by up to ~15%" in text


def test_estimate_against_the_measured_peaks_in_the_seeds(host):
    """Documented accuracy: the estimate runs high by at most the documented 15%."""
    # Megatron-Bridge seed log: 8b bf16, 8 GPUs, MBS 4, GBS 128:
    # "mem-max-allocated-gigabytes: 194.41".
    recipe, arch = recipe_and_arch(host, "llama31", "8b", "b200", "fp8", 8)
    recipe = replace(recipe, dtype="bf16", mbs=4, ga=4)
    mb = estimate_memory(recipe, arch, None).total_gb
    assert 194.41 <= mb <= 194.41 * (1 + DOCUMENTED_MARGIN)
    # NeMo 2 seed log: 8b bf16 on 8 H100 (TP 1, PP 1, CP 2, MBS 1):
    # "peak_memory_usage: 70833405952" bytes.
    recipe, arch = recipe_and_arch(host, "llama31", "8b", "h100", "bf16", 8, variant="nemo2")
    nemo = estimate_memory(recipe, arch, None).total_gb
    measured = 70833405952 / GIB
    assert measured <= nemo <= measured * (1 + DOCUMENTED_MARGIN)


def test_distributed_optimizer_shards_over_dp_and_cp(host):
    # DP 4, CP 2
    recipe, arch = recipe_and_arch(host, "llama31", "8b", "h100", "bf16", 8, variant="nemo2")
    m = estimate_memory(recipe, arch, None)
    params = count_params(arch).total
    assert m.weights_gb == pytest.approx(2 * params / GIB)
    assert m.gradients_gb == pytest.approx(4 * params / GIB)
    assert m.optimizer_gb == pytest.approx(12 * params / 8 / GIB)


def test_fsdp_shards_weights_and_gradients_too(host):
    recipe, arch = recipe_and_arch(host, "llama31", "70b", "b200", "fp8", 64)
    assert recipe.fsdp
    sharded = estimate_memory(recipe, arch, None)
    unsharded = estimate_memory(replace(recipe, fsdp=False), arch, None)
    assert sharded.gradients_gb == pytest.approx(unsharded.gradients_gb / 64)
    assert sharded.weights_gb < unsharded.weights_gb / 10


def test_pipeline_and_tensor_parallelism_split_the_model(host):
    # TP4 PP4 CP2
    recipe, arch = recipe_and_arch(host, "llama31", "70b", "h100", "bf16", 64, variant="nemo2")
    m = estimate_memory(recipe, arch, None)
    params = count_params(arch)
    first_stage = sum(l.total for l in params.layers[:20]) + params.embedding
    assert m.stage == 0
    assert m.weights_gb == pytest.approx(2 * first_stage / 4 / GIB)


def test_recompute_and_offload_lower_the_activations(host):
    recipe, arch = recipe_and_arch(host, "llama31", "8b", "b200", "nvfp4", 8)
    base = estimate_memory(recipe, arch, None).activations_gb
    recomputed = estimate_memory(replace(recipe, recompute_layers=16), arch, None).activations_gb
    offloaded = estimate_memory(replace(recipe, offload_layers=16), arch, None).activations_gb
    assert offloaded == pytest.approx(base / 2)
    assert offloaded < recomputed < base


def test_lower_precision_keeps_smaller_activations(host):
    recipe, arch = recipe_and_arch(host, "llama31", "8b", "b200", "nvfp4", 8)
    sizes = [
        estimate_memory(replace(recipe, dtype=d), arch, None).activations_gb
        for d in ("bf16", "fp8", "nvfp4")
    ]
    assert sizes[0] > sizes[1] > sizes[2]


@pytest.mark.parametrize(
    "workload,size,gpu,dtype,gpus",
    [
        ("llama4", "400b", "gb200", "bf16", 128),
        ("nemotronh", "56b", "h100", "fp8", 256),
        ("nemotron4", "340b", "b200", "fp8", 128),
    ],
)
def test_every_family_is_estimated(host, workload, size, gpu, dtype, gpus):
    recipe, arch = recipe_and_arch(host, workload, size, gpu, dtype, gpus)
    m = estimate_memory(recipe, arch, 80.0)
    assert 0 < m.weights_gb < m.total_gb
    assert m.activations_gb > 0


def test_plan_warns_when_the_estimate_exceeds_the_gpu(cli):
    over = cli(
        "plan",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "b200",
        "--dtype",
        "nvfp4",
        "--gpus",
        "8",
        "--set",
        "mbs=16",
        "--json",
    ).json()
    assert over["memory_gb_per_gpu"] > 180 * (1 + MARGIN)
    assert any("will not fit" in w for w in over["warnings"])
    fits = cli(
        "plan",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "b200",
        "--dtype",
        "nvfp4",
        "--gpus",
        "8",
        "--json",
    ).json()
    assert fits["memory_gb_per_gpu"] < 180 and not fits["warnings"]
    near = cli(
        "plan",
        "llama31",
        "--variant",
        "nemo2",
        "--size",
        "405b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        "512",
        "--json",
    ).json()
    assert 80 < near["memory_gb_per_gpu"] <= 80 * (1 + MARGIN)
    assert any("may still fit" in w for w in near["warnings"])


def test_the_torch_engines_estimate_against_its_measured_peaks(host):
    """The torch engine's estimate (fp32 weights and AdamW, the chunked loss; calibrated: docs/memory-
    estimate.md) against what the CUDA allocator reported for Llama 3.1 8B's width at 10 layers on one GPU,
    4 micro-batches (MBS 1, GA 4) of 8,192 tokens, compiled, bf16 autocast."""
    from llmb.recipes.memory import TORCH
    from llmb.recipes.proxies import proxy_recipe

    request = RecipeRequest("llama31", "8b", "h100", "bf16", 8, overrides={"gbs": 16})
    recipe = replace(proxy_recipe(host.resolve(request), 1), layers=10)
    assert (recipe.mbs, recipe.ga, recipe.seq_len) == (1, 4, 8192)
    arch = host.workload("llama31").architecture("8b").with_layers(10)
    # issue 33: `llmb run llama31 --size 8b --gpu h100 --gpus 1 --layers 10 --dtype bf16 --set gbs=16`
    # on one H200 (torch 2.11.0+cu130): "max allocated 71.5 GB" (mem-max-allocated-gigabytes, GiB)
    estimate = estimate_memory(recipe, arch, 80.0, TORCH).total_gb
    assert estimate == pytest.approx(71.5, rel=0.01)
    # docs/running-locally.md, the same command on one H100 80GB HBM3 (torch 2.11.0+cu130), when the
    # chunked loss held 256 MiB of logits per chunk (2**26 elements): 69.8 GiB; and --dtype fp8
    # --set gbs=32 (torchao float8): 62.9 GiB, which the estimate exceeds (errs high) by under 10%
    before = replace(TORCH, logits_chunk=2**26)
    assert estimate_memory(recipe, arch, 80.0, before).total_gb == pytest.approx(69.8, rel=0.01)
    fp8 = estimate_memory(replace(recipe, dtype="fp8", ga=8), arch, 80.0, before).total_gb
    assert 62.9 < fp8 < 62.9 * 1.10
    # on that 80 GB card the 10 layers are the most --fit takes (tests/test_fit.py), and the run's own
    # estimate is under the card's memory: llmb run does not refuse what ran
    assert estimate < 80.0
