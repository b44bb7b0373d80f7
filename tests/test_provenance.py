"""Provenance of every run (docs/provenance.md): ``provenance.json`` in the run
directory, written by ``llmb run`` (submission) and by rank 0 of the job; the
GPU type check before training; ``--dump-env``'s environment file; secrets
redacted everywhere; ``llmb results --json`` and ``llmb archive`` carry it.

nvidia-smi cannot run here: a script on PATH answers with recorded output lines
in its documented formats (``--query-gpu=name,driver_version --format=csv,noheader``
and ``-L``)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import secrets
import shlex
import socket
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from llmb.lifecycle import provenance
from llmb.recipes.gpus import catalogue
from llmb.runs import gpu_seen, job_env
from llmb.runs.runspec import RunSpec

# Lines nvidia-smi printed on real nodes (--query-gpu=name,driver_version --format=csv,noheader).
H100_NODE = "\n".join(["NVIDIA H100 80GB HBM3, 550.54.15"] * 8) + "\n"
B200_NODE = "\n".join(["NVIDIA B200, 570.86.15"] * 8) + "\n"

FAKE_SMI = """#!/bin/sh
# nvidia-smi as a node with these GPUs answers (recorded lines; see the test's module docstring)
case "$*" in
  *--query-gpu=name,driver_version*) printf '%s' {query} ;;
  *-L*) printf '%s' {listing} ;;
  *) exit 0 ;;
