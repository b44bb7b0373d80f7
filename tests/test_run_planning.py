"""Planning a run without running it: machine limits, precision, proxies,
profiling windows, checkpoint paths."""

from __future__ import annotations

import json
import re

import pytest
from llmb.errors import UsageError
from llmb.recipes.params import count_params
from llmb.recipes.proxies import shrink
from llmb.recipes.records import RecipeRequest
from llmb.runs.capability import Machine
from llmb.runs.profiling import (
    ProfileRequest,
    asked_window,
    llmb_profile,
    nccl_trace,
    profile_window,
)
from llmb.runs.runspec import (
    ParallelLayout,
    RunOptions,
    check_machine,
    checkpoint_dirs,
    compute_dtype,
    engine_layout,
    proxy_arch,
    torch_engine_layout,
)

GPU_BOX = Machine(gpus=8, gpu_names=("NVIDIA H100 80GB HBM3",) * 8, cpus=64)
LAPTOP = Machine(gpus=0, gpu_names=(), cpus=2)


def recipe(host, *args, **kw):
    return host.resolve(RecipeRequest(*args, **kw))


def test_full_size_needs_the_gpus(host):
    bf16 = recipe(host, "llama31", "8b", "h100", "bf16", 8)
    assert check_machine(bf16, RunOptions(), GPU_BOX, 8) == ("cuda", [])
    assert check_machine(
        recipe(host, "llama31", "8b", "h100", "fp8", 8), RunOptions(), GPU_BOX, 8
    ) == ("cuda", [])
    with pytest.raises(UsageError, match="this machine has 8 GPUs; use --gpus 8 or fewer"):
        check_machine(recipe(host, "llama31", "8b", "h100", "bf16", 16), RunOptions(), GPU_BOX, 16)
    with pytest.raises(UsageError, match="this machine has none"):
        check_machine(bf16, RunOptions(), LAPTOP, 8)


def test_full_size_runs_the_recipes_own_layout_with_cp_folded_into_dp(host):
    seventy = recipe(host, "llama31", "70b", "h100", "fp8", 64)
    layout, ga, warnings = torch_engine_layout(seventy, 64)
    assert layout == ParallelLayout(
        tp=seventy.tp,
        pp=seventy.pp,
        cp=1,
        ep=1,
        vp=seventy.vp,
        fsdp=seventy.fsdp,
        sequence_parallel=seventy.tp > 1,
        recompute_layers=seventy.recompute_layers,
    )
    assert seventy.cp == 1 and ga == seventy.ga and warnings == []
    assert layout.dp(64) == seventy.dp
    eight = recipe(host, "llama31", "8b", "h100", "bf16", 8)
    assert eight.cp == 2  # the published row: TP 1, CP 2, DP 4
    layout, ga, warnings = torch_engine_layout(eight, 8)
    assert layout.cp == 1 and layout.dp(8) == 2 * eight.dp
    assert eight.mbs * ga * layout.dp(8) == eight.gbs and ga == eight.ga // 2
    assert "CP 2 runs as data parallelism" in warnings[0]


def test_proxies_run_where_they_can(host):
    fp8 = recipe(host, "llama31", "8b", "h100", "fp8", 2, any_scale=True)
    assert check_machine(fp8, RunOptions(proxy="tiny"), LAPTOP, 2)[0] == "cpu"
    assert check_machine(fp8, RunOptions(layers=2), GPU_BOX, 2)[0] == "cuda"
    with pytest.raises(UsageError, match="at most 4"):
        check_machine(fp8, RunOptions(proxy="tiny"), LAPTOP, 5)


def test_precision_actually_computed_is_recorded_with_a_warning():
    assert compute_dtype("cuda", "bf16") == ("bfloat16", [])
    dtype, warnings = compute_dtype("cuda", "nvfp4")
    assert (
        dtype == "bfloat16"
        and "Transformer Engine's nvfp4 layers" in warnings[0]
        and "else in bfloat16" in warnings[0]
    )
    dtype, warnings = compute_dtype("cuda", "fp8")
    # the job decides, by the GPU it finds
    assert dtype == "bfloat16" and "torchao float8" in warnings[0]
    assert compute_dtype("cpu", "fp8")[0] == "float32"
    assert "computed in float32" in compute_dtype("cpu", "bf16")[1][0]


def test_proxy_takes_the_seed_recipe_at_its_smallest_scale(host):
    r = recipe(host, "nemotron4", None, "gb200", "bf16", 2, any_scale=True, strong_scaling=True)
    assert (r.gpus, r.gbs, r.ga) == (128, 512, 128)
    # the engine keeps MBS and GA, data parallel over 2 ranks
    assert engine_layout(r, 2) == (1, 128, 256)
    with pytest.raises(UsageError):
        # not a proxy: refused
        recipe(host, "nemotron4", None, "gb200", "bf16", 2, strong_scaling=True)


