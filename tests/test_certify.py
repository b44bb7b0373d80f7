"""``llmb certify``: the gates on crafted results (rising and NaN loss, a
noisy step time, 94% of the published performance, proxies), the
published suite at the Exemplar scale, the verdict merged across re-runs,
the user's mistakes, and on the private Slurm a proxy certification end
to end (one injected failure, ``--rerun`` of that workload alone, a
passing ``certify status``, a ``.tar.zst`` that ``tar --zstd -t`` lists
without profiles) and the README's walkthrough as written."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from fault_plugin import ENV as FAULTS  # loads tests/fault_plugin.py in the ranks
from llmb.certify.gates import MAX_STEP_CV, judge, passed
from llmb.certify.suite import EXEMPLAR_SCALE, Attempt, published_suite
from llmb.certify.verdict import EXERCISED, FAIL, PASS, PENDING, Configuration, Judged, SuiteVerdict
from llmb.recipes.references import Figure
from llmb.results.records import RunContext, RunResult, Sample, WindowStats
from llmb.runs.sweeps import Task
from readme_blocks import walkthrough_commands

PUBLISHED_MS = 1000.0


def crafted(
    *,
    losses=None,
    step_ms=PUBLISHED_MS,
    std_ms=5.0,
    tflops=900.0,
    status="success",
    proxy=False,
    published_ms: float | None = PUBLISHED_MS,
) -> RunResult:
    """A run's result as ``llmb results`` makes it: 50 iterations, the window 35-44."""
    losses = losses if losses is not None else [11.0 - 0.05 * i for i in range(50)]
    samples = tuple(Sample(i + 1, step_ms, tflops, loss) for i, loss in enumerate(losses))
    context = RunContext(
        experiment="pretrain_llama31_8b_bf16_gpus128",
        source="recipe",
        workload="llama31",
        variant="nemo2",
        size="8b",
        gpu="h100",
        dtype="bf16",
        gpus=128,
        proxy=proxy,
    )
    return RunResult(
        log="log.out",
        context=context,
        status=status,
        reason=None if status == "success" else "python exception: RuntimeError: boom",
        format="megatron_bridge",
        window=(35, 44),
        stats=WindowStats(35, 44, 10, step_ms, std_ms, tflops, 1.0, "log"),
        max_iteration=50,
        last_iteration=50,
        samples=samples,
        reference_step_time_ms=None if proxy else published_ms,
        reference_source=None
        if published_ms is None
        else "Llama 3.1 NeMo 2 recipes table 5, row 5",
        reference=None
        if proxy or published_ms is None
        else asdict(
            Figure(
                "recipe",
                "published",
                "Llama 3.1 NeMo 2 recipes table 5, row 5",
                128,
                published_ms,
                None,
                None,
                None,
                None,
            )
        ),
    )


def outcomes(result: RunResult) -> dict[str, str]:
    return {gate.name: gate.outcome for gate in judge(result)}


def test_a_healthy_full_size_run_passes_every_gate():
    gates = judge(crafted())
    assert {g.name: g.outcome for g in gates} == dict.fromkeys(
        ("status", "loss", "tflops", "step_cv", "performance"), "pass"
    )
    assert passed(gates)
    assert next(g for g in gates if g.name == "performance").value == "100.0%"


def test_a_rising_loss_fails_the_loss_gate():
    result = crafted(losses=[11.0 + 0.01 * i for i in range(50)])
    gates = judge(result)
    loss = next(g for g in gates if g.name == "loss")
    assert loss.outcome == "fail" and "not falling" in loss.detail and not passed(gates)
    # the first and last 10 iterations are compared, not single points: one low last value does not rescue it
    # last < first, but not the last 10 on average
    wobbly = [11.0 + 0.01 * i for i in range(49)] + [10.9]
    assert outcomes(crafted(losses=wobbly))["loss"] == "fail"


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_loss_that_is_not_a_number_fails(bad):
    losses = [11.0 - 0.05 * i for i in range(50)]
    losses[40] = bad
    loss = next(g for g in judge(crafted(losses=losses)) if g.name == "loss")
    assert (loss.outcome, loss.value) == ("fail", "not finite") and "iteration 41" in loss.detail