esac
exit {code}
"""


def fake_nvidia_smi(directory: Path, query: str, code: int = 0) -> Path:
    """A directory for PATH holding ``nvidia-smi`` that answers ``query`` (and ``-L`` alike)."""
    directory.mkdir(parents=True, exist_ok=True)
    names = [line.rpartition(",")[0].strip() for line in query.splitlines() if "," in line]
    listing = "".join(
        f"GPU {i}: {name} (UUID: GPU-{i:08d}-0000-0000-0000-000000000000)\n"
        for i, name in enumerate(names)
    )
    script = directory / "nvidia-smi"
    script.write_text(
        FAKE_SMI.format(query=shlex.quote(query), listing=shlex.quote(listing), code=code)
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return directory


# ------------------------------------------------------------------ GPU names and the check


@pytest.mark.parametrize(
    ("name", "gpu"),
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA  H100 80GB HBM3 ", "h100"),  # spacing as some drivers pad it
        ("nvidia h100 80gb hbm3", "h100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA B300 SXM6 AC", "b300"),
        ("NVIDIA GB200", "gb200"),
        ("NVIDIA GB300", "gb300"),
        # Parts llmb has no peak for, or whose peaks are not the catalogue's SXM part's: unknown.
        ("NVIDIA H100 PCIe", None),
        ("NVIDIA H100 NVL", None),
        ("NVIDIA H200 NVL", None),
        ("NVIDIA GH200 480GB", None),
        ("NVIDIA A100-SXM4-80GB", None),
        ("Tesla V100-SXM2-32GB", None),
        ("NVIDIA B2000", None),
    ],
)
def test_device_names_map_to_the_catalogues_gpu_types(name, gpu):
    assert gpu_seen.gpu_type_of(name) == gpu


def test_every_mapped_type_is_in_the_catalogue():
    assert {gpu for _, gpu in gpu_seen._patterns()} == set(catalogue())


def test_nvidia_smi_query_lines_are_read_per_gpu():
    seen = gpu_seen.parse_query(H100_NODE)
    assert seen.names == ("NVIDIA H100 80GB HBM3",) * 8 and seen.drivers == ("550.54.15",)
    assert seen.as_dict() == {
        "name": "NVIDIA H100 80GB HBM3",
        "count": 8,
        "driver": "550.54.15",
        "type": "h100",
        "source": "nvidia-smi",
    }
    mixed = gpu_seen.parse_query("NVIDIA B200, 570.86.15\nNVIDIA H100 PCIe, [N/A]\n")
    assert mixed.as_dict()["name"] == "NVIDIA B200 + NVIDIA H100 PCIe" and mixed.drivers == (
        "570.86.15",
    )
    assert mixed.as_dict()["type"] == "b200 + unknown"
    assert gpu_seen.parse_query("No devices were found\n").name == gpu_seen.NO_GPU


def test_the_check_stops_on_another_known_type_and_warns_on_an_unknown_one():
    assert gpu_seen.check("h100", gpu_seen.parse_query(H100_NODE)) == []
    with pytest.raises(gpu_seen.GpuMismatchError) as caught:
        gpu_seen.check("h100", gpu_seen.parse_query(B200_NODE))
    message = str(caught.value)
    assert "runs on NVIDIA B200 (b200) but the run was planned for h100 (--gpu h100)" in message
    # one line: the log's reason
    assert "MFU" in message and "--gpu b200" in message and "\n" not in message
    warnings = gpu_seen.check("h100", gpu_seen.parse_query("NVIDIA A100-SXM4-80GB, 535.104.05\n"))
    assert len(warnings) == 1 and "'NVIDIA A100-SXM4-80GB' is not one llmb knows" in warnings[0]
    assert gpu_seen.check("h100", gpu_seen.parse_query("")) == []  # nothing seen: nothing to check


def test_nvidia_smi_on_path_is_asked_and_a_failing_one_is_not_believed(tmp_path):
    found = gpu_seen.from_nvidia_smi({"PATH": str(fake_nvidia_smi(tmp_path / "ok", B200_NODE))})
    assert found.names == ("NVIDIA B200",) * 8 and found.drivers == ("570.86.15",)
    broken = fake_nvidia_smi(tmp_path / "broken", "NVIDIA B200, 570.86.15\n", code=9)
    assert gpu_seen.from_nvidia_smi({"PATH": str(broken)}) is None
    assert gpu_seen.from_nvidia_smi({"PATH": str(tmp_path / "empty")}) is None


# ------------------------------------------------------------------ environment and secrets


def test_secrets_are_redacted_by_name_and_masked_inside_other_values():
    environ = {
        "HF_TOKEN": "hf_abcdefgh1234",
        "MY_LOGIN": "hunter2-long",
        "AWS_SECRET_ACCESS_KEY": "aws-xyz-987",
        "NGC_API_KEY": "nvapi-123456",
        "Db_Password": "pw-abcdef",
        "URL": "https://u:hunter2-long@host/x",
        "PIN": "42",
        "OTHER": "value 42",
        "NCCL_DEBUG": "INFO",
        "HOME": "/root",
    }
    shown = job_env.redacted(environ, declared={"MY_LOGIN", "PIN"})
    for name in (
        "HF_TOKEN",
        "MY_LOGIN",
        "AWS_SECRET_ACCESS_KEY",
        "NGC_API_KEY",
        "Db_Password",
        "PIN",
    ):
        assert shown[name] == "***", name
    assert shown["URL"] == "https://u:***@host/x"  # a declared secret's value inside another value
    # too short a secret to search for: other text stays readable
    assert shown["OTHER"] == "value 42"
    assert (shown["NCCL_DEBUG"], shown["HOME"]) == ("INFO", "/root")


def test_the_relevant_environment_is_what_llmb_set_the_runtimes_prefixes_and_the_secrets_names():
    environ = {
        "NCCL_IB_HCA": "mlx5",
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "TORCH_NCCL_AVOID_RECORD_STREAMS": "1",
        "NVTE_FUSED_ATTN": "0",
        "MASTER_ADDR": "node1",
        "RANK": "0",
        "PLUGIN_SET": "x",
        "EDITOR": "vi",
        "HF_TOKEN": "hf_abcdefgh1234",
        "MY_LOGIN": "hunter2-long",
        "SSH_AUTH_KEY_PATH": "/k",
    }
    shown = job_env.relevant(environ, declared={"MY_LOGIN"}, llmb_set={"PLUGIN_SET"})
    assert set(shown) == {
        "NCCL_IB_HCA",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "TORCH_NCCL_AVOID_RECORD_STREAMS",
        "NVTE_FUSED_ATTN",
        "MASTER_ADDR",
        "RANK",
        "PLUGIN_SET",
        "HF_TOKEN",
        "MY_LOGIN",
    }
    assert shown["HF_TOKEN"] == shown["MY_LOGIN"] == "***"


def test_the_environment_dump_can_be_sourced_back():
    environ = {
        "A": "plain",
        "B": "two words; $(not run)",
        "C": "line\nbreak",
        "API_TOKEN": "tok-123456789",
    }
    text = job_env.dump_text(environ, header="first\nsecond")
    assert text.startswith("# first\n# second\n")
    back = (
        subprocess.run(
            ["bash", "-c", f'{text}\nprintf \'%s\\0\' "$A" "$B" "$C" "$API_TOKEN"'],
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")[:4]
    )
    assert back == ["plain", "two words; $(not run)", "line\nbreak", "***"]


# ------------------------------------------------------------------ the job's side, in-process


def spec_for(run_dir: Path, *, gpu: str = "h100", device: str = "cuda") -> RunSpec:
    inner = run_dir / "e"
    inner.mkdir(parents=True, exist_ok=True)
    return RunSpec(
        job_id="local-abc123",
        workload="llama31",
        variant="v",
        framework="megatron_bridge",
        engine="torch",
        size="8b",
        arch={},
        proxy="tiny",
        gpu=gpu,
        dtype="bf16",
        compute_dtype="bfloat16",
        device=device,
        ranks=2,
        mbs=1,
        ga=1,
        gbs=2,
        seq_len=64,
        steps=3,
        seed=1,
        compile=False,
        flops_per_sample=1.0,
        experiment="e",
        run_dir=str(run_dir),
        inner_dir=str(inner),
        log=str(inner / "log-e.out"),
        env={"SITE_SETTING": "1"},
    )


def test_rank_zero_records_the_job_and_each_nodes_first_rank_stops_on_the_wrong_gpu(
    tmp_path, capsys
):
    smi = fake_nvidia_smi(tmp_path / "bin", B200_NODE)
    environ = {
        "PATH": str(smi),
        "LLMB_JOB_ID": "local-abc123",
        "HF_TOKEN": "hf_abcdefgh1234",
        "NCCL_DEBUG": "WARN",
        "SITE_SETTING": "1",
        "EDITOR": "vi",
    }
    spec = spec_for(tmp_path / "run")
    with pytest.raises(gpu_seen.GpuMismatchError):
        provenance.start_job(spec, rank=0, world=2, local_rank=0, environ=environ)
    job = provenance.read(spec.run_dir)["job"]
    assert job["gpu"] == {
        "name": "NVIDIA B200",
        "count": 8,
        "driver": "570.86.15",
        "type": "b200",
        "source": "nvidia-smi",
        "requested": "h100",
        "check": "mismatch",
    }
    assert job["environment"] == {
        "HF_TOKEN": "***",
        "LLMB_JOB_ID": "local-abc123",
        "NCCL_DEBUG": "WARN",
        "SITE_SETTING": "1",
    }  # SITE_SETTING: set by llmb for the run (spec.env)
    os.remove(provenance.path_of(spec.run_dir))
    # the first rank of another node checks its node too
    with pytest.raises(gpu_seen.GpuMismatchError):
        provenance.start_job(spec, rank=8, world=16, local_rank=0, environ=environ)
    # its node's first rank checks
    provenance.start_job(spec, rank=1, world=2, local_rank=1, environ=environ)
    assert provenance.read(spec.run_dir) is None  # only rank 0 writes
    # A CPU run is not checked; its record says so.
    provenance.start_job(
        spec_for(tmp_path / "cpu", device="cpu"), rank=0, world=2, local_rank=0, environ=environ
    )
    assert (
        provenance.read(str(tmp_path / "cpu"))["job"]["gpu"]["check"]
        == "not checked: the run computes on CPU"
    )
    capsys.readouterr()


def test_an_unknown_gpu_warns_and_a_record_that_cannot_be_written_only_warns(tmp_path, capsys):
    smi = fake_nvidia_smi(tmp_path / "bin", "NVIDIA A100-SXM4-80GB, 535.104.05\n")
    spec = spec_for(tmp_path / "run")
    # a directory where the file goes: every user's write fails
    os.mkdir(provenance.path_of(spec.run_dir))
    provenance.start_job(spec, rank=0, world=1, local_rank=0, environ={"PATH": str(smi)})
    out = capsys.readouterr().out
    assert "[llmb] warning: the job's GPU 'NVIDIA A100-SXM4-80GB' is not one llmb knows" in out
    assert "[llmb] warning: could not write the run's provenance" in out
    assert sorted(os.listdir(spec.run_dir)) == ["e", "provenance.json"]  # no temporary left behind


def test_the_submission_section_is_kept_when_the_job_merges_its_own(tmp_path):
    run_dir = tmp_path / "run"
    spec = spec_for(run_dir, device="cpu")
    assert (
        provenance.write_section(
            str(run_dir), "submission", {"secret_names": ["MY_LOGIN"], "backend": "x"}
        )
        is None
    )
    provenance.start_job(
        spec,
        rank=0,
        world=1,
        local_rank=0,
        environ={"PATH": "", "MY_LOGIN": "hunter2-long", "LLMB_DUMP_ENV": "1"},
    )
    data = provenance.read(str(run_dir))
    assert data["submission"] == {"secret_names": ["MY_LOGIN"], "backend": "x"}
    # the declared secret is known to the job
    assert data["job"]["environment"]["MY_LOGIN"] == "***"
    dumped = Path(data["job"]["environment_file"])
    assert dumped == run_dir / "e" / "env-e.txt" and "MY_LOGIN='***'" in dumped.read_text()
    assert not [p for p in run_dir.rglob("*.tmp")]


def test_results_find_the_record_only_in_the_seeds_layout(tmp_path):
    spec = spec_for(tmp_path / "run")
    assert provenance.write_section(spec.run_dir, "job", {"host": "n1"}) is None
    assert provenance.of_log(spec.log) == {"job": {"host": "n1"}}
    assert provenance.of_log(str(tmp_path / "run" / "e" / "other.out")) is None  # not the run's log
    assert provenance.of_log(None) is None
    # not llmb's writing, and no JSON to pass on: NaN, Infinity, and a number no float holds
    for text in ('{"job": {"x": NaN}}', '{"x": [-Infinity]}', '{"x": 1e999}'):
        Path(provenance.path_of(spec.run_dir)).write_text(text)
        assert provenance.of_log(spec.log) is None, text
    # a string that says NaN, and a large float, are JSON
    Path(provenance.path_of(spec.run_dir)).write_text('{"x": "NaN", "y": 1e300}')
    assert provenance.of_log(spec.log) == {"x": "NaN", "y": 1e300}


# ------------------------------------------------------------------ real runs

torch_needed = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="the torch engine needs torch (./dev.sh installs torch==2.13.0)",
)
PROXY = [
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
    "--steps",
    "3",
    "--no-window-check",
]


def every_file_without(root: Path, *values: str) -> list[Path]:
    files = [p for p in root.rglob("*") if p.is_file()]
    for path in files:
        data = path.read_bytes()
        for value in values:
            assert value.encode() not in data, f"{path} holds a secret's value"
    return files


@torch_needed
def test_a_local_run_records_its_provenance_and_environment_without_any_secret(llmb_proc, tmp_path):
    hf, other = f"hf_{secrets.token_hex(16)}", f"cred_{secrets.token_hex(16)}"
    env = {
        "LLMB_INSTALL": str(tmp_path / "install"),
        "LLMB_NO_CACHE": "1",
        "HF_TOKEN": hf,
        "LLMB_TEST_LOGIN": other,
    }
    # Secrets llmb is not told about (issue 21, items 3 and 8): passwords inside URLs, names outside a word list.
    hidden = {
        name: secrets.token_hex(12)
        for name in (
            "HF_ENDPOINT",
            "HTTPS_PROXY",
            "MLFLOW_TRACKING_URI",
            "DATABASE_URL",
            "SSHPASS",
            "GITHUB_PAT",
            "REGISTRY_AUTH",
            "BLOB_URL",
            "SESSION_COOKIE",
        )
    }
    env.update(
        {
            name: value
            for name, value in hidden.items()
            if name in ("SSHPASS", "GITHUB_PAT", "REGISTRY_AUTH")
        },
        HF_ENDPOINT=f"https://mirror-user:{hidden['HF_ENDPOINT']}@hf-mirror.example",
        HTTPS_PROXY=f"http://proxy-user:{hidden['HTTPS_PROXY']}@proxy.example:3128",
        MLFLOW_TRACKING_URI=f"https://ml:{hidden['MLFLOW_TRACKING_URI']}@mlflow.example/",
        DATABASE_URL=f"postgres://db:{hidden['DATABASE_URL']}@db.example/runs",
        BLOB_URL=f"https://a.blob.core.windows.net/c/f?sv=2022-11-02&sig={hidden['BLOB_URL']}",
        SESSION_COOKIE=f"session={hidden['SESSION_COOKIE']}",
    )
    result = llmb_proc(
        "run", *PROXY, "--secret", "LLMB_TEST_LOGIN", "--dump-env", "--json", env=env, timeout=900
    )
    summary = json.loads(result.out)
    assert result.code == 0 and summary["state"] == "SUCCEEDED", result.err[-3000:]
    run_dir = Path(summary["experiment_dir"])
    data = json.loads((run_dir / "provenance.json").read_text())
    submitted, job = data["submission"], data["job"]
    assert submitted["llmb"] == job["llmb"] == importlib.metadata.version("llmb")
    plugins = {p["distribution"]: p["version"] for p in submitted["plugins"]}
    assert plugins["llmb-plugin-llama31"] == importlib.metadata.version("llmb-plugin-llama31")
    assert job["plugins"]["llmb-backend-slurm"] == importlib.metadata.version("llmb-backend-slurm")
    assert (submitted["backend"], submitted["engine"], submitted["gpu"]) == (
        "local",
        "torch",
        "h100",
    )
    assert submitted["image"]["reference"] is None and "no container" in submitted["image"]["note"]
    assert {"HF_TOKEN", "LLMB_TEST_LOGIN"} <= set(submitted["secret_names"])
    assert job["frameworks"]["torch"] == importlib.metadata.version("torch")
    assert job["scheduler"] == {
        "kind": "local",
        "llmb_job_id": summary["job_id"],
        "job_id": summary["job_id"],
        "nodes": socket.gethostname(),
    }
    assert (
        job["gpu"]["name"] == "no GPU" and job["gpu"]["requested"] == "h100" and job["ranks"] == 2
    )
    environment = job["environment"]
    assert environment["HF_TOKEN"] == environment["LLMB_TEST_LOGIN"] == "***"
    assert (environment["RANK"], environment["WORLD_SIZE"], environment["MASTER_ADDR"]) == (
        "0",
        "2",
        "127.0.0.1",
    )
    # --dump-env: rank 0's whole environment beside the log, secrets redacted, values shell-quoted.
    dumped = Path(summary["log"]).parent / f"env-{Path(summary['log']).parent.name}.txt"
    assert job["environment_file"] == str(dumped)
    lines = dumped.read_text().splitlines()
    assert {
        "HF_TOKEN='***'",
        "LLMB_TEST_LOGIN='***'",
        "LLMB_DUMP_ENV=1",
        "RANK=0",
        "WORLD_SIZE=2",
    } <= set(lines)
    assert f"LLMB_INSTALL={shlex.quote(env['LLMB_INSTALL'])}" in lines
    assert "HF_ENDPOINT='https://mirror-user:***@hf-mirror.example'" in lines
    assert "BLOB_URL='https://a.blob.core.windows.net/c/f?sv=2022-11-02&sig=***'" in lines
    assert environment["HF_ENDPOINT"] == "https://mirror-user:***@hf-mirror.example"
    assert len(every_file_without(Path(env["LLMB_INSTALL"]), hf, other, *hidden.values())) > 5

    shown = json.loads(llmb_proc("results", str(run_dir), "--json", env=env).out)
    assert [row["provenance"] for row in shown] == [data]

    archive = tmp_path / "runs.tar.gz"
    assert llmb_proc("archive", str(run_dir.parent), "-o", str(archive), env=env).code == 0
    with tarfile.open(archive) as tar:
        member = next(
            m for m in tar.getmembers() if m.name.endswith(f"{run_dir.name}/provenance.json")
        )
        assert json.loads(tar.extractfile(member).read()) == data


@torch_needed
def test_a_job_on_gpus_of_another_type_stops_before_training(llmb_proc, tmp_path):
    smi = fake_nvidia_smi(tmp_path / "bin", "NVIDIA B200, 570.86.15\nNVIDIA B200, 570.86.15\n")
    env = {
        "LLMB_INSTALL": str(tmp_path / "install"),
        "LLMB_NO_CACHE": "1",
        "PATH": f"{smi}:{os.environ['PATH']}",
    }
    result = llmb_proc("run", *PROXY, "--json", env=env, timeout=900)
    summary = json.loads(result.out)
    assert result.code == 1 and summary["state"] == "FAILED", result.err[-3000:]
    assert "runs on NVIDIA B200 (b200) but the run was planned for h100" in summary["reason"]
    log = Path(summary["log"]).read_text()
    assert "iteration" not in log  # stopped before training
    job = json.loads((Path(summary["experiment_dir"]) / "provenance.json").read_text())["job"]
    assert (job["gpu"]["check"], job["gpu"]["count"], job["gpu"]["driver"]) == (
        "mismatch",
        2,
        "570.86.15",
    )


def job_story(summary: dict, err: str) -> str:
    """What a failed run said, and the end of its log and of Slurm's output file, for the assertion message."""
    parts = [f"reason: {summary.get('reason')}", err[-2000:]]
    log = Path(summary.get("log") or "/nonexistent")
    for path in (log, *log.parent.glob("sbatch_*.out")):
        if path.is_file():
            parts.append(f"--- {path.name} (end) ---\n" + path.read_text(errors="replace")[-3000:])
    return "\n".join(parts)


