"""Architecture data: parameter counts against the published figures, and
the structure the seeds describe (layer mix, experts, hybrid pattern)."""

from __future__ import annotations

import pytest
from llmb.recipes.params import count_params


def every_arch(host):
    return [(w.name, a) for w in host.workloads().values() for a in w.architectures.values()]


def test_llama31_counts_are_exact(host):
    # Hugging Face safetensors totals of meta-llama/Llama-3.1-{8B,70B,405B}.
    w = host.workload("llama31")
    assert count_params(w.architecture("8b")).total == 8_030_261_248
    assert count_params(w.architecture("70b")).total == 70_553_706_496
    assert count_params(w.architecture("405b")).total == 405_853_388_800


def test_counts_match_published_figures(host):
    """Within 0.5%, or within the precision the figure is published at
    (Nemotron-H: "56B" is given to two digits)."""
    checked = 0
    for name, arch in every_arch(host):
        if arch.published_params is None:
            continue
        published = arch.published_params
        counted = count_params(arch).total
        digits = len(f"{published:.0f}".rstrip("0"))
        half_unit = 0.5 * 10 ** (len(f"{published:.0f}") - digits)
        assert abs(counted - published) <= max(0.005 * published, half_unit), (
            name,
            arch.size,
            counted,
            published,
        )
        checked += 1
    # llmb's own four workloads, and the example plugin's two sizes where it is installed
    assert checked == 6 + (2 if "qwen3" in host.workloads() else 0) + (
        2 if "gptoss" in host.workloads() else 0  # plugins/gptoss: 120b and the MLPerf 20b
    ) + (2 if "deepseekv3" in host.workloads() else 0)  # plugins/deepseekv3: 671b and Kimi-K2's 1t


def test_nemotron4_split_matches_its_technical_report(host):
    count = count_params(host.workload("nemotron4").architecture("340b"))
    assert round((count.embedding + count.output) / 1e9, 1) == 9.4
    assert round((count.total - count.embedding - count.output) / 1e9, 1) == 331.6


def test_maverick_has_17b_active_parameters(host):
    arch = host.workload("llama4").architecture("400b")
    count = count_params(arch)
    routed_inactive = count.expert * (arch.experts - arch.topk) / arch.experts
    assert round((count.total - routed_inactive) / 1e9) == 17
    assert arch.layer_kinds().count("E") == 24  # every second layer is MoE


def test_nemotronh_pattern_is_the_seeds_layer_mix(host):
    kinds = host.workload("nemotronh").architecture("56b").layer_kinds()
    assert (len(kinds), kinds.count("M"), kinds.count("-"), kinds.count("*")) == (118, 54, 54, 10)


@pytest.mark.parametrize("layers", [1, 8, 62])
def test_proxies_keep_the_width(host, layers):
    full = host.workload("llama31").architecture("405b-proxy")
    proxy = full.with_layers(layers)
    assert (proxy.hidden, proxy.ffn, proxy.heads, proxy.layers) == (
        full.hidden,
        full.ffn,
        full.heads,
        layers,
    )
    hybrid = host.workload("nemotronh").architecture("56b")
    assert hybrid.with_layers(layers).layer_kinds() == hybrid.layer_pattern[:layers]