def test_the_step_time_cv_bound():
    assert MAX_STEP_CV == 0.05
    assert outcomes(crafted(std_ms=49.0))["step_cv"] == "pass"  # 4.9%
    noisy = next(g for g in judge(crafted(std_ms=80.0)) if g.name == "step_cv")
    assert (noisy.outcome, noisy.value) == ("fail", "8.0%") and "bound 5%" in noisy.detail
    # one step in the window: no spread to judge
    assert outcomes(crafted(std_ms=None))["step_cv"] == "fail"


def test_performance_is_judged_at_95_percent_of_the_published_figure():
    assert outcomes(crafted(step_ms=PUBLISHED_MS / 0.95))["performance"] == "pass"  # exactly 95%
    slow = next(g for g in judge(crafted(step_ms=PUBLISHED_MS / 0.94)) if g.name == "performance")
    assert (slow.outcome, slow.value) == ("fail", "94.0%")
    assert "pass at 95%" in slow.detail
    # faster than published
    assert outcomes(crafted(step_ms=PUBLISHED_MS * 0.9))["performance"] == "pass"


def test_no_tflops_fails():
    assert outcomes(crafted(tflops=0.0))["tflops"] == "fail"


def test_a_proxy_run_has_no_published_figure_and_its_timing_is_not_judged():
    gates = judge(crafted(proxy=True, std_ms=400.0))  # a CPU proxy on a busy machine
    shown = {g.name: (g.outcome, g.cell) for g in gates}
    assert shown["performance"] == ("n/a", "proxy (n/a)")
    assert shown["step_cv"] == ("n/a", "40.0% (n/a)")
    assert passed(gates)


def test_a_full_size_configuration_without_a_published_figure_is_marked():
    gate = next(g for g in judge(crafted(published_ms=None)) if g.name == "performance")
    assert (gate.outcome, gate.value) == ("n/a", "not published")


def test_a_failed_run_fails_its_status_gate_and_shows_no_data_elsewhere():
    result = crafted(status="failed", losses=[11.0], std_ms=None)
    result = RunResult(**{**result.__dict__, "stats": None, "samples": result.samples[:1]})
    gates = judge(result)
    assert [(g.name, g.outcome, g.cell) for g in gates] == [
        ("status", "fail", "failed FAIL"),
        ("loss", "n/a", "-"),
        ("tflops", "n/a", "-"),
        ("step_cv", "n/a", "-"),
        ("performance", "n/a", "-"),
    ]
    assert not passed(gates)


def _judged(job: str, verdict: str, step_ms: float = PUBLISHED_MS, rerun: bool = False) -> Judged:
    result = crafted(step_ms=step_ms, status="success" if verdict != FAIL else "failed")
    state = {PASS: "SUCCEEDED", FAIL: "FAILED", PENDING: "RUNNING"}[verdict]
    return Judged(
        Task("llama31", "8b", "h100", "bf16", 128),
        job,
        Attempt("sweep-1", ["llama31"], "", rerun),
        state,
        result,
        tuple(judge(result)),
    )


def test_runs_of_a_configuration_merge_to_the_best_passing_one():
    config = Configuration(Task("llama31", "8b", "h100", "bf16", 128))
    config.runs = [
        _judged("a", FAIL),
        _judged("b", PASS, 1040.0, True),
        _judged("c", PASS, 1010.0, True),
    ]
    assert (config.verdict, config.best.job_id) == (PASS, "c")  # the fastest passing run
    config.runs = [_judged("a", FAIL), _judged("b", PENDING, rerun=True)]
    assert (config.verdict, config.best.job_id) == (PENDING, "b")
    config.runs = [_judged("a", FAIL), _judged("b", FAIL, rerun=True)]
    assert (config.verdict, config.best.job_id) == (FAIL, "b")  # the latest failure
    assert Configuration(config.task).verdict == "not run"


