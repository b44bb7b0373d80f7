"""``llmb compare`` judges deterministically, against a figure it can name.

The case that started it: a run in the layout NVIDIA's llmb-run writes for
NeMo 2 (``pretrain_llama3.1_8b_fp8_8``: the name carries no GPU type), 8% slower
than the published 9.33 s. Without a GPU type it must not pass; what an
earlier command assumed must not change the verdict; what the run recorded
(provenance) or the cluster file says decides it, and the table says which.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from experiment_dirs import make_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402

NEMO2 = "pretrain_llama3.1_8b_fp8_8"  # the llmb-run name for NeMo 2's Llama 3.1 8B FP8 on 8 GPUs
MB_BF16 = "pretrain_llama3_8b_bf16_gpus8_tp1_pp1_cp2_vpNone_ep1_etpNone_mbs1_gbs128"
NOT_COMPARED_EXIT = 3
MB_RECIPE = {  # the recipe.json of an official Megatron-Bridge 8b BF16 run on 8 H100s
    "workload": "llama31",
    "variant": "megatron-bridge",
    "size": "8b",
    "gpu": "h100",
    "dtype": "bf16",
    "gpus": 8,
    "gbs": 128,
    "seq_len": 8192,
}


@pytest.fixture
def experiments(install_root):
    return install_root / "workloads" / "llama31" / "experiments"


def slow_nemo2_run(root: Path, **kwargs) -> Path:
    """50 NeMo 2 iterations at 10.08 s: 92.6% of the published 9.33 s (8 H100, FP8)."""
    return make_run(
        root,
        NEMO2,
        loggen.nemo2_lines(range(50), step_s={i: 10.08 for i in range(50)}),
        stamp="20251106101010",
        **kwargs,
    )


def verdicts(result) -> list[dict]:
    return [v for row in json.loads(result.out) for v in row["verdicts"]]


def test_a_run_without_a_gpu_type_is_not_compared_and_fails_the_gate(cli, experiments):
    run = slow_nemo2_run(experiments)
    result = cli("compare", str(run))
    assert result.code == NOT_COMPARED_EXIT, result.out + result.err
    assert "NOT_COMPARED" in result.out
    assert "GPU type unknown: the log name does not record it; pass --gpu" in result.out
    assert "could not be compared" in result.err
    assert cli("compare", str(run), "--allow-missing").code == 0


def test_with_gpu_the_regression_is_found_and_nothing_remembered_changes_a_later_verdict(
    cli, experiments
):
    run = slow_nemo2_run(experiments)
    flagged = cli("compare", str(run), "--gpu", "h100", "--json")
    assert flagged.code == 1
    [verdict] = verdicts(flagged)
    assert verdict["outcome"] == "regress" and verdict["ratio"] == pytest.approx(9.33 / 10.08)
    [row] = json.loads(flagged.out)
    assert (row["gpu"], row["gpu_source"]) == ("h100", "--gpu")
    # The results database now holds this run, parsed with --gpu h100; a later plain compare
    # must give the same verdict it gave before (not compared), not the remembered GPU's.
    assert cli("results", str(run), "--gpu", "h100").code == 0
    later = cli("compare", str(run), "--json")
    assert later.code == NOT_COMPARED_EXIT
    [verdict] = verdicts(later)
    assert verdict["outcome"] == "not_compared"
    assert json.loads(later.out)[0]["gpu"] is None
    # and the flag still decides when given
    assert cli("compare", str(run), "--gpu", "h100").code == 1


def test_the_gpu_type_the_run_recorded_in_its_provenance_decides(cli, experiments):
    run = slow_nemo2_run(experiments)
    (run / "provenance.json").write_text(
        json.dumps(
            {
                "submission": {"gpu": "h100", "image": {"reference": "nvcr.io#nvidia/nemo:25.09"}},
                "job": {"gpu": {"type": "h100", "name": "NVIDIA H100 80GB HBM3", "count": 8}},
            }
        )
    )
    result = cli("compare", str(run), "--json")
    assert result.code == 1
    [row] = json.loads(result.out)
    assert (row["gpu"], row["gpu_source"]) == ("h100", "provenance")
    # The figure was measured with an older container than the run's, and says so.
    assert "older than the run's nemo:25.09" in row["verdicts"][0]["detail"]
    text = cli("compare", str(run)).out
    assert "h100 (provenance.json)" in text and "REGRESS" in text
    [listed] = cli("results", str(run), "--json").json()
    assert (listed["gpu"], listed["gpu_source"]) == ("h100", "provenance")


def test_the_cluster_files_gpu_is_used_and_named(cli, experiments, install_root):
    run = slow_nemo2_run(experiments)
    install_root.mkdir(parents=True, exist_ok=True)
    (install_root / "cluster.yaml").write_text("gpu: h100\n")
    result = cli("compare", str(run))
    assert result.code == 1
    assert "h100 (cluster file)" in result.out and "REGRESS" in result.out
    # the file changed: so does the verdict's basis
    (install_root / "cluster.yaml").write_text("gpu: b200\n")
    assert "b200 (cluster file)" in cli("compare", str(run)).out


def test_plan_names_the_other_variants_figure(cli):
    text = cli(
        "plan", "llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8"
    ).out
    assert (
        "Llama 3.1 Megatron-Bridge recipe" in text
        and "publishes no figure for this configuration" in text
    )
    assert "the nemo2 recipe's figure: 12.27 s per step, 85,459 tokens/s" in text
    assert (
        "Llama 3.1 NeMo 2 recipe (NVIDIA LLM Benchmarking Collection, nemo:25.02.01) table 4, row 1"
        in text
    )
    assert "llmb compare --reference nemo2" in text
    plan = json.loads(
        cli(
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
            "--json",
        ).out
    )
    assert plan["expected"] is None
    [figure] = [f for f in plan["other_figures"] if f["source"] == "nemo2"]
    assert (figure["step_time_ms"], figure["gbs"], figure["container"]) == (
        12270.0,
        128,
        "25.02.01",
    )


def test_one_reference_policy_results_compare_report_and_certify_judge_alike(
    cli, experiments, host
):
    """Issue 31, case 3: the Megatron-Bridge recipe publishes no figure for 8b BF16 on 8 H100s; the NeMo 2
    recipe does, at the same GBS 128. Before, compare said NOT_COMPARED (exit 3), results '-', report drew
    no published line, and certify alone judged the run against the NeMo 2 figure."""
    from llmb.certify.gates import FAIL, performance_gate
    from llmb.report.series import build_report
    from llmb.results.collect import Collector
    from llmb.results.experiments import find_runs

    run = make_run(
        experiments,
        MB_BF16,
        loggen.megatron_bridge_lines(range(1, 51), step_ms={i: 13500.0 for i in range(1, 51)}),
        recipe=MB_RECIPE,
    )
    default = cli("compare", str(run), "--json")
    assert default.code == 1  # 12.27 / 13.5 = 90.9%: a regression, by default
    [verdict] = verdicts(default)
    assert (verdict["against"], verdict["outcome"]) == ("nemo2", "regress")
    assert verdict["ratio"] == pytest.approx(12.27 / 13.5)
    assert "the nemo2 recipe's figure" in verdict["detail"] and "by step time" in verdict["detail"]
    assert json.loads(default.out)[0]["reference"]["figure"]["document"].startswith(
        "Llama 3.1 NeMo 2 recipe"
    )

    [row] = cli("results", str(run), "--format", "json").json()
    assert row["reference_step_time_ms"] == pytest.approx(12270.0)
    assert row["reference_delta_pct"] == pytest.approx(100 * (13500 - 12270) / 12270, abs=0.01)

    [series] = build_report([row], host.workloads()).series
    assert [(r.gpus, r.step_time_s) for r in series.published][0] == (8, pytest.approx(12.27))
    assert any("from other documents" in n and "NeMo 2 recipe" in n for n in series.notes)

    [location] = find_runs([str(run)])
    gate = performance_gate(Collector(host).collect_one(location).result)
    assert gate.outcome == FAIL and gate.value == f"{12270 / 13500:.1%}"
    assert "the nemo2 recipe's figure: Llama 3.1 NeMo 2 recipe" in gate.detail

    strict = cli("compare", str(run), "--reference", "recipe", "--json")
    assert strict.code == NOT_COMPARED_EXIT
    [verdict] = verdicts(strict)
    assert verdict["outcome"] == "not_compared"
    assert "publishes no figure for 8b bf16 on 8 h100 GPUs" in verdict["detail"]
    assert "12.27 s per step (--reference nemo2)" in verdict["detail"]


def test_a_figure_at_another_batch_size_is_never_a_step_time_reference(cli, experiments):
    """Issue 31, case 4: the performance summary's 70b FP8 figure on 64 H100s was measured at GBS 256; the
    recipe runs GBS 128. plan took its 19.69 s for the time limit, compare showed it as PUBLISHED ms."""
    args = ("plan", "llama31", "--size", "70b", "--gpu", "h100", "--dtype", "fp8", "--gpus", "64")
    plan = json.loads(cli(*args, "--json").out)
    [summary] = [f for f in plan["other_figures"] if f["source"] == "summary"]
    assert (summary["gbs"], summary["other_batch_of"]) == (256, 128)
    assert plan["time_limit"]["step_s"] != pytest.approx(summary["step_time_ms"] / 1000)
    assert plan["judged_against"] == "nemo2"
    text = cli(*args)
    assert "19.69 s per step at GBS 256" in text.out
    assert "not this configuration's GBS 128: not comparable by step time" in " ".join(
        text.out.split()
    )

    run = make_run(
        experiments,
        "pretrain_llama3_70b_fp8_gpus64_tp4_pp8_cp1_vp5_ep1_etpNone_mbs1_gbs128",
        loggen.megatron_bridge_lines(range(1, 51), step_ms={i: 9900.0 for i in range(1, 51)}),
    )
    result = cli("compare", str(run), "--gpu", "h100", "--reference", "summary", "--json")
    [verdict] = verdicts(result)
    assert verdict["reference_ms"] is None  # never 19,692 beside a 9.9 s run
    assert "tokens/s per GPU (GBS 128 vs 256)" in verdict["detail"]
    assert "not comparable by step time" in verdict["detail"]
    table = cli("compare", str(run), "--gpu", "h100", "--reference", "summary")
    assert "19,692" not in table.out.split("\n\n")[0]


def test_an_unknown_reference_source_is_refused_with_the_valid_ones(cli, experiments):
    result = cli("compare", str(slow_nemo2_run(experiments)), "--reference", "vibes")
    assert result.code == 2
    assert (
        "--reference vibes" in result.err
        and "valid: auto, recipe" in result.err
        and "nemo2" in result.err
    )


def test_a_proxy_run_is_never_a_pass(cli, experiments):
    run = make_run(
        experiments,
        MB_BF16,
        loggen.megatron_bridge_lines(range(1, 51)),
        recipe={
            **MB_RECIPE,
            "proxy": True,
            "layers": 2,
        },
    )
    result = cli("compare", str(run), "--json")
    assert result.code == NOT_COMPARED_EXIT
    [verdict] = verdicts(result)
    assert verdict["outcome"] == "not_compared" and verdict["detail"].startswith("proxy run")


def test_the_closing_line_counts_regressions_apart_from_runs_without_a_result():
    """Issue 34: "15 regressed or had no result" was printed when nothing regressed; a failure and a
    regression are different news. Issue 40: it counts runs, each once ("7 comparisons" were counted
    for 4 runs), and with --baseline says which comparisons decide the exit status."""
    from llmb.cli.compare_cmd import closing_lines
    from llmb.results.compare import Verdict

    def published(outcome):
        return [Verdict("published", outcome, None, None, "")]

    def run(status, outside=False):
        return [Verdict("run", status, None, None, "", outside=outside)]

    runs = [published("pass"), run("failed"), run("incomplete"), run("failed")]
    assert closing_lines(runs, "published", 0.95) == [
        "4 runs: 1 passed, 0 regressed, 3 had no result (failed, incomplete), 0 not compared "
        "(threshold 95%)."
    ]
    assert closing_lines([published("regress")], "published", 0.95)[0].startswith(
        "1 run: 0 passed, 1 regressed"
    )
    both = [
        Verdict("published", "regress", None, None, ""),
        Verdict("baseline", "pass", None, None, ""),
    ]
    unrelated = [
        Verdict("published", "pass", None, None, ""),
        Verdict("baseline", "not_compared", None, None, "", outside=True),
    ]
    lines = closing_lines([both, unrelated, run("failed", outside=True)], "baseline", 0.95)
    assert lines == [
        "Against the baseline, 1 run: 1 passed, 0 regressed, 0 had no result, 0 not compared; 2 other "
        "runs with no baseline run of their configuration (threshold 95%; these decide the exit status).",
        "Against the published figures, 3 runs: 1 passed, 1 regressed, 1 had no result (failed), "
        "0 not compared.",
    ]


def _mb_run(root, ms: float, stop: int = 50, stamp: str = "1766132151"):
    steps = range(1, stop + 1)
    lines = loggen.megatron_bridge_lines(
        steps, step_ms=dict.fromkeys(steps, ms), tflops=dict.fromkeys(steps, 500.0)
    )
    return make_run(root, MB_BF16, lines, recipe=MB_RECIPE, stamp=stamp)


def test_compare_with_a_baseline_is_a_ci_gate_on_the_comparisons_asked_for(
    cli, experiments, tmp_path
):
    """Issue 40: `compare --baseline JOB --workload llama31` exited 1 after "1 passed, 0 regressed"
    because an unrelated run that failed earlier was in the install, and counted "7 comparisons" for
    4 runs. The exit status is the baseline comparisons'; an unrelated run is listed, outside them."""
    baseline = _mb_run(tmp_path / "baseline", 12270.0)
    _mb_run(experiments, 12300.0)  # the run asked about: within 95% of the baseline
    unrelated = "pretrain_llama3_70b_bf16_gpus64_tp4_pp4_cp2_vp5_ep1_etpNone_mbs1_gbs128"
    make_run(
        experiments,
        unrelated,
        [*loggen.megatron_bridge_lines(range(1, 20)), loggen.OOM],
        recipe={**MB_RECIPE, "size": "70b", "gpus": 64},
    )
    result = cli("compare", "--baseline", str(baseline), "--workload", "llama31")
    assert result.code == 0, result.out + result.err
    assert (
        "Against the baseline, 1 run: 1 passed, 0 regressed, 0 had no result, 0 not compared; "
        "1 other run with no baseline run of its configuration"
    ) in " ".join(result.out.split())
    assert "Against the published figures, 2 runs: " in " ".join(result.out.split())
    rows = json.loads(cli("compare", "--baseline", str(baseline), "--json").out)
    assert sorted(row["answer"] for row in rows) == ["outside", "pass"]

    # a run of the baseline's configuration that failed is part of the question: exit 1
    _mb_run(experiments, 12300.0, stop=30, stamp="1766139999")
    failed = cli("compare", "--baseline", str(baseline), "--workload", "llama31")
    assert failed.code == 1, failed.out
    assert (
        "Against the baseline, 2 runs: 1 passed, 0 regressed, 1 had no result (incomplete)"
        in " ".join(failed.out.split())
    )
