"""What ``llmb plan`` says beyond the layout (issue 22), in its text and in ``--json``, with real recipes:
which FLOPs count TFLOP/s/GPU and MFU are on, recompute and offload, a VP without a pipeline dropped once
for plan, run and experiment name, tokens/s computed where only a step time is published, and what
``--proxy tiny`` runs and changes (the same list ``llmb run --proxy`` warns with, once)."""

from __future__ import annotations

import json
import os
import re

import pytest
from llmb.figures import figure
from llmb.recipes.flops import megatron_bridge_step
from llmb.recipes.records import RecipeRequest

LLAMA31_8B = ("llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8")
LLAMA4_H100 = ("llama4", "--gpu", "h100", "--dtype", "bf16", "--gpus", "512")
NEMOTRON4_H100 = (
    "nemotron4",
    "--size",
    "340b",
    "--gpu",
    "h100",
    "--dtype",
    "bf16",
    "--gpus",
    "256",
)


@pytest.fixture(autouse=True)
def _no_gpu_and_no_width(monkeypatch):
    """The proxy's device is this machine's: CPU here, whatever GPUs the test machine has; no wrapping."""
    monkeypatch.setenv("LLMB_FORCE_CPU", "1")
    monkeypatch.delenv("COLUMNS", raising=False)


def plan(cli, *args):
    result = cli("plan", *args)
    assert result.code == 0, result.err
    return result.out


def plan_json(cli, *args):
    return json.loads(plan(cli, *args, "--json"))


# ---------------------------------------------------------------- 1. which FLOPs count


def test_the_plan_says_which_flops_count_tflops_and_mfu_are_on_and_the_others_ratio(cli, host):
    shown = plan_json(cli, *LLAMA31_8B)
    workload = host.workload("llama31")
    recipe = host.resolve(RecipeRequest("llama31", "8b", "h100", "bf16", 8))
    arch = workload.architecture("8b")
    formula = host.model_flops(workload, arch, recipe.seq_len).per_sample * recipe.gbs
    ratio = megatron_bridge_step(arch, recipe.seq_len, recipe.gbs, recipe.tp) / formula
    # causal attention: Megatron-Bridge counts 11% fewer FLOPs at 8192 tokens
    assert 0.88 < ratio < 0.89
    assert shown["megatron_bridge_to_workload_formula"] == round(ratio, 4)
    # The torch engine logs MODEL_TFLOP/s/GPU on the workload's formula; Megatron-Bridge logs its own count,
    # which the Llama 3.1 Megatron-Bridge recipe divides by the peak for its MFU (mfu_from: log).
    assert shown["flops_used"] == {
        "torch": {
            "tflops_per_gpu": "workload_formula",
            "mfu": "workload_formula",
            "tflops_computed": False,
        },
        "megatron_bridge": {
            "tflops_per_gpu": "megatron_bridge_count",
            "mfu": "megatron_bridge_count",
            "tflops_computed": False,
        },
    }
    text = plan(cli, *LLAMA31_8B)
    # the counts and their ratio once, under model FLOPs; which count each engine's figures are on, one
    # line each: a cluster run's first
    assert (
        f"per step by Megatron-Bridge's count (what its log's MODEL_TFLOP/s/GPU counts; GBS 128), "
        f"{figure(ratio, 2)}x the formula's" in text
    )
    used = text.split("  FLOPs used   ", 1)[1].split("\n  memory ", 1)[0].split("\n")
    assert used == [
        "on a cluster (Megatron-Bridge): TFLOP/s/GPU and MFU on Megatron-Bridge's count, as its log "
        "gives them and the published recipe computes MFU",
        "               a --proxy run here (torch engine): TFLOP/s/GPU and MFU on the workload's formula",
    ], used


def test_nemo2_runs_take_tflops_from_the_callback_and_mfu_from_the_formula(cli):
    nemotron4 = plan_json(cli, *NEMOTRON4_H100)
    assert nemotron4["flops_used"]["nemo2"] == {
        "tflops_per_gpu": "nemo2_flops_callback",
        "mfu": "workload_formula",
        "tflops_computed": False,
    }
    assert nemotron4["megatron_bridge_to_workload_formula"] == pytest.approx(0.9793, abs=1e-4)
    assert (
        "on a cluster (NeMo 2): TFLOP/s/GPU on NeMo 2's FLOPs callback (nemotron) (its log's), MFU on "
        "the workload's formula" in plan(cli, *NEMOTRON4_H100)
    )
    # Nemotron-H's logged TFLOPS are invalid: llmb computes both from the formula; no Megatron-Bridge count
    args = ("nemotronh", "--size", "56b", "--gpu", "h100", "--dtype", "fp8", "--gpus", "256")
    hybrid = plan_json(cli, *args)
    assert hybrid["flops_used"]["nemo2"] == {
        "tflops_per_gpu": "workload_formula",
        "mfu": "workload_formula",
        "tflops_computed": True,
    }
    assert hybrid["megatron_bridge_to_workload_formula"] is None
    assert (
        "TFLOP/s/GPU and MFU on the workload's formula, computed: the TFLOP/s its log gives are not valid"
        in plan(cli, *args)
    )