def test_the_published_suite_takes_the_exemplar_scale_or_the_nearest_published_below(host):
    assert EXEMPLAR_SCALE == 512
    tasks, notes = published_suite(host.workloads(), "h100", EXEMPLAR_SCALE, 1, proxy=False)
    notes_512 = notes
    chosen = {(t.workload, t.size, t.dtype): t.gpus for t in tasks}
    # every published h100 configuration is in, at its nearest scale
    for workload in host.workloads().values():
        for ref in workload.references:
            if ref.gpu == "h100":
                scales = [
                    r.gpus
                    for r in workload.references
                    if (r.variant, r.size, r.dtype, r.gpu)
                    == (ref.variant, ref.size, ref.dtype, "h100")
                ]
                assert chosen[(workload.name, ref.size, ref.dtype)] == max(
                    n for n in scales if n <= 512
                )
    assert chosen[("llama31", "70b", "fp8")] == 512 and chosen[("llama31", "8b", "bf16")] == 128
    assert chosen[("nemotron4", "340b", "bf16")] == 256
    assert any(
        n.startswith("llama31 8b h100 bf16: not published at 512 GPUs; runs at 128") for n in notes
    )
    assert all(t.variant and t.source.startswith("published: ") for t in tasks)

    small, notes = published_suite(host.workloads(), "h100", 64, 1, proxy=False)
    assert ("llama31", "405b", "bf16") not in {(t.workload, t.size, t.dtype) for t in small}
    assert any("llama31 405b h100 bf16: left out, published from 512 GPUs" in n for n in notes)

    # a proxy certifies every published configuration, those published only above the full suite's scale
    # too (DeepSeek-V3 BF16 on H100: its verification card's 1,024 GPUs), each as its note says
    above = {
        tuple(n.split(":")[0].split()[i] for i in (0, 1, 3))
        for n in notes_512
        if "left out, published from" in n
    }
    assert ("deepseekv3", "671b", "bf16") in above
    proxies, notes = published_suite(host.workloads(), "h100", 2, 3, proxy=True)
    shown = {(t.workload, t.size, t.dtype) for t in proxies}
    assert {t.gpus for t in proxies} == {2} and len(proxies) == 3 * len(shown)
    assert shown == set(chosen) | above
    assert "certifying a cluster needs full-size runs" in notes[0]


def _proxy_judged(job: str, verdict: str) -> Judged:
    result = crafted(proxy=True, status="success" if verdict != FAIL else "failed")
    state = {FAIL: "FAILED", PENDING: "RUNNING"}.get(verdict, "SUCCEEDED")
    return Judged(
        Task("llama31", "8b", "h100", "bf16", 2, options={"proxy": "tiny"}),
        job,
        Attempt("sweep-1", ["llama31"], ""),
        state,
        result,
        tuple(judge(result)),
    )


def _config(workload: str, *runs: Judged) -> Configuration:
    config = Configuration(Task(workload, "8b", "h100", "bf16", 2))
    config.runs = list(runs)
    return config


def test_a_proxy_run_that_meets_every_gate_is_exercised_never_passed():
    exercised = _proxy_judged("a", EXERCISED)
    assert passed(list(exercised.gates)) and exercised.verdict == EXERCISED
    assert (
        _proxy_judged("b", FAIL).verdict == FAIL and _proxy_judged("c", PENDING).verdict == PENDING
    )
    # a full-size pass of the same configuration is preferred to an exercised proxy
    config = _config("llama31", exercised, _judged("d", PASS))
    assert (config.verdict, config.best.job_id) == (PASS, "d")

    def suite(*configs):
        return SuiteVerdict(None, list(configs))

    proxy_only = suite(
        _config("llama31", exercised), _config("llama4", _proxy_judged("e", EXERCISED))
    )
    assert proxy_only.workloads() == {"llama31": EXERCISED, "llama4": EXERCISED}
    assert (proxy_only.verdict, proxy_only.passed) == (EXERCISED, False)
    # a suite file may mix them
    mixed = suite(_config("llama31", _judged("f", PASS)), _config("llama4", exercised))
    assert (mixed.verdict, mixed.passed) == (EXERCISED, False)
    assert suite(_config("llama31", _judged("g", PASS))).verdict == PASS
    failing = suite(_config("llama31", exercised), _config("llama4", _proxy_judged("h", FAIL)))
    assert failing.workloads() == {"llama31": EXERCISED, "llama4": FAIL} and failing.verdict == FAIL
    running = suite(_config("llama31", exercised), _config("llama4", _proxy_judged("i", PENDING)))
    assert running.verdict == PENDING
    assert suite(_config("llama31")).verdict == FAIL  # a configuration that never ran is no pass


