"""``llmb sweep``: the tasks of a command line or a sweep file, every invalid
task reported before anything is submitted, --dry-run, and real sweeps on
the local backend (one job at a time, progress, the final table) and on the
private Slurm (every job submitted at once, one failing)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fault_plugin import ENV as FAULTS  # loads tests/fault_plugin.py in the ranks
from llmb.cli.run_options import parameter_names
from llmb.errors import UsageError
from llmb.runs.sweeps import expand, load_sweep, tasks_from_file

SWEEP_FILE = """\
defaults:
  gpu: h100
  proxy: tiny
llama31_8b:
  dtypes: [bf16, fp8]
  scales: [1, 2]
  repeats: 2
  set: {mbs: 1}
  tasks:
    - {dtype: fp8, scale: 2, steps: 30, window_check: false, env: {NCCL_DEBUG: INFO}}
nemotronh:
  scales: [2]
  proxy: null
  layers: 2
  steps: 3
  window_check: false
  memory_check: false
"""


@pytest.fixture
def install(tmp_path):
    return {"LLMB_INSTALL": str(tmp_path / "install"), "LLMB_NO_CACHE": "1"}


def test_the_command_line_is_a_cartesian_product():
    tasks = expand("llama31", ["8b", "70b"], ["bf16", "fp8"], [8, 16, 32], 2, gpu="h100")
    assert len(tasks) == 2 * 2 * 3 * 2
    assert [t.label for t in tasks[:3]] == [
        "llama31 8b h100 bf16 8 GPUs #1",
        "llama31 8b h100 bf16 8 GPUs #2",
        "llama31 8b h100 bf16 16 GPUs #1",
    ]
    assert expand("nemotronh", None, None, [1], 1)[0].label == "nemotronh - - 1 GPU"


def test_a_sweep_file_expands_with_defaults_sections_and_per_task_overrides(host, tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP_FILE)
    tasks = tasks_from_file(str(path), host.workloads(), parameter_names())
    assert len(tasks) == 2 * 2 * 2 + 1
    fp8_two = [t for t in tasks if t.dtype == "fp8" and t.gpus == 2]
    assert {t.repeat for t in fp8_two} == {1, 2}
    assert all(
        t.options
        == {"proxy": "tiny", "steps": 30, "window_check": False, "env_items": ("NCCL_DEBUG=INFO",)}
        for t in fp8_two
    )
    bf16_one = next(t for t in tasks if t.dtype == "bf16" and t.gpus == 1)
    assert (bf16_one.gpu, bf16_one.size, bf16_one.overrides, bf16_one.options) == (
        "h100",
        "8b",
        {"mbs": 1},
        {"proxy": "tiny"},
    )
    hybrid = tasks[-1]
    # A section's keys win over the defaults: no proxy here, the seeds' --layers instead.
    assert (hybrid.workload, hybrid.size, hybrid.gpu) == ("nemotronh", None, "h100")
    assert hybrid.options == {
        "proxy": None,
        "layers": 2,
        "steps": 3,
        "window_check": False,
        "memory_check": False,  # Nemotron-H 56B's two full-width layers outgrow a CPU rank's share
    }
    assert hybrid.source == f"{path}: nemotronh"


def test_a_sweep_file_takes_every_run_option_by_its_flag_name(host, tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(
        "llama31_8b: {scales: [8], checkpoint_load: /ckpt, time_limit: '30', backend_opt: {project: p}}\n"
    )
    [task] = tasks_from_file(str(path), host.workloads(), parameter_names())
    assert task.options == {
        "checkpoint_load": "/ckpt",
        "time_limit": "30",
        "backend_opts": ("project=p",),
    }


@pytest.mark.parametrize(
    "text, needle",
    [
        ("llama99_8b: {scales: [8]}", "sweep header 'llama99_8b': expected <workload>_<size>"),
        ("llama31_8b: {dtypes: [bf16]}", "llama31_8b: scales (the GPU counts) is required"),
        ("llama31_8b: {scales: [8], repeat: 2}", "llama31_8b: unknown keys repeat"),
        ("llama31_8b: {scales: [eight]}", "llama31_8b: scales must be a list of ints"),
        (
            "llama31_8b: {scales: [8], tasks: [{scale: 8, color: red}]}",
            "llama31_8b: tasks[1]: unknown keys color",
        ),
        ("llama31_8b: [8, 16]", "llama31_8b: expected a mapping"),
        ("llama31_8b: {scales: [8]\n", "is not valid YAML (line"),
    ],
)
def test_sweep_file_mistakes_name_the_file_the_section_and_the_entry(host, tmp_path, text, needle):
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    with pytest.raises(UsageError, match=re.escape(needle)):
        tasks_from_file(str(path), host.workloads(), parameter_names())


def test_every_invalid_task_is_reported_and_nothing_is_submitted(llmb_proc, install):
    result = llmb_proc(
        "sweep",
        "llama31",
        "--size",
        "8b,70b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16,nvfp4",
        "--gpus",
        "8",
        "--proxy",
        "tiny",
        env={**install, "LLMB_FORCE_CPU": "1"},
    )
    assert result.code == 2 and "Traceback" not in result.err
    # some are fine: only the bad ones are listed
    assert "8 of 8 sweep tasks cannot run" not in result.err
    lines = [line for line in result.err.splitlines() if line.startswith("  - ")]
    assert len(lines) == 4 and all("nvfp4" in line or "8 GPUs" in line for line in lines)
    assert any("has no dtype 'nvfp4'; valid dtypes: bf16, fp8" in line for line in lines)
    assert any("more than this machine's" in line for line in lines)
    assert not Path(install["LLMB_INSTALL"]).exists()


def test_dry_run_lists_the_jobs_and_writes_nothing(llmb_proc, install, tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP_FILE)
    result = llmb_proc("sweep", "--file", str(path), "--dry-run", "--json", env=install)
    assert result.code == 0, result.err
    listed = json.loads(result.out)
    assert len(listed) == 9 and {j["backend"] for j in listed} == {"local"}
    assert (
        listed[-1]["experiment"].startswith("pretrain_nemotronh_56b_")
        and listed[-1]["experiment"].endswith("_proxy-layers2")
        and listed[0]["ranks"] == 1
    )
    assert not Path(install["LLMB_INSTALL"]).exists()


@pytest.mark.parametrize("how", ["--gpu", "GPU_TYPE"])
def test_gpu_fills_the_sweep_file_sections_that_name_none(llmb_proc, install, tmp_path, how):
    """--gpu (or GPU_TYPE) is the GPU type of a sweep file's sections that name none, as for llmb certify
    --file; a section that names its own keeps it."""
    path = tmp_path / "sweep.yaml"
    path.write_text(
        "llama31_8b: {dtypes: [bf16], scales: [1]}\n"
        "llama31_70b: {gpu: b200, dtypes: [fp8], scales: [1]}\n"
    )
    args = ["sweep", "--file", str(path), "--proxy", "tiny", "--dry-run", "--json"]
    env = dict(install)
    if how == "--gpu":
        args += ["--gpu", "h100"]
    else:
        env["GPU_TYPE"] = "h100"
    result = llmb_proc(*args, env=env)
    assert result.code == 0, result.err
    assert [job["task"] for job in json.loads(result.out)] == [
        "llama31 8b h100 bf16 1 GPU",
        "llama31 70b b200 fp8 1 GPU",
    ]
    assert not Path(install["LLMB_INSTALL"]).exists()


def test_a_local_sweep_runs_one_job_at_a_time_and_reports_its_progress(
    llmb_proc, install, monkeypatch
):
    pytest.importorskip("torch", reason="the torch engine needs torch")
    result = llmb_proc(
        "sweep",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        "1,2",
        "--proxy",
        "tiny",
        "--steps",
        "3",
        "--no-window-check",
        "--json",
        env=install,
        timeout=600,
    )
    assert result.code == 0, result.err
    shown = json.loads(result.out)
    assert [(j["task"], j["state"]) for j in shown["jobs"]] == [
        ("llama31 8b h100 bf16 1 GPU", "SUCCEEDED"),
        ("llama31 8b h100 bf16 2 GPUs", "SUCCEEDED"),
    ]
    progress = [
        line for line in result.err.splitlines() if line.startswith(shown["sweep_id"] + ":")
    ]
    assert progress[-1] == f"{shown['sweep_id']}: 0 queued, 0 running, 2 done, 0 failed (of 2)"
    assert any("1 queued" in line for line in progress)  # the second waited for the first
    monkeypatch.setenv("LLMB_INSTALL", install["LLMB_INSTALL"])
    sweep = load_sweep("last")
    assert sweep.id == shown["sweep_id"] and sweep.job_ids == [j["job_id"] for j in shown["jobs"]]
    jobs = Path(install["LLMB_INSTALL"]) / "jobs"
    first_end = json.loads((jobs / sweep.job_ids[0] / "exit.json").read_text())["ended_at"]
    second_start = json.loads((jobs / sweep.job_ids[1] / "job.json").read_text())["submitted_at"]
    assert first_end <= second_start  # never two local jobs at once


@pytest.mark.slurm
def test_a_slurm_sweep_submits_every_job_at_once_and_counts_a_failure(llmb_proc, slurm, tmp_path):
    pytest.importorskip("torch", reason="the torch engine needs torch")
    env = {"LLMB_INSTALL": str(tmp_path / "install"), "LLMB_NO_CACHE": "1", **slurm.env(), **FAULTS}
    sweep_file = tmp_path / "acceptance.yaml"
    sweep_file.write_text(
        "defaults: {gpu: h100, proxy: tiny, bare: true, steps: 3, window_check: false}\n"
        "llama31_8b:\n"
        "  dtypes: [bf16]\n"
        "  scales: [1, 2]\n"
        "  tasks:\n"
        "    - {scale: 2, env: {LLMB_FAIL_AT_STEP: '2'}}\n"  # the engine raises at step 2: the job fails
    )
    result = llmb_proc(
        "sweep", "--file", str(sweep_file), "--backend", "slurm", "--json", env=env, timeout=600
    )
    assert result.code == 1, result.err[-3000:]
    shown = json.loads(result.out)
    assert [j["state"] for j in shown["jobs"]] == ["SUCCEEDED", "FAILED"]
    progress = [
        line for line in result.err.splitlines() if line.startswith(shown["sweep_id"] + ":")
    ]
    assert progress[-1] == f"{shown['sweep_id']}: 0 queued, 0 running, 1 done, 1 failed (of 2)"
    # A cluster takes the whole sweep at once: both jobs were submitted before either ended. (The progress line's
    # "queued" also counts a submitted job Slurm holds PENDING, so it cannot tell held-back from pending.)
    jobs = Path(env["LLMB_INSTALL"]) / "jobs"
    ids = [j["job_id"] for j in shown["jobs"]]
    submitted = [json.loads((jobs / i / "job.json").read_text())["submitted_at"] for i in ids]
    ended = [json.loads((jobs / i / "exit.json").read_text())["ended_at"] for i in ids]
    assert max(submitted) < min(ended)


def _published(host, gpu: str, max_gpus: int) -> list[tuple]:
    """(workload, size, gpu, dtype, GPU count) of every published figure, read from the workloads' references
    and from their performance summaries and verification cards where the figure ran the recipe's global
    batch at its GPU count (GPT-OSS 120B's H100 figure at 64 GPUs is the summary's alone)."""

    def recipes_gbs(workload, figure) -> set[int]:
        return {
            series.gbs.at(figure.gpus)
            for variant in workload.variants
            for series in variant.series
            if (series.size, series.gpu) == (figure.size, figure.gpu)
            and figure.dtype in series.dtypes
            and series.min_gpus <= figure.gpus <= series.max_gpus
        }

    return sorted(
        {
            (name, r.size, r.gpu, r.dtype, r.gpus)
            for name, w in host.workloads().items()
            for r in (
                *w.references,
                *(s for s in (*w.summary, *w.cards) if s.gbs in recipes_gbs(w, s)),
            )
            if r.gpu == gpu and r.gpus <= max_gpus
        }
    )


def test_all_workloads_is_every_published_configuration_up_to_max_gpus(host, llmb_proc, install):
    result = llmb_proc(
        "sweep",
        "--all-workloads",
        "--max-gpus",
        "64",
        "--gpu",
        "h100",
        "--backend",
        "slurm",
        "--dry-run",
        "--json",
        env=install,
    )
    assert result.code == 0, result.err
    listed = json.loads(result.out)
    tasks = sorted(tuple(j["task"].split()[:4]) + (j["ranks"],) for j in listed)
    assert tasks == _published(host, "h100", 64)
    assert {"llama31", "nemotronh"} <= {t[0] for t in tasks} and max(t[4] for t in tasks) == 64
    assert all(j["source"].startswith("published: ") for j in listed)
    assert not Path(install["LLMB_INSTALL"]).exists()


def test_all_workloads_tasks_carry_the_published_variant_and_scaling(host):
    from llmb.runs.sweeps import published_tasks

    tasks = published_tasks(host.workloads(), "gb200", 128, 2)
    strong = [t for t in tasks if t.workload == "nemotron4"]
    assert strong and all(t.strong_scaling and t.gpus == 128 for t in strong)
    assert {t.variant for t in tasks if t.workload == "llama31"} == {"megatron-bridge"}
    assert {t.repeat for t in tasks} == {1, 2}


@pytest.mark.parametrize(
    "args, needle",
    [
        (("--all-workloads",), "--all-workloads needs --max-gpus N"),
        (
            ("--all-workloads", "--max-gpus", "4"),
            "no published configuration runs on 4 GPUs or fewer; the smallest "
            "published GPU count is 8",
        ),
        (
            ("--all-workloads", "--max-gpus", "64", "--gpu", "x100"),
            "no installed workload publishes figures for GPU type 'x100'",
        ),
        (
            ("--all-workloads", "--max-gpus", "64", "--size", "8b"),
            "--all-workloads takes each published configuration as published; drop --size",
        ),
        (("llama31", "--all-workloads", "--max-gpus", "64"), "not a WORKLOAD and --all-workloads"),
        (("llama31", "--gpus", "8", "--max-gpus", "64"), "--max-gpus goes with --all-workloads"),
    ],
)
def test_all_workloads_mistakes(llmb_proc, install, args, needle):
    result = llmb_proc("sweep", *args, "--dry-run", env=install)
    assert result.code == 2 and "Traceback" not in result.err
    assert needle in result.err, result.err