# ---------------------------------------------------------------- 2. recompute and offload


def test_recompute_and_offload_are_shown_as_the_frameworks_are_told_them(cli):
    assert "               recompute: none; offload: none\n" in plan(cli, *LLAMA31_8B)
    none = plan_json(cli, *LLAMA31_8B)
    assert (
        none["recompute"],
        none["offload"],
        none["recompute_layers"],
        none["offload_layers"],
    ) == (None, None, 0, 0)

    # erratum: MBS 1, recompute 5
    fp8 = ("llama31", "--size", "8b", "--gpu", "h100", "--dtype", "fp8", "--gpus", "8")
    assert "recompute 5 layers (full, block method); offload: none" in plan(cli, *fp8)
    assert plan_json(cli, *fp8)["recompute"] == {
        "layers": 5,
        "granularity": "full",
        "method": "block",
    }

    # FSDP, offload 20
    gb300 = ("llama31", "--size", "70b", "--gpu", "gb300", "--dtype", "fp8", "--gpus", "64")
    shown = plan_json(cli, *gb300)
    assert shown["offload"] == {"layers": 20, "what": "activations", "engines": ["production"]}
    assert shown["offload_layers"] == 20 and shown["recompute"] is None
    assert "recompute: none; CPU offload of 20 layers' activations" in plan(cli, *gb300)

    asked = plan_json(cli, *LLAMA31_8B, "--set", "recompute_layers=4", "--set", "offload_layers=2")
    assert (asked["recompute"]["layers"], asked["offload"]["layers"]) == (4, 2)


# ---------------------------------------------------------------- 3. VP only where it applies


def test_a_vp_without_a_pipeline_is_dropped_for_plan_run_and_name(cli, host, llmb_proc):
    text = plan(cli, *LLAMA4_H100)
    assert "  parallelism  TP 4  PP 1  CP 1  EP 128  ETP 4  VP -  ->" in text
    assert "  adjusted     VP 12 dropped: with PP 1 there is no pipeline to interleave" in text
    shown = plan_json(cli, *LLAMA4_H100)
    assert (shown["pp"], shown["vp"]) == (1, None)
    assert any(a.startswith("VP 12 dropped") for a in shown["adjustments"])
    assert host.resolve(RecipeRequest("llama4", "400b", "h100", "fp8", 512)).vp is None
    # a real pipeline keeps its VP (Nemotron-4 on H100: PP 8, VP 12)
    assert plan_json(cli, *NEMOTRON4_H100)["vp"] == 12
    assert "VP 12  ->" in plan(cli, *NEMOTRON4_H100)

    result = llmb_proc(
        "run",
        *LLAMA4_H100,
        "--backend",
        "slurm",
        "--bare",
        "--dry-run",
        "--json",
        env={"SBATCH_GRES": "none"},
    )
    assert result.code == 0, result.err
    spec = json.loads(result.out)["run_spec"]
    assert (
        spec["experiment"]
        == "pretrain_llama4_400b_bf16_gpus512_tp4_pp1_cp1_vpNone_ep128_mbs1_gbs1024"
    )
    assert spec["framework_config"]["parallelism"]["vp"] is None


# ---------------------------------------------------------------- 4. tokens/s from a published step time


def test_tokens_per_s_and_days_are_computed_where_only_a_step_time_is_published(cli, host):
    # Nemotron-4's only H100 figure is its MFU example: 256 GPUs, GBS 64, 4096 tokens, 4.31 s a step.
    tokens = 4096 * 64 / 4.31
    assert round(tokens) == 60822
    expected = plan_json(cli, *NEMOTRON4_H100)["expected"]
    assert expected["tokens_per_s"] == pytest.approx(tokens)
    assert expected["days_1t"] == pytest.approx(1e12 / tokens / 86400)
    assert expected["computed"] == ["tokens_per_s", "days_1t"]
    text = plan(cli, *NEMOTRON4_H100)
    assert (
        "  expected     step 4.31 s, 60,822 tokens/s, MFU 50.5%, 190.3 days per 1T tokens" in text
    )
    assert (
        "tokens/s and days computed from the published step time (sequence 4096 x GBS 64 / 4.31 s)"
        in text
    )
    # computed where shown, never written into the data: the reference keeps the document's NA
    [example] = [r for r in host.workload("nemotron4").references if r.gpu == "h100"]
    assert (example.tokens_per_s, example.days_1t) == (None, None)

    printed = plan_json(cli, *LLAMA4_H100)["expected"]
    assert (printed["tokens_per_s"], printed["days_1t"], printed["computed"]) == (
        1895847.0,
        6.1,
        [],
    )
    # a row that prints tokens/s but n/a days (a proxy's time to train means nothing) keeps its n/a
    proxy_row = plan_json(
        cli,
        "llama31",
        "--variant",
        "nemo2",
        "--size",
        "405b-proxy",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        "32",
    )["expected"]
    assert (proxy_row["tokens_per_s"], proxy_row["days_1t"], proxy_row["computed"]) == (
        97090.0,
        None,
        [],
    )