def test_a_real_proxy_certification_says_exercised_and_certifies_nothing(
    llmb_proc, proxy_certification
):
    run = proxy_certification.result
    assert run.code == 0, run.err[-3000:]  # exercised: the smoke test succeeded
    shown = proxy_certification.suite
    assert (shown["verdict"], shown["passed"], shown["certified"], shown["proxy"]) == (
        "exercised",
        False,
        False,
        True,
    )
    assert shown["workloads"]["llama31"]["verdict"] == "exercised"
    [config] = shown["configurations"]
    assert config["verdict"] == "exercised" and config["runs"][0]["verdict"] == "exercised"
    assert {name: gate["outcome"] for name, gate in config["gates"].items()} == {
        "status": "pass",
        "loss": "pass",
        "tflops": "pass",
        "step_cv": "n/a",
        "performance": "n/a",
    }

    # one action, one id: the progress lines are headed by the certification's, not a sweep's
    assert "sweep-" not in run.err and f"{shown['suite']}: 1 job on local" in run.err, run.err

    status = llmb_proc("certify", "status", env=proxy_certification.env, timeout=300)
    assert status.code == 0, status.err
    table = status.out.splitlines()
    assert table[2].split()[-1] == "EXERCISED" and "proxy (n/a)" in table[2]
    assert status.out.rstrip().endswith(
        f"{shown['suite']}: EXERCISED (proxy: certifies nothing), every workload "
        f"ran and met its gates (llama31)."
    )
    assert "PASS, every" not in status.out


@pytest.fixture
def install(tmp_path):
    return {"LLMB_INSTALL": str(tmp_path / "install"), "LLMB_NO_CACHE": "1"}


def test_dry_run_lists_the_suite_largest_jobs_first(llmb_proc, install):
    result = llmb_proc(
        "certify", "--gpu", "h100", "--backend", "slurm", "--dry-run", "--json", env=install
    )
    assert result.code == 0, result.err
    listed = json.loads(result.out)
    ranks = [job["ranks"] for job in listed]
    # the smallest: 128 GPUs, or GPT-OSS 120B's 64 where llmb-plugin-gptoss is installed
    assert ranks == sorted(ranks, reverse=True) and ranks[0] == 512 and ranks[-1] in (64, 128)
    assert "note: nemotron4 340b h100 bf16: not published at 512 GPUs; runs at 256" in result.err
    assert not (Path(install["LLMB_INSTALL"]) / "certify").exists()  # a dry run records no suite
    # each task says its recipe variant (405b bf16 at 512 H100s is NeMo 2's: plan needs --variant)
    variants = {job["task"]: job["variant"] for job in listed}
    assert variants["llama31 405b h100 bf16 512 GPUs"] == "nemo2"
    # a configuration the recipe lays out but publishes no figure for is left out, and said so
    assert (
        "note: nemotron4 340b h100 fp8: left out, its recipe gives a layout but publishes no "
        "performance figure" in result.err
    )


# ------------------------------------------------------------------ one set of references (issue 40, item 4)

SUMMARY = "Megatron-Bridge performance summary, 25.11 NeMo Container > Pre-Training Performance"


def _dry_run(llmb_proc, install, gpu: str, *more: str):
    return llmb_proc("certify", "--gpu", gpu, "--backend", "slurm", "--dry-run", *more, env=install)


def _plan_figure(llmb_proc, task: str, variant: str) -> tuple[str, dict]:
    """(the source plan judges a run of ``task`` by, that figure) for a suite task's label."""
    workload, size, gpu, dtype, gpus, _ = task.split()
    shown = llmb_proc(
        *("plan", workload, "--size", size, "--gpu", gpu, "--dtype", dtype, "--gpus", gpus),
        *("--variant", variant, "--json"),
    ).json()
    source = shown["judged_against"]
    if source == "recipe":
        return source, shown["expected"]
    return source, next(f for f in shown["other_figures"] if f["source"] == source)


