"""The command line as a user meets it: output, exit codes, environment
variables, and what it must not import."""

from __future__ import annotations

import json
import textwrap

import pytest

PLAN_KEYS = (
    "workload size gpu dtype gpus nodes gpus_per_node tp pp cp ep etp vp dp mbs gbs ga seq_len layers fsdp "
    "cuda_graphs model_flops_per_sample memory_gb_per_gpu warnings errata"
).split()


def test_list_shows_the_support_matrix(cli):
    result = cli("list")
    assert result.code == 0
    lines = result.out.splitlines()
    assert lines[0].split() == ["WORKLOAD", "VARIANT", "SIZE", "GPU", "DTYPES", "GPUS", "SCALING"]
    assert any(
        l.split()[:7] == ["llama31", "megatron-bridge", "8b", "b200", "fp8,nvfp4", "8-128", "weak"]
        for l in lines
    )
    assert any(
        l.split()[:7]
        == ["nemotron4", "nemo2", "340b", "gb200", "bf16,fp8", "128,256,512", "strong"]
        for l in lines
    )
    assert any(l.split()[:3] == ["llama31", "nemo2", "405b-proxy"] for l in lines)


def test_list_json_and_one_workload(cli):
    matrix = cli("list", "nemotronh", "--json").json()
    assert matrix == [
        {
            "workload": "nemotronh",
            "variant": "nemo2",
            "default_variant": True,
            "framework": "nemo2",
            "size": "56b",
            "gpu": "h100",
            "dtypes": ["fp8"],
            "scaling": "weak",
            "min_gpus": 32,
            "max_gpus": 2048,
            "tested_gpus": [32, 64, 128, 256, 512, 1024, 2048],
            "range": False,
            "gpus_per_node": 8,
            "source": "Nemotron-H 56B NeMo 2 recipe (NVIDIA LLM Benchmarking Collection, nemo:25.04.01)",
            "deprecated": None,
            # the H200 runs the H100's recipes (gpus.yaml runs_recipes_of)
            "also_run_by": ["h200"],
        }
    ]
    every = cli("list", "--json").json()
    # the workloads of llmb's plugins (plugins/deepseekv3 has two), and the example plugin
    # examples/llmb-plugin-qwen3 where it is installed
    assert {e["workload"] for e in every} - {"qwen3"} == {
        "deepseekv3",
        "gptoss",
        "kimik2",
        "llama31",
        "llama4",
        "nemotron4",
        "nemotronh",
    }
    assert sum(len(e["dtypes"]) for e in every) >= 50