def test_a_figure_from_another_document_gets_its_tokens_per_s_too(host):
    from llmb.recipes.references import Configuration, find

    figure = find(
        host.workload("nemotron4"), Configuration(None, "340b", "gb200", "fp8", 128, "strong")
    )
    # GBS 512 fixed under strong scaling
    assert figure.tokens_per_s == pytest.approx(4096 * 512 / 21.542)


# ---------------------------------------------------------------- 5. plan --proxy


def test_plan_proxy_shows_what_the_proxy_runs_and_every_difference(cli):
    shown = plan_json(cli, *LLAMA31_8B, "--proxy", "tiny")["proxy"]
    assert (
        shown["proxy"],
        shown["engine"],
        shown["ranks"],
        shown["device"],
        shown["compute_dtype"],
    ) == ("tiny", "torch", 8, "cpu", "float32")
    assert shown["layout"] == {
        "tp": 1,
        "pp": 1,
        "cp": 1,
        "vp": None,
        "ep": 1,
        "etp": 1,
        "dp": 8,
        "mbs": 1,
        "ga": 32,
        "gbs": 256,
        "fsdp": False,
        "cuda_graphs": False,
        "recompute_layers": 0,
        "offload_layers": 0,
    }
    arch = shown["arch"]
    assert (
        arch["layers"],
        arch["hidden"],
        arch["heads"],
        arch["query_groups"],
        arch["vocab"],
        shown["seq_len"],
    ) == (4, 32, 4, 1, 512, 64)
    assert [d["text"] for d in shown["differences"]] == [
        "CP 2 -> 1",
        "DP 4 -> 8",
        "GBS 128 -> 256",
        "layers 32 -> 4",
        "hidden 4096 -> 32",
        "FFN 14,336 -> 112",
        "heads 32 -> 4",
        "query groups 8 -> 1",
        "head dim 128 -> 8",
        "vocab 128,256 -> 512",
        "sequence 8192 -> 64",
        "precision bf16 -> float32 (on CPU)",
    ]
    assert shown["differences"][0] == {
        "what": "CP",
        "published": 2,
        "proxy": 1,
        "text": "CP 2 -> 1",
    }
    assert (
        shown["experiment"]
        == "pretrain_llama31_8b_bf16_gpus8_tp1_pp1_cp1_vpNone_ep1_mbs1_gbs256_proxy-tiny"
    )
    carried = 2 * (os.cpu_count() or 1)
    assert (shown["refusal"] is not None) == (carried < 8)  # as llmb run here would

    text = plan(cli, *LLAMA31_8B, "--proxy", "tiny")
    assert (
        "CPU proxy: llmb run --proxy tiny runs a tiny model on the torch engine, 8 ranks on this machine's CPU, "
        "cut from the published recipe at 8 GPUs\n" in text
    )
    assert (
        "  parallelism  data parallel over its ranks: TP 1  PP 1  CP 1  EP 1  VP -  ->  DP 8"
        in text
    )
    assert "  batch        MBS 1  GA 32 (the recipe's)  ->  GBS 256 = MBS*GA*ranks" in text
    assert "  differs      CP 2 -> 1, DP 4 -> 8, GBS 128 -> 256, layers 32 -> 4," in text
    # when asked
    assert "\nproxy: " not in plan(cli, *LLAMA31_8B) and "proxy" not in plan_json(cli, *LLAMA31_8B)