@pytest.mark.parametrize(
    "gpu, task, row",
    [
        ("b200", "llama31 8b b200 fp8 8 GPUs", f"{SUMMARY} > System: DGX-B200, row 1"),
        ("b200", "llama31 405b b200 fp8 128 GPUs", f"{SUMMARY} > System: DGX-B200, row 1"),
        ("gb300", "llama31 8b gb300 fp8 8 GPUs", f"{SUMMARY} > System: DGX-GB300, row 1"),
    ],
)
def test_a_b200_or_gb300_owner_can_certify_at_the_counts_plan_has_figures_for(
    llmb_proc, install, gpu, task, row
):
    """Issue 40, item 4: the recipe documents publish no B200 or GB300 figure, Megatron-Bridge's performance
    summary does, and plan judges by it; certify refused. Its suite is now the configurations the one
    reference policy has a figure for, each task naming the figure it is judged by: the one plan names."""
    result = _dry_run(llmb_proc, install, gpu, "--json")
    assert result.code == 0, result.err
    jobs = {job["task"]: job for job in json.loads(result.out)}
    judged = jobs[task]["judged_by"]
    assert judged["source"] == "summary" and judged["document"].startswith(row), judged
    assert jobs[task]["source"].startswith("published: the performance summary's figure")
    assert row in jobs[task]["source"]
    source, figure = _plan_figure(llmb_proc, task, jobs[task]["variant"])
    assert source == judged["source"]
    assert (figure["gbs"], figure["gpus"], figure["step_time_ms"]) == (
        judged["gbs"],
        judged["gpus"],
        judged["step_time_ms"],
    )
    assert judged["container"] == figure["container"] == "25.11"
    # every task of the suite has such a figure: a configuration with none is left out, and said so
    assert all(j["judged_by"].get("document") for j in jobs.values()), jobs
    assert f"note: llama31 70b {gpu} nvfp4: left out" in result.err


def test_the_dry_run_table_says_which_figure_each_task_is_judged_by(llmb_proc, install):
    result = _dry_run(llmb_proc, install, "b200")
    assert result.code == 0, result.err
    assert "judged by (the figure llmb plan shows" in result.out
    [line] = [x for x in result.out.splitlines() if " llama31 8b b200 fp8 8 GPUs: " in x]
    assert (
        "the performance summary's figure, 4.28 s per step at GBS 128 on 8 GPUs: "
        f"{SUMMARY} > System: DGX-B200, row 1 (container 25.11, 2025-12-04" in line
    )


def test_every_published_suite_task_is_judged_by_the_reference_lookup(host):
    """The suite's choice of tasks is the reference lookup's (``llmb.recipes.references.find``, source auto):
    for every GPU type with figures, each task's figure is the one find gives its configuration, in the
    container and at the batch its recipe runs."""
    from llmb.recipes.gpus import catalogue, recipes_of
    from llmb.recipes.references import AUTO, Configuration, find
    from llmb.runs.sweeps import judged_by, published_configurations

    workloads = host.workloads()
    for gpu in ("b200", "gb200", "gb300", "h100", "h200"):
        assert gpu in catalogue()
        tasks, _ = published_suite(workloads, gpu, EXEMPLAR_SCALE, 1, proxy=False)
        assert tasks, gpu
        for task in tasks:
            workload = workloads[task.workload]
            variant = workload.variant(task.variant)
            figure = find(
                workload,
                Configuration(
                    variant.name,
                    task.size,
                    gpu,
                    task.dtype,
                    task.gpus,
                    "strong" if task.strong_scaling else "weak",
                    container=variant.container_for(recipes_of(gpu)),
                ),
                AUTO,
            )
            assert task.source == f"published: {judged_by(figure)}", task
        for config in published_configurations(workloads, gpu):
            assert len(config.scales) == len(config.variants) == len(config.figures)


def test_a_b300_suite_is_the_workloads_with_a_b300_figure_and_names_the_others(llmb_proc, install):
    """B300: Megatron-Bridge's performance summary prints DGX-B300 rows for DeepSeek-V3 (26.06) and GPT-OSS
    120B (26.06, 26.04.01), and for no Llama or Qwen3 configuration llmb runs: the suite is those two
    workloads' (a GPU type with no figure at all is refused: test_mistakes_are_explained, x100)."""
    result = _dry_run(llmb_proc, install, "b300")
    assert result.code == 0 and "Traceback" not in result.err, result.err
    assert "deepseekv3 671b b300 fp8 256 GPUs" in result.out
    assert "gptoss 120b b300 bf16 64 GPUs" in result.out
    assert "qwen3 235b b300" not in result.out and "note: qwen3 235b b300" in result.err


# ------------------------------------------------------------------ validated means tested (issue 40, item 6)

NEMOTRON4_192 = "nemotron4_340b: {gpu: b200, dtypes: [fp8], scales: [192, 256]}\n"


