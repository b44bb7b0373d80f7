"""Inputs an attacker or a careless user gives llmb, and what llmb must do
with them: environment variable names that would run code in the sbatch
script, backend credentials passed as job variables."""

from __future__ import annotations

import re

import pytest
from llmb.cli.run_options import parameter_names
from llmb.env_names import is_env_name
from llmb.errors import UsageError
from llmb.sweeps import tasks_from_file
from llmb.workload_file import workload_from_dict
from workload_dicts import minimal_workload

INJECTIONS = ["A$(id>{marker})B", "A`id>{marker}`B", "A;id>{marker};B", "A B", "1A", "A-B", "", "A\nB", "A=B",
              "A${IFS}B", "Ä"]


@pytest.mark.parametrize("name", [n for n in INJECTIONS if n and "=" not in n])  # those are not NAME=VALUE at all
def test_an_env_name_that_is_not_a_shell_identifier_is_refused_by_run(cli, tmp_path, name):
    marker = tmp_path / "ran"
    name = name.replace("{marker}", str(marker))
    for backend in ("slurm", "local"):
        result = cli("run", "llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8",
                     "--backend", backend, "--dry-run", "--env", f"{name}=1")
        assert result.code == 2, result.out
        assert "not a valid environment variable name" in result.err and "Traceback" not in result.err
    assert not marker.exists()


def test_the_attack_from_the_report_writes_no_script(cli, tmp_path):
    marker = tmp_path / "x"
    result = cli("run", "llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8",
                 "--backend", "slurm", "--dry-run", "--json", "--env", f"A$(id>{marker})B=1")
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
    with pytest.raises(UsageError, match=re.escape(f"llama31_8b: env key {key!r} is not a valid environment variable")):
        tasks_from_file(str(path), host.workloads(), parameter_names())


def test_a_plugins_production_rule_env_name_is_checked():
    raw = minimal_workload("mini")
    raw["variants"][0]["production"] = {"recipes": {"1b": "mini_1b"}, "rules": [
        {"match": {"gpu": "h100"}, "env": {"X$(reboot)": "1"}, "why": "test"}]}
    with pytest.raises(ValueError, match=re.escape("rule env name 'X$(reboot)' is not a valid environment variable")):
        workload_from_dict(raw)


def test_a_plugin_that_adds_a_bad_name_at_run_time_is_stopped(cli, host, monkeypatch):
    """Names a plugin adds through ``Recipe.with_env`` are checked before any script is written."""
    original = host.resolve

    def resolve(request):
        return original(request).with_env(**{"BAD;NAME": "1"})

    monkeypatch.setattr(host, "resolve", resolve)
    result = cli("run", "llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8",
                 "--backend", "slurm", "--dry-run")
    assert result.code == 1 and "a plugin's environment variable 'BAD;NAME'" in result.err


@pytest.mark.parametrize("name", ["HF_TOKEN", "APP_SECRET"])
def test_a_backend_credential_is_never_a_job_variable(cli, name):
    for backend in ("slurm", "local"):
        result = cli("run", "llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8",
                     "--backend", backend, "--dry-run", "--env", f"{name}=s3cr3t-value")
        assert result.code == 2 and f"--env {name}=...: a secret would be written" in result.err
        assert "s3cr3t-value" not in result.err + result.out