def test_plan_proxy_of_expert_and_pipeline_rows_names_what_it_drops(cli):
    moe = plan_json(
        cli, "llama4", "--gpu", "h100", "--dtype", "fp8", "--gpus", "2", "--proxy", "tiny"
    )["proxy"]
    said = [d["text"] for d in moe["differences"]]
    for change in (
        "GPUs 512 -> 2",
        "TP 4 -> 1",
        "EP 128 -> 1",
        "ETP 4 -> 1",
        "GBS 1024 -> 16",
        "CUDA graphs on -> off",
        "layers 48 -> 4",
        "experts 128 -> 8",
        "sequence 8192 -> 64",
        "precision fp8 -> float32 (on CPU)",
    ):
        assert change in said, change
    assert moe["smallest_scale"] and moe["published_gpus"] == 512 and moe["refusal"] is None
    deep = plan_json(
        cli,
        "llama31",
        "--size",
        "405b",
        "--gpu",
        "h100",
        "--dtype",
        "fp8",
        "--gpus",
        "128",
        "--proxy",
        "tiny",
    )["proxy"]
    said = [d["text"] for d in deep["differences"]]
    for change in (
        "TP 8 -> 1",
        "PP 8 -> 1",
        "CP 2 -> 1",
        "VP 8 -> -",
        "layers 126 -> 4",
        "sequence 8192 -> 64",
    ):
        assert change in said, change
    text = plan(cli, "llama4", "--gpu", "h100", "--dtype", "fp8", "--gpus", "2", "--proxy", "tiny")
    assert "cut from the published recipe at 512 GPUs (its smallest tested scale)" in text
    assert (
        "8 experts (top-1, expert FFN 128, shared expert FFN 128, MoE in 1 of every 2 layers)"
        in text
    )

    bad = cli("plan", *LLAMA31_8B, "--proxy", "huge")
    assert bad.code == 2 and "unknown --proxy 'huge'; valid: tiny." in bad.err


# ---------------------------------------------------------------- 6. the run's proxy warning


def test_run_proxy_warns_once_with_the_plans_list_of_differences(cli, llmb_proc):
    args = (
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        "2",
        "--proxy",
        "tiny",
    )
    planned = plan_json(cli, *args)["proxy"]
    listed = ", ".join(d["text"] for d in planned["differences"])
    assert listed.startswith("GPUs 8 -> 2, CP 2 -> 1, DP 4 -> 2, GBS 128 -> 64, layers 32 -> 4")
    run = llmb_proc("run", *args, "--dry-run", env={"LLMB_FORCE_CPU": "1"})
    assert run.code == 0, run.err
    warning = (
        "llmb: warning: --proxy tiny runs the published recipe at 8 GPUs (its smallest tested scale) with "
        f"these differences: {listed}; its results are not compared with the published figures."
    )
    assert run.err.count(warning) == 1, run.err
    assert planned["warning"] == warning.removeprefix("llmb: warning: ")
    # nothing of it said twice: not the precision on its own, not the old "taken at" sentence
    assert "computed in float32" not in run.err and "is taken at" not in run.err
    assert len(re.findall(r"^llmb: warning: ", run.err, re.MULTILINE)) == 1, run.err


def test_a_proxy_sweep_does_not_repeat_the_warning_per_run(llmb_proc):
    args = (
        "sweep",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        "2",
        "--repeats",
        "3",
        "--proxy",
        "tiny",
        "--dry-run",
    )
    text = llmb_proc(*args, env={"LLMB_FORCE_CPU": "1"})
    assert text.code == 0, text.err
    assert (text.out + text.err).count("runs the published recipe at 8 GPUs") <= 1
    jobs = json.loads(llmb_proc(*args, "--json", env={"LLMB_FORCE_CPU": "1"}).out)
    assert len(jobs) == 3  # each task's own record keeps it, the same words for each
    assert (
        len({next(w for w in job["warnings"] if w.startswith("--proxy tiny runs")) for job in jobs})
        == 1
    )


# ---------------------------------------------------------------- 7. lines that wrap well


def test_plan_text_fits_the_terminal_width(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    for args in (LLAMA4_H100, NEMOTRON4_H100, (*LLAMA31_8B, "--proxy", "tiny")):
        lines = plan(cli, *args).splitlines()
        assert max(len(line) for line in lines) <= 80, [line for line in lines if len(line) > 80]
        assert any(line.startswith("               ") for line in lines)  # wrapped under the label


def test_memory_is_labelled_in_the_unit_it_is_computed_in(cli):
    """The estimate is in GiB (2^30 bytes: docs/memory-estimate.md), and says so: the plan's memory line,
    the GPU's capacity and a refusal (issue 43: they said GB)."""
    text = plan(cli, *LLAMA31_8B)
    assert re.search(r"memory       ~[\d.]+ GiB per GPU of 80 GiB \(stage 0:", text), text
    assert re.findall(r"\d GB\b", text) == [], text
    too_big = cli("run", "llama31", "--size", "8b", "--gpu", "b200", "--dtype", "nvfp4", "--gpus", "8",
                  "--dry-run")  # fmt: skip
    assert "GiB per GPU on the torch engine" in too_big.err and not re.findall(
        r"\d GB\b", too_big.err
    )