def test_a_suite_file_at_a_count_the_recipe_does_not_test_says_not_tested(
    llmb_proc, install, tmp_path
):
    (tmp_path / "suite.yaml").write_text(NEMOTRON4_192)
    result = llmb_proc(
        *("certify", "--file", str(tmp_path / "suite.yaml"), "--backend", "slurm"),
        *("--dry-run", "--json"),
        env=install,
    )
    assert result.code == 0, result.err
    jobs = {job["task"]: job for job in json.loads(result.out)}
    untested = jobs["nemotron4 340b b200 fp8 192 GPUs"]
    assert any(
        "192 GPUs is between the counts" in w and "not tested" in w for w in untested["warnings"]
    )
    assert "validated" not in json.dumps(untested).replace("not validated", "")
    assert untested["judged_by"]["missing"].startswith("no published document has a figure")
    assert not any("not tested" in w for w in jobs["nemotron4 340b b200 fp8 256 GPUs"]["warnings"])


def test_a_certification_report_says_not_tested_and_never_validated_for_an_untested_count(
    install_root, cli, host, tmp_path
):
    """A suite file may ask for 192 GPUs, which the Nemotron-4 340B recipe does not test (128, 256, 512,
    1024): ``certify status`` says so of that configuration, in text and JSON, and calls it validated
    nowhere. The suite is recorded as ``llmb certify --file`` records one; nothing of it has run."""
    from llmb.certify.suite import new_suite, save_suite
    from llmb.cli.run_options import parameter_names
    from llmb.runs.sweeps import tasks_from_file

    (tmp_path / "suite.yaml").write_text(NEMOTRON4_192)
    tasks = tasks_from_file(str(tmp_path / "suite.yaml"), host.workloads(), parameter_names())
    suite = new_suite("b200", None, False, str(tmp_path / "suite.yaml"), tasks, [])
    save_suite(suite)

    shown = cli("certify", "status", "--suite", suite.id, "--json")
    assert shown.code == 1, shown.err  # nothing ran yet
    by_count = {c["configuration"]: c for c in json.loads(shown.out)["configurations"]}
    untested, tested = by_count["340b b200 fp8 192 GPUs"], by_count["340b b200 fp8 256 GPUs"]
    assert (untested["scale_status"], tested["scale_status"]) == ("not tested", "tested")
    assert "192 GPUs is between the counts the published recipe tests" in untested["untested"]
    assert tested["untested"] is None

    text = cli("certify", "status", "--suite", suite.id)
    lines = text.out.splitlines()
    said = [
        x for x in lines if x.startswith("nemotron4 340b b200 fp8 192 GPUs: 192 GPUs is between")
    ]
    assert said and "not tested" in said[0], text.out
    assert "validated" not in text.out.replace("not validated", "")
    assert not any("not tested" in x for x in lines if "fp8 256 GPUs" in x)


def test_steps_that_end_before_the_window_are_refused_before_anything_runs(llmb_proc, install):
    """Issue 34: --steps 20 was accepted and the certification then failed as too short."""
    result = llmb_proc(
        *("certify", "--gpu", "h100", "--backend", "slurm", "--steps", "20", "--dry-run"),
        env=install,
    )
    assert result.code == 2 and "Traceback" not in result.err
    assert "20 steps end before the statistics window's end (44)" in result.err
    assert "a certification judges every run on that window" in result.err


@pytest.mark.parametrize(
    "args, needle",
    [
        ((), "needs the cluster's GPU type: --gpu h100"),
        (
            ("--gpu", "x100"),
            "no installed workload publishes figures for GPU type 'x100'; published GPU types: "
            "b200, b300, gb200, gb300, h100",
        ),
        (
            ("--gpu", "h100", "--proxy", "tiny"),
            "a proxy suite runs every configuration on --scale ranks",
        ),
        (
            ("--gpu", "h100", "--scale", "4"),
            "no published h100 configuration runs on 4 GPUs or fewer",
        ),
        (("--gpu", "h100", "--profile"), "certification runs are not profiled or traced"),
        (
            ("--file", "suite.yaml", "--scale", "2"),
            "a suite file gives its own scales and repeats; drop --scale",
        ),
        (
            ("--rerun", "llama31", "--gpu", "h100"),
            "--rerun runs the suite's recorded configurations again; --gpu",
        ),
        (("--rerun", "llama31"), "there are no certification suites in"),
        (("--suite", "cert-000000"), "--suite ID goes with --rerun WORKLOAD"),
        (
            ("--gpu", "h100", "status"),
            "--gpu apply to running a suite (llmb certify ...), not to llmb certify status",
        ),
        (("status", "--suite", "cert-000000"), "there are no suites yet"),
    ],
)
def test_mistakes_are_explained(llmb_proc, install, tmp_path, args, needle):
    (tmp_path / "suite.yaml").write_text("llama31_8b: {scales: [2]}\n")
    args = tuple(str(tmp_path / a) if a == "suite.yaml" else a for a in args)
    result = llmb_proc("certify", *args, env=install)
    assert result.code == 2 and "Traceback" not in result.err
    assert needle in result.err, result.err