@torch_needed
@pytest.mark.slurm
def test_a_slurm_run_records_its_slurm_job_and_nodes(llmb_proc, slurm, tmp_path):
    env = {"LLMB_INSTALL": str(tmp_path / "install"), "LLMB_NO_CACHE": "1", **slurm.env()}
    result = llmb_proc(
        "run", *PROXY, "--backend", "slurm", "--bare", "--json", env=env, timeout=900
    )
    summary = json.loads(result.out)
    assert result.code == 0 and summary["state"] == "SUCCEEDED", job_story(summary, result.err)
    record = json.loads(
        (Path(env["LLMB_INSTALL"]) / "jobs" / summary["job_id"] / "job.json").read_text()
    )
    slurm_id = record["details"]["attempts"][-1]["slurm_id"]
    ended = json.loads(
        (Path(env["LLMB_INSTALL"]) / "jobs" / summary["job_id"] / "exit.json").read_text()
    )
    data = json.loads((Path(summary["experiment_dir"]) / "provenance.json").read_text())
    assert (
        data["submission"]["backend"] == "slurm"
        and "nodes' Python environment" in data["submission"]["image"]["note"]
    )
    scheduler = data["job"]["scheduler"]
    assert (scheduler["kind"], scheduler["job_id"], scheduler["nodes"]) == (
        "slurm",
        slurm_id,
        ended["nodes"],
    )
    assert scheduler["num_nodes"] == "1" and scheduler["llmb_job_id"] == summary["job_id"]
    assert data["job"]["python"] == ".".join(map(str, sys.version_info[:3]))
