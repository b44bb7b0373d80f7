"""Inputs an attacker or a careless user gives llmb, and what llmb must do
with them: environment variable names that would run code in the sbatch
script, backend credentials passed as job variables."""

from __future__ import annotations

import re

import pytest
from llmb.cli.run_options import parameter_names
from llmb.env_names import is_env_name
from llmb.errors import UsageError
from llmb.recipes.workload_file import workload_from_dict
from llmb.runs.sweeps import tasks_from_file
from workload_dicts import minimal_workload

INJECTIONS = [
    "A$(id>{marker})B",
    "A`id>{marker}`B",
    "A;id>{marker};B",
    "A B",
    "1A",
    "A-B",
    "",
    "A\nB",
    "A=B",
    "A${IFS}B",
    "Ä",
]


# those are not NAME=VALUE at all
@pytest.mark.parametrize("name", [n for n in INJECTIONS if n and "=" not in n])
def test_an_env_name_that_is_not_a_shell_identifier_is_refused_by_run(cli, tmp_path, name):
    marker = tmp_path / "ran"
    name = name.replace("{marker}", str(marker))
    for backend in ("slurm", "local"):
        result = cli(
            "run",
            "llama31",
            "--size",
            "8b",
            "--gpu",
            "h100",
            "--dtype",
            "bf16",
            "--gpus",
            "8",
            "--backend",
            backend,
            "--dry-run",
            "--env",
            f"{name}=1",
        )
        assert result.code == 2, result.out
        assert (
            "not a valid environment variable name" in result.err and "Traceback" not in result.err
        )
    assert not marker.exists()


def test_the_attack_from_the_report_writes_no_script(cli, tmp_path):
    marker = tmp_path / "x"
    result = cli(
        "run",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        "8",
        "--backend",
        "slurm",
        "--dry-run",
        "--json",
        "--env",
        f"A$(id>{marker})B=1",
    )
    assert result.code == 2 and result.out == ""
    assert "--env 'A$(id>" in result.err and "letters, digits and underscores" in result.err
    assert not marker.exists()


def test_valid_names_pass_the_shared_check():
    for name in ("NCCL_DEBUG", "_X", "a1", "TP_COMM_OVERLAP"):
        assert is_env_name(name)
    for name in INJECTIONS:
        assert not is_env_name(name)
    assert not is_env_name(None) and not is_env_name(3)


@pytest.mark.parametrize("key", ["A$(id)B", "A=B", "X Y"])
def test_a_sweep_files_env_key_is_checked(host, tmp_path, key):
    path = tmp_path / "sweep.yaml"
    path.write_text(f"llama31_8b:\n  scales: [8]\n  gpu: h100\n  env: {{'{key}': 1}}\n")
    with pytest.raises(
        UsageError,
        match=re.escape(f"llama31_8b: env key {key!r} is not a valid environment variable"),
    ):
        tasks_from_file(str(path), host.workloads(), parameter_names())


def test_a_plugins_production_rule_env_name_is_checked():
    raw = minimal_workload("mini")
    raw["variants"][0]["production"] = {
        "recipes": {"1b": "mini_1b"},
        "rules": [{"match": {"gpu": "h100"}, "env": {"X$(reboot)": "1"}, "why": "test"}],
    }
    with pytest.raises(
        ValueError,
        match=re.escape("rule env name 'X$(reboot)' is not a valid environment variable"),
    ):
        workload_from_dict(raw)


def test_a_plugin_that_adds_a_bad_name_at_run_time_is_stopped(cli, host, monkeypatch):
    """Names a plugin adds through ``Recipe.with_env`` are checked before any script is written."""
    original = host.resolve

    def resolve(request):
        return original(request).with_env(**{"BAD;NAME": "1"})

    monkeypatch.setattr(host, "resolve", resolve)
    result = cli(
        "run",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        "8",
        "--backend",
        "slurm",
        "--dry-run",
    )
    assert result.code == 1 and "a plugin's environment variable 'BAD;NAME'" in result.err


@pytest.mark.parametrize("name", ["HF_TOKEN", "APP_SECRET"])
def test_a_backend_credential_is_never_a_job_variable(cli, name):
    for backend in ("slurm", "local"):
        result = cli(
            "run",
            "llama31",
            "--size",
            "8b",
            "--gpu",
            "h100",
            "--dtype",
            "bf16",
            "--gpus",
            "8",
            "--backend",
            backend,
            "--dry-run",
            "--env",
            f"{name}=s3cr3t-value",
        )
        assert result.code == 2 and f"--env {name}=...: a secret would be written" in result.err
        assert "s3cr3t-value" not in result.err + result.out


@pytest.mark.parametrize("gpus", ["100000000000000000000", "131073", "0", "-8"])
def test_gpu_counts_are_bounded(cli, gpus):
    for command in (("plan",), ("run", "--dry-run")):
        result = cli(
            *command, "llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", gpus
        )
        assert result.code == 2 and "from 1 to 131,072" in result.err, result.err
    swept = cli(
        "sweep",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        gpus,
        "--dry-run",
    )
    assert swept.code == 2 and "Traceback" not in swept.err


def test_gpus_per_node_is_bounded(cli):
    result = cli(
        "plan",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        "8",
        "--gpus-per-node",
        "100000000000000000000",
    )
    assert result.code == 2 and "--gpus-per-node" in result.err


def test_an_install_path_that_is_a_file_is_refused(llmb_proc, tmp_path):
    a_file = tmp_path / "hostname"
    a_file.write_text("node1\n")
    for args in (("status",), ("results",), ("archive",)):
        result = llmb_proc(*args, env={"LLMB_INSTALL": str(a_file)})
        assert result.code == 2 and f"LLMB_INSTALL={a_file} is not a directory" in result.err, (
            args,
            result.err,
        )
    assert a_file.read_text() == "node1\n"


def test_archive_never_invents_the_output_directory(llmb_proc, tmp_path):
    (tmp_path / "exp" / "run").mkdir(parents=True)
    (tmp_path / "exp" / "run" / "log-x.out").write_text("x\n")
    target = tmp_path / "nonexistent" / "dir" / "x.tar.gz"
    result = llmb_proc("archive", str(tmp_path / "exp"), "-o", str(target))
    assert result.code == 2 and "does not exist; create it first" in result.err
    assert not (tmp_path / "nonexistent").exists()
    ok = llmb_proc("archive", str(tmp_path / "exp"), "-o", str(tmp_path / "x.tar.gz"))
    assert ok.code == 0 and (tmp_path / "x.tar.gz").is_file()