def test_a_file_suite_that_profiles_is_refused(llmb_proc, install, tmp_path):
    (tmp_path / "suite.yaml").write_text(
        "llama31_8b: {scales: [2], dtypes: [bf16], profile: true}\n"
    )
    result = llmb_proc(
        "certify", "--file", str(tmp_path / "suite.yaml"), "--proxy", "tiny", env=install
    )
    assert (
        result.code == 2
        and f"not profiled or traced ({tmp_path / 'suite.yaml'}: llama31_8b)" in result.err
    )


# ------------------------------------------------------------------ on the private Slurm


def _zstd_listing(archive: Path) -> list[str]:
    if shutil.which("zstd") is None:
        if os.environ.get("CI"):
            pytest.fail(
                "CI must check .tar.zst archives, but zstd is not installed (./dev.sh test installs it)"
            )
        pytest.skip("tar --zstd needs the zstd program (apt-get install zstd)")
    listed = subprocess.run(
        ["tar", "--zstd", "-tf", str(archive)], capture_output=True, text=True, timeout=120
    )
    assert listed.returncode == 0, listed.stderr
    return listed.stdout.splitlines()


PROFILES = re.compile(
    r"(\.nsys-rep|_trace\.json|\.pt\.trace\.json)$|/(torch_profile|pytorch_profile|nsys_profile)/"
)