def test_plan_json_has_the_documented_keys(cli):
    plan = cli(
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
    assert set(PLAN_KEYS) <= set(plan)
    assert {k: plan[k] for k in ("nodes", "gpus_per_node", "dp", "ga", "gbs", "mbs")} == {
        "nodes": 1,
        "gpus_per_node": 8,
        "dp": 8,
        "ga": 4,
        "gbs": 128,
        "mbs": 4,
    }
    assert plan["model_flops_per_sample"] == pytest.approx(4.7442e14, rel=1e-4)
    assert plan["warnings"] == [] and plan["errata"] == []


def test_plan_text_is_readable(cli):
    out = cli("plan", "llama4", "--gpu", "h100", "--dtype", "fp8", "--gpus", "512").out
    assert "llama4 400b fp8 on 512 h100 GPUs (64 nodes x 8)" in out
    assert "DP 128 = GPUs/(TP*PP*CP)" in out and "GA 8 = GBS/(MBS*DP)" in out
    assert "expected     step 3.855 s, 2,176,574 tokens/s, MFU 23.4%" in out
    assert "CUDA graphs on" in out


def test_seed_environment_variables_are_defaults_and_flags_win(llmb_proc):
    env = {"MODEL_SIZE": "70b", "DTYPE": "nvfp4", "GPU_TYPE": "gb200", "JOB_TOTAL_GPUS": "64"}
    plan = llmb_proc("plan", "llama31", "--json", env=env).json()
    assert (plan["size"], plan["dtype"], plan["gpu"], plan["gpus"]) == ("70b", "nvfp4", "gb200", 64)
    plan = llmb_proc("plan", "llama31", "--json", "--gpus", "128", "--dtype", "fp8", env=env).json()
    assert (plan["gpus"], plan["dtype"]) == (128, "fp8")
    strong = llmb_proc(
        "plan",
        "nemotron4",
        "--json",
        env={"STRONG_SCALING": "true", "GPU_TYPE": "b200", "JOB_TOTAL_GPUS": "256"},
    ).json()
    assert (strong["scaling"], strong["gbs"], strong["ga"]) == ("strong", 512, 64)
    bad = llmb_proc("plan", "llama31", env={"JOB_TOTAL_GPUS": "many"})
    assert bad.code == 2 and "JOB_TOTAL_GPUS" in bad.err and "Traceback" not in bad.err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["plan", "nosuch"],
            "unknown workload 'nosuch'; installed workloads: deepseekv3, gptoss, kimik2, llama31, "
            "llama4, nemotron4, nemotronh",
        ),
        (
            ["plan", "llama31", "--size", "9b", "--gpu", "h100", "--gpus", "8"],
            "valid sizes: 8b, 70b, 405b",
        ),
        (
            ["plan", "llama31", "--size", "8b", "--gpu", "tpu", "--gpus", "8"],
            "valid GPU types: h100, h200, b200, gb200, gb300",
        ),
        (
            ["plan", "llama31", "--size", "8b", "--gpu", "h100", "--dtype", "int8", "--gpus", "8"],
            "valid dtypes: bf16, fp8",
        ),
        (
            ["plan", "llama31", "--size", "8b", "--gpu", "h100", "--dtype", "fp8", "--gpus", "12"],
            "whole number of 8-GPU nodes",
        ),
        (["plan", "nemotronh", "--gpus", "8", "--set", "tp"], "malformed --set 'tp'"),
        (["plan", "nemotronh", "--gpus", "64", "--set", "gbs=lots"], "bad --set gbs='lots'"),
        (["plan", "nemotronh", "--gpus", "64", "--set", "ga=2"], "cannot --set ga: GA is derived"),
        (["list", "nosuch"], "unknown workload 'nosuch'"),
        (
            ["plan", "nemotronh", "--gpus", "-8"],
            "--gpus must be a number of GPUs from 1 to 131,072",
        ),
        (["frobnicate"], "No such command 'frobnicate'"),
    ],
)
def test_bad_input_exits_2_with_one_paragraph_and_no_traceback(llmb_proc, args, needle):
    result = llmb_proc(*args)
    assert result.code == 2, result
    assert needle in result.err
    assert "Traceback" not in result.err and result.out == ""


def test_light_commands_import_no_framework(llmb_proc, tmp_path):
    """Tripwire packages that kill the process if anything imports them."""
    for name in (
        "torch",
        "megatron",
        "nemo",
        "transformer_engine",
        "nemo_run",
        "lightning",
        "matplotlib",
    ):
        package = tmp_path / name
        package.mkdir()
        (package / "__init__.py").write_text(
            textwrap.dedent(f"""
            import os, sys
            sys.stderr.write("TRIPWIRE: {name} was imported\\n")
            os._exit(97)
        """)
        )
    env = {"PYTHONPATH": str(tmp_path)}
    env["LLMB_INSTALL"] = str(tmp_path / "install")
    for args in (
        ["--help"],
        ["list"],
        ["plugins"],
        ["plan", "nemotronh", "--gpus", "64"],
        ["run", "--help"],
        ["status"],
        ["results"],
        ["install", "--help"],
        ["sweep", "--help"],
        ["report", "--help"],
        ["archive", "--help"],
    ):
        result = llmb_proc(*args, env=env)
        assert result.code == 0, (args, result.err)
        assert "TRIPWIRE" not in result.err


def test_plugins_lists_distributions_and_versions(llmb_proc):
    plugins = {p["name"]: p for p in json.loads(llmb_proc("plugins", "--json").out)}
    for name in ("llama31", "llama4", "nemotron4", "nemotronh"):
        assert plugins[name]["distribution"] == f"llmb-plugin-{name}"
        assert plugins[name]["version"] == "0.1.0"
        assert plugins[name]["status"] == "loaded"
        assert plugins[name]["workloads"] == [name]


def test_version_and_help(llmb_proc):
    assert llmb_proc("--version").out.strip() == "llmb, version 0.1.0"
    out = llmb_proc("--help").out
    for command in ("list", "plan", "plugins"):
        assert command in out