def test_layers_proxy_keeps_the_width_and_cuts_the_depth(host):
    r = recipe(host, "nemotronh", None, "h100", "fp8", 2, any_scale=True)
    full = host.workload("nemotronh").architecture(r.size)
    arch, seq_len = proxy_arch(host.workload("nemotronh"), r, RunOptions(layers=4))
    assert (arch.hidden, arch.ffn, arch.heads, arch.vocab) == (
        full.hidden,
        full.ffn,
        full.heads,
        full.vocab,
    )
    assert (
        arch.layers == 4 and arch.layer_pattern == full.layer_pattern[:4] and seq_len == r.seq_len
    )
    assert arch.size == f"{r.size}-layers4"  # labelled as a proxy wherever it is reported
    with pytest.raises(UsageError, match=f"use 1 to {full.layers}"):
        proxy_arch(host.workload("nemotronh"), r, RunOptions(layers=full.layers + 1))
    with pytest.raises(UsageError, match="each reduce the run; give one of them"):
        proxy_arch(host.workload("nemotronh"), r, RunOptions(layers=2, proxy="tiny"))


def test_tiny_keeps_each_familys_structure(host):
    for workload in host.workloads().values():
        for arch in workload.architectures.values():
            tiny = shrink(arch, "tiny")
            assert tiny.heads // tiny.query_groups == arch.heads // arch.query_groups  # GQA ratio
            assert tiny.gated == arch.gated and tiny.norm == arch.norm
            # top-k is kept, but where routing is limited to groups: then it is what the kept groups of the
            # proxy's 8 experts hold, and the grouping itself is kept (DeepSeek-V3's 8 groups, 4 kept)
            eligible = (
                tiny.topk_groups * tiny.experts // tiny.expert_groups
                if arch.expert_groups > 1
                else tiny.experts
            )
            assert (tiny.topk, bool(tiny.shared_expert_ffn), tiny.moe_layer_step) == (
                min(arch.topk, eligible) if arch.expert_groups > 1 else arch.topk,
                bool(arch.shared_expert_ffn),
                arch.moe_layer_step,
            )
            if arch.expert_groups > 1:
                assert 1 < tiny.expert_groups and tiny.topk_groups < tiny.expert_groups
                assert tiny.topk > 1 and tiny.router_score == arch.router_score
            assert count_params(tiny).total < 5e6
            if arch.layer_pattern:
                assert set(tiny.layer_pattern) == set(arch.layer_pattern)
                assert arch.layer_pattern.startswith(tiny.layer_pattern)
            if arch.moe_layer_step:  # every layer kind of the model: dense and MoE, or MoE only
                assert set(tiny.layer_kinds()) == set(arch.layer_kinds())
    with pytest.raises(UsageError, match="unknown --proxy 'huge'; valid: tiny"):
        shrink(host.workload("llama31").architecture("8b"), "huge")


def test_profile_window_flags_then_launch_script_then_readme_spellings():
    assert profile_window(None, None, {}) == (45, 50)
    # Nothing asked: each workload profiles its seed's window; asking for 45-50 is asking.
    assert asked_window(None, None, {}) is None and asked_window(45, 50, {}) == (45, 50)
    assert asked_window(None, None, {"PROFILE_STOP_STEP": "48"}) == (45, 48)
    assert profile_window(
        None, None, {"RUN_CONF_PROFILE_START_STEP": "20", "RUN_CONF_PROFILE_STOP_STEP": "25"}
    ) == (20, 25)
    env = {"PROFILE_START_STEP": "30", "RUN_CONF_PROFILE_START_STEP": "20"}
    assert profile_window(None, 40, env) == (30, 40)
    assert profile_window(5, None, env) == (5, 50)
    with pytest.raises(UsageError):
        profile_window(None, None, {"PROFILE_START_STEP": "soon"})
    with pytest.raises(UsageError):
        profile_window(9, 3, {})


def test_profilers_contribute(monkeypatch, tmp_path):
    base = dict(
        profile=True,
        gpu_metrics=True,
        nccl_trace=False,
        start=45,
        stop=50,
        job_id="local-1",
        inner_dir=str(tmp_path),
    )
    monkeypatch.setattr(
        "shutil.which", lambda name: "/opt/nsys/bin/nsys" if name == "nsys" else None
    )
    gpu = llmb_profile(ProfileRequest(device="cuda", **base))
    assert gpu.name == "nsys" and gpu.wrapper[:2] == ("/opt/nsys/bin/nsys", "profile")
    assert "--gpu-metrics-devices=all" in gpu.wrapper and gpu.wrapper[-2].endswith(
        "profile_local-1_0_{rank}"
    )
    cpu = llmb_profile(ProfileRequest(device="cpu", **base))
    assert cpu.engine["kind"] == "torch" and "ignored" in cpu.note
    trace = nccl_trace(
        ProfileRequest(device="cuda", **{**base, "profile": False, "nccl_trace": True})
    )
    assert trace.env == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "COLL"} and trace.max_steps == 5


