"""The per-row environment and core binding of the upstream launchers
(backends/slurm/.../launch.yaml ``row_env``, ``keep``, ``core_pinning``): every
entry names the upstream line it comes from, and real Slurm dry runs of real
rows get exactly the variables those lines give them.

The quotes were read from NVIDIA-NeMo/Megatron-Bridge, NVIDIA/NeMo and
NVIDIA/dgxc-benchmarking at the commits named; this test checks that each
entry is complete and that its quote is the line that does what the entry does
(sets, removes or keeps the variable, or the binding option)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from llmb.errors import UsageError
from llmb.lifecycle.submit import submit_run
from llmb.recipes.records import RecipeRequest
from llmb.runs.runspec import RunOptions
from llmb_backend_slurm import launch_settings
from llmb_backend_slurm.backend import SlurmBackend
from llmb_backend_slurm.launch_settings import Binding
from test_slurm_launch_parity import NewerSlurm

CUDNN_NORM = ("NVTE_NORM_FWD_USE_CUDNN", "NVTE_NORM_BWD_USE_CUDNN")
REPOS = {"NVIDIA-NeMo/Megatron-Bridge", "NVIDIA/NeMo", "NVIDIA/dgxc-benchmarking"}
ROW_KEYS = {"framework", "workload", "size", "gpu", "recipe", "precision", "min_gpus"}


def data() -> dict:
    return launch_settings.reference()


def check_source(source: dict, *words: str) -> None:
    assert set(source) == {"repo", "commit", "path", "line", "quote"}, source
    assert source["repo"] in REPOS, source
    assert re.fullmatch(r"[0-9a-f]{40}", source["commit"]), source
    assert (
        source["path"] and not source["path"].startswith("/") and isinstance(source["line"], int)
    ), source
    assert source["line"] > 0 and "\n" not in source["quote"], source
    for word in words:
        assert word in source["quote"], (word, source)


def test_every_per_row_entry_names_its_upstream_line():
    rules = data()["row_env"]
    assert rules
    for rule in rules:
        assert set(rule["when"]) <= ROW_KEYS and rule["when"].get("framework") in (
            "megatron_bridge",
            "nemo2",
        ), rule
        assert ("set" in rule) != ("unset" in rule), rule
        if "set" in rule:
            ((name, value),) = rule["set"].items()  # one variable per entry, one line per variable
            check_source(rule["source"], name, str(value))
        else:
            check_source(rule["source"], rule["unset"], "pop")
            assert rule["keep"] in data()["keep"], rule
    for kept in (entry for entries in data()["keep"].values() for entry in entries):
        assert set(kept["when"]) <= ROW_KEYS
        check_source(kept["source"], "del_cudnn_ln = False")
    pin = data()["core_pinning"]["b300"]
    for source in pin["sources"]:
        check_source(source)
    quotes = " ".join(source["quote"] for source in pin["sources"])
    # stride 16, two cores
    assert "SLURM_LOCALID * 16" in quotes and "SLURM_LOCALID * 16 + 1" in quotes
    assert pin["stride"] == 16 and pin["cores"] == 2
    # off unless opted in
    assert f"{pin['opt_in']}:-false" in quotes and "--enable_pct_binding" in quotes
    # never for Llama
    assert 'model_family_name == "llama" and task == "pretrain" and gpu == "b300"' in quotes
    assert pin["not_for"] == ["llama31"] and pin["frameworks"] == ["megatron_bridge"]


def test_megatron_bridge_removes_the_cudnn_norm_variables_except_on_the_rows_it_keeps():
    row = launch_settings.row_of
    kept = [
        row(
            "megatron_bridge",
            "llama31",
            "8b",
            "h100",
            8,
            {"recipe": "llama3_8b", "precision": {"name": "fp8_cs"}},
        ),
        row(
            "megatron_bridge",
            "llama31",
            "70b",
            "gb200",
            64,
            {"recipe": "llama3_70b", "precision": {"name": "bf16"}},
        ),
        row(
            "megatron_bridge",
            "llama31",
            "405b",
            "gb300",
            256,
            {"recipe": "llama31_405b", "precision": {"name": "fp8_cs"}},
        ),
    ]
    dropped = [
        row(
            "megatron_bridge",
            "llama31",
            "8b",
            "h100",
            8,
            {"recipe": "llama3_8b", "precision": {"name": "bf16"}},
        ),
        row(
            "megatron_bridge",
            "llama31",
            "70b",
            "b200",
            128,
            {"recipe": "llama3_70b", "precision": {"name": "fp8_mx"}},
        ),
        row(
            "megatron_bridge",
            "llama31",
            "405b",
            "gb300",
            256,
            {"recipe": "llama31_405b", "precision": {"name": "nvfp4"}},
        ),
    ]
    for one in kept:
        env = launch_settings.rank_env(one["gpu"], False, one)
        assert all(env[name] == "1" for name in CUDNN_NORM), one
    for one in dropped:
        env = launch_settings.rank_env(one["gpu"], False, one)
        assert not any(name in env for name in CUDNN_NORM), one
    # without a row (no per-row rules): neither
    assert not any(name in launch_settings.rank_env("h100", False) for name in CUDNN_NORM)


def test_b300_core_pinning_is_megatron_bridges_opt_in_and_never_for_llama():
    binding = launch_settings.binding
    # launch.sh lowercases it
    assert binding("b300", "qwen3", 8, "megatron_bridge", "TRUE") == Binding(4, 16, 2)
    for value in (None, "", "false", "0"):
        assert binding("b300", "qwen3", 8, "megatron_bridge", value) == Binding(4)
    assert binding("b300", "llama31", 8, "megatron_bridge", "true") == Binding(4)
    assert binding("b300", "nemotron4", 8, "nemo2", "true") == Binding(4)
    assert binding("b200", "qwen3", 8, "megatron_bridge", "true") == Binding(4)
    with pytest.raises(UsageError, match="ENABLE_PCT_BINDING='maybe': expected true or false"):
        binding("b300", "qwen3", 8, "megatron_bridge", "maybe")


# ---------------------------------------------------------------- real dry runs


@pytest.fixture
def slurm_commands_absent(monkeypatch, tmp_path):
    """No sinfo here: a dry run says what a real submission would check, and goes on."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("ENABLE_PCT_BINDING", raising=False)