@pytest.mark.slurm
def test_a_proxy_certification_fails_a_workload_reruns_it_alone_and_passes(
    llmb_proc, slurm, tmp_path
):
    pytest.importorskip("torch", reason="the torch engine needs torch")
    install = tmp_path / "install"
    env = {"LLMB_INSTALL": str(install), "LLMB_NO_CACHE": "1", **slurm.env(), **FAULTS}
    suite_file = tmp_path / "suite.yaml"
    suite_file.write_text(
        "defaults: {gpu: h100, proxy: tiny, bare: true}\n"
        "llama31_8b: {dtypes: [bf16], scales: [2]}\n"
        "llama4: {dtypes: [bf16], scales: [2], env: {LLMB_FAIL_AT_STEP: '2'}}\n"  # its ranks raise at step 2
    )
    first = llmb_proc(
        "certify",
        "--file",
        str(suite_file),
        "--backend",
        "slurm",
        "--profile-last",
        "--json",
        env=env,
        timeout=3600,
    )  # hang guard only: a loaded 2-core machine runs the proxies slowly
    assert first.code == 1, first.err[-3000:]
    shown = json.loads(first.out)
    suite_id = shown["suite"]
    assert {w: v["verdict"] for w, v in shown["workloads"].items()} == {
        "llama31": "exercised",
        "llama4": "fail",
    }
    by_workload = {c["workload"]: c for c in shown["configurations"]}
    assert (
        by_workload["llama4"]["status"] == "failed"
        and by_workload["llama4"]["gates"]["status"]["outcome"] == "fail"
    )
    assert "injected failure at step 2" in by_workload["llama4"]["gates"]["status"]["detail"]
    assert by_workload["llama31"]["configuration"] == "8b h100 bf16 2 GPUs (megatron-bridge)"
    assert by_workload["llama31"]["gates"]["performance"] == {
        "outcome": "n/a",
        "value": "proxy",
        "detail": "proxy run: not compared with published figures",
    }
    # the default size, resolved
    assert by_workload["llama4"]["configuration"].startswith("400b h100 bf16 2 GPUs")
    record = json.loads((install / "certify" / suite_id / "suite.json").read_text())
    assert [a["workloads"] for a in record["attempts"]] == [["llama31", "llama4"]]

    # The cause fixed (here: the injected failure switched off), the failed workload alone runs again.
    again = llmb_proc(
        "certify",
        "--rerun",
        "llama4",
        "--env",
        "LLMB_FAIL_AT_STEP=",
        "--json",
        env=env,
        timeout=3600,
    )
    assert again.code == 0, again.err[-3000:]
    shown = json.loads(again.out)
    assert (shown["verdict"], shown["passed"], shown["certified"]) == ("exercised", False, False)
    assert shown["suite"] == suite_id
    runs = {c["workload"]: c["runs"] for c in shown["configurations"]}
    assert [(r["rerun"], r["verdict"]) for r in runs["llama4"]] == [
        (False, "fail"),
        (True, "exercised"),
    ]
    assert len(runs["llama31"]) == 1  # not run again
    record = json.loads((install / "certify" / suite_id / "suite.json").read_text())
    rerun_sweep = json.loads(
        (install / "sweeps" / record["attempts"][1]["sweep"] / "sweep.json").read_text()
    )
    assert [t["workload"] for t in rerun_sweep["tasks"]] == ["llama4"]
    assert rerun_sweep["tasks"][0]["options"]["env_items"] == ["LLMB_FAIL_AT_STEP="]
    assert shown["workloads"]["llama4"]["jobs"] == [r["job"] for r in runs["llama4"]]

    status = llmb_proc("certify", "status", env=env, timeout=600)
    assert status.code == 0, status.err[-3000:]
    table = status.out.splitlines()
    assert table[0].split() == [
        "WORKLOAD",
        "CONFIGURATION",
        "JOB",
        "STATUS",
        "LOSS",
        "TFLOPS",
        "STEP",
        "CV",
        "PERFORMANCE",
        "VERDICT",
    ]
    rows = table[2:4]
    assert all(
        row.split()[-1] == "EXERCISED" and "proxy (n/a)" in row and "success PASS" in row
        for row in rows
    ), table
    assert (
        f"{suite_id}: EXERCISED (proxy: certifies nothing), every workload ran and met its gates (llama31, "
        f"llama4)."
    ) in status.out

    # The suite to hand in: records, verdict and runs, without the torch profiler's traces of the profiled runs.
    traces = list(install.glob("workloads/*/experiments/*/*/*/torch_profile/*"))
    assert traces, "the last repeat was profiled (--profile-last)"
    archive = tmp_path / "hand-in.tar.zst"
    packed = llmb_proc(
        "archive", "--suite", suite_id, "--output", str(archive), "--json", env=env, timeout=600
    )
    assert packed.code == 0, packed.err
    assert json.loads(packed.out)["format"] == "zst"
    names = _zstd_listing(archive)
    assert f"certify/{suite_id}/suite.json" in names and f"certify/{suite_id}/status.json" in names
    assert len([n for n in names if n.startswith("sweeps/") and n.endswith("/sweep.json")]) == 2
    assert len([n for n in names if re.search(r"/log-[^/]*\.out$", n)]) == 3
    assert len([n for n in names if n.endswith("/recipe.json")]) == 3
    assert not [n for n in names if PROFILES.search(n)]
    archived = subprocess.run(
        ["tar", "--zstd", "-xOf", str(archive), f"certify/{suite_id}/status.json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(archived.stdout)["verdict"] == "exercised"


def test_the_certification_walkthrough_is_the_promised_workflow():
    commands = [
        c.split()[:2] for c in walkthrough_commands("Certifying a cluster") if c.startswith("llmb ")
    ]
    assert commands == [
        ["llmb", "certify"],
        ["llmb", "certify"],
        ["llmb", "certify"],
        ["llmb", "archive"],
    ]


@pytest.mark.slurm
def test_readme_certification_walkthrough_runs_as_written(slurm, tmp_path):
    pytest.importorskip("torch", reason="the walkthrough trains proxies")
    script = "set -euo pipefail\n" + "\n".join(walkthrough_commands("Certifying a cluster")) + "\n"
    env = {
        k: v for k, v in os.environ.items() if k not in ("LLMB_INSTALL", "LLMB_BACKEND", "GPU_TYPE")
    }
    env.update(slurm.env())
    # where llmb is installed
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["TMPDIR"] = str(tmp_path)  # the block's `cd "$(mktemp -d)"` lands here
    proc = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=3600
    )  # a hang guard only
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [archive] = tmp_path.glob("*/llmb-certification-cert-*.tar.zst")
    assert re.fullmatch(
        rf"llmb-certification-cert-[0-9a-f]{{6}}-{time.strftime('%Y%m')}\d\d\.tar\.zst",
        archive.name,
    )
    names = _zstd_listing(archive)
    assert len([n for n in names if re.search(r"/log-[^/]*\.out$", n)]) == 1
    assert (
        "EXERCISED (proxy: certifies nothing), every workload ran and met its gates" in proc.stdout
    )
    assert "PASS, every workload passed" not in proc.stdout