def test_checkpoints_go_where_the_seeds_put_them(tmp_path):
    mb, fmt = checkpoint_dirs(
        RunOptions(checkpoint_save=True), "megatron_bridge", "/x/exp", 50, 128
    )
    assert (mb, fmt) == (
        "/x/exp/code/nemo_experiments/default/checkpoints/iter_0000050",
        "megatron",
    )
    nemo, fmt = checkpoint_dirs(
        RunOptions(checkpoint_save=True, checkpoint_dir="/ckpt"), "nemo2", "/x", 50, 128
    )
    assert (nemo, fmt) == (
        "/ckpt/default--None=0.0000-epoch=0-consumed_samples=6400.0/weights",
        "nemo",
    )
    assert checkpoint_dirs(RunOptions(), "nemo2", "/x", 50, 1) == (None, "nemo")


def _dry_run(llmb_proc, *args):
    return llmb_proc(
        "run",
        *args,
        "--engine",
        "torch",
        "--backend",
        "slurm",
        "--bare",
        "--dry-run",
        "--json",
        env={"SBATCH_GRES": "none"},
    )


def test_a_full_size_torch_engine_run_carries_the_recipes_layout(llmb_proc):
    result = _dry_run(
        llmb_proc, "llama31", "--size", "70b", "--gpu", "h100", "--dtype", "fp8", "--gpus", "64"
    )
    assert result.code == 0, result.err
    spec = json.loads(result.out)["run_spec"]
    assert spec["layout"] == {
        "tp": 4,
        "pp": 8,
        "cp": 1,
        "ep": 1,
        "vp": 5,
        "fsdp": False,
        "sequence_parallel": True,
        "recompute_layers": 0,
    }
    # DP 2 = 64 / (TP 4 x PP 8)
    assert (spec["ranks"], spec["mbs"], spec["ga"], spec["gbs"]) == (64, 1, 64, 128)

    result = _dry_run(
        llmb_proc, "llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8"
    )
    assert result.code == 0, result.err
    shown = json.loads(result.out)
    assert shown["run_spec"]["layout"]["cp"] == 1
    said = result.err + " ".join(shown["warnings"])
    assert "CP 2 runs as data parallelism" in said
    # whole 8192-token sequences per GPU: the estimate of the folded layout, beside the row's own
    assert re.search(
        r"with CP run as DP the memory estimate is [\d.]+ GiB per GPU \(the row as published: [\d.]+ GiB; "
        r"the h100 has 80 GiB\)",
        said,
    )

    proxy = _dry_run(
        llmb_proc,
        "llama31",
        "--size",
        "70b",
        "--gpu",
        "h100",
        "--dtype",
        "fp8",
        "--gpus",
        "2",
        "--proxy",
        "tiny",
    )
    assert proxy.code == 0, proxy.err
    # a proxy stays data parallel over its ranks
    assert json.loads(proxy.out)["run_spec"]["layout"]["tp"] == 1


def test_llama4_runs_its_expert_and_tensor_parallel_layout_and_says_what_differs(llmb_proc):
    result = _dry_run(
        llmb_proc, "llama4", "--size", "400b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "512"
    )
    assert result.code == 0, result.err
    shown = json.loads(result.out)
    layout = shown["run_spec"]["layout"]
    assert (layout["tp"], layout["ep"], layout["sequence_parallel"]) == (4, 128, True)
    assert "ETP 4 runs each expert whole on every TP rank" in result.err + " ".join(
        shown["warnings"]
    )


def test_a_cp_row_whose_batch_does_not_split_over_the_folded_dp_is_refused(host):
    from dataclasses import replace

    eight = recipe(host, "llama31", "8b", "h100", "bf16", 8)
    with pytest.raises(UsageError, match="GBS 36 does not split into MBS 1 x DP 8"):
        torch_engine_layout(replace(eight, gbs=36), 8)


def test_the_folded_layouts_memory_estimate_holds_whole_sequences(host):
    from llmb.lifecycle.prepare import folded_memory_note
    from llmb.recipes.planning import make_plan
    from llmb.recipes.records import RecipeRequest

    plan = make_plan(host, RecipeRequest("llama31", "8b", "h100", "bf16", 8))
    layout, ga, _ = torch_engine_layout(plan.recipe, 8)
    note = folded_memory_note(plan, layout, ga, 8)
    found = re.search(
        r"estimate is ([\d.]+) GiB per GPU \(the row as published: ([\d.]+) GiB", note
    )
    folded, published = (float(x) for x in found.groups())
    assert published == pytest.approx(plan.memory.total_gb, abs=0.05)
    assert folded > published  # CP 2 split each sequence's activations over two GPUs; DP does not