def exported(cli, *row: str) -> dict[str, str]:
    result = cli("run", *row, "--backend", "slurm", "--dry-run", "--bare")
    assert result.code == 0, result.err
    return {
        line.removeprefix("export ").split("=", 1)[0]: line.split("=", 1)[1]
        for line in result.out.splitlines()
        if line.startswith("export ")
    }


def mb(size: str, gpu: str, dtype: str, gpus: int) -> tuple[str, ...]:
    return ("llama31", "--size", size, "--gpu", gpu, "--dtype", dtype, "--gpus", str(gpus))


# (row, what it gets: a value, or None for not set)
DRY_RUNS = [
    (mb("8b", "h100", "fp8", 8), {**dict.fromkeys(CUDNN_NORM, "1"), "NCCL_CTA_POLICY": "1"}),
    (mb("8b", "h100", "bf16", 8), {**dict.fromkeys(CUDNN_NORM), "NCCL_CTA_POLICY": None}),
    (
        mb("70b", "gb300", "fp8", 64),
        {**dict.fromkeys(CUDNN_NORM, "1"), "PYTORCH_CUDA_ALLOC_CONF": None},
    ),
    (mb("70b", "gb300", "nvfp4", 64), dict.fromkeys(CUDNN_NORM)),
    (mb("70b", "b200", "fp8", 128), dict.fromkeys(CUDNN_NORM)),  # FP8 runs as MXFP8 there: removed
    (
        mb("405b", "gb200", "fp8", 128),
        {
            **dict.fromkeys(CUDNN_NORM, "1"),
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
            "NCCL_GRAPH_REGISTER": "0",
        },
    ),
    (
        mb("405b", "b200", "fp8", 128),
        {
            **dict.fromkeys(CUDNN_NORM),
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
            "NCCL_GRAPH_REGISTER": "0",
        },
    ),
    (
        ("nemotron4", "--size", "340b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "256"),
        dict.fromkeys(CUDNN_NORM, "1"),
    ),  # NeMo 2's pretrain_nemotron4_340b.py
    (
        ("llama4", "--gpu", "h100", "--dtype", "bf16", "--gpus", "512"),
        dict.fromkeys(CUDNN_NORM),
    ),  # NeMo 2, none
]


@pytest.mark.parametrize(("row", "expected"), DRY_RUNS, ids=[" ".join(row) for row, _ in DRY_RUNS])
def test_a_dry_run_of_a_row_exports_its_launchers_per_row_environment(
    cli, slurm_commands_absent, row, expected
):
    env = exported(cli, *row)
    for name, value in expected.items():
        assert env.get(name) == value, (name, env.get(name))


@pytest.mark.parametrize("size", ["8b", "70b", "405b"])
def test_the_llama31_nemo2_rows_get_no_cudnn_norm(cli, slurm_commands_absent, size):
    """Their recipe's launcher (the Collection's llama3.1/llama31_utils.py, v25.04.02) sets neither."""
    gpus = {"8b": "64", "70b": "64", "405b": "1024"}[size]
    env = exported(
        cli,
        "llama31",
        "--variant",
        "nemo2",
        "--size",
        size,
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        gpus,
    )
    assert not any(name in env for name in CUDNN_NORM), env


def test_enable_pct_binding_in_the_submitting_environment_pins_no_core_for_the_rows_llmb_has(
    host, install_root, monkeypatch
):
    """ENABLE_PCT_BINDING=true: Megatron-Bridge's Llama pre-training on B300 stays unpinned (setup_experiment.py),
    and NeMo 2's launcher never pins; a bad value is refused before anything is submitted."""
    (install_root / "python").mkdir(parents=True)
    for name in (
        "HF_TOKEN",
        "SBATCH_GPUS_PER_NODE",
        "SLURM_CONF",
        "LLMB_SLURM_PYTHON",
        "ENABLE_PCT_BINDING",
    ):
        monkeypatch.delenv(name, raising=False)

    def binding_on_b300(workload, size, dtype, gpus):
        submitted = submit_run(
            host,
            RecipeRequest(workload, size, "b200", dtype, gpus, any_scale=True),
            RunOptions(),
            "slurm",
            dry_run=True,
        )
        spec = replace(submitted.spec, gpu="b300")
        return SlurmBackend(NewerSlurm("gpu:b300:8")).settings(spec, submitted.submit)["binding"]

    monkeypatch.setenv("ENABLE_PCT_BINDING", "true")
    assert binding_on_b300("llama31", "8b", "fp8", 16) == Binding(4).to_dict()
    assert binding_on_b300("nemotron4", "340b", "bf16", 128) == Binding(4).to_dict()
    monkeypatch.setenv("ENABLE_PCT_BINDING", "sometimes")
    with pytest.raises(UsageError, match="ENABLE_PCT_BINDING='sometimes'"):
        binding_on_b300("llama31", "8b", "fp8", 16)
