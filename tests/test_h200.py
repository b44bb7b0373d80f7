"""H200s run the H100's recipes (issue 33): the H200 is the H100's chip with more and faster memory, and
NVIDIA's H200 page prints the H100 SXM's dense tensor figures. ``data/gpus.yaml`` says so as data
(``h200: runs_recipes_of: h100``); ``llmb.recipes.gpus.recipes_of`` answers it for every lookup of a recipe
row, a published figure, an MFU peak and a plausibility bound, while the run keeps its own GPU type and
memory.

nvidia-smi cannot run here: the GPU check is fed nvidia-smi's recorded line format for an H200
("NVIDIA H200, 580.159.04", what the issue's H200 printed), and the end-to-end run uses a script on PATH
answering as one (tests/test_provenance.py's fake)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from experiment_dirs import make_run, nemotronh_56b_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402
from llmb.paths import packaged_data  # noqa: E402
from llmb.recipes import gpus as gpus_module  # noqa: E402
from llmb.recipes.gpus import build_catalogue, catalogue, peak_source, recipes_of  # noqa: E402
from llmb.recipes.planning import make_plan  # noqa: E402
from llmb.recipes.records import RecipeRequest  # noqa: E402
from llmb.results.collect import Collector  # noqa: E402
from llmb.runs import gpu_seen  # noqa: E402

NOTE = "h200 runs the h100 recipe (same chip, more memory: NVIDIA's H200 product page)"
H200_NODE = (
    "NVIDIA H200, 580.159.04\n"  # nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
)
H100_NODE = "NVIDIA H100 80GB HBM3, 550.54.15\n"
LAYOUT = ("tp", "pp", "cp", "ep", "etp", "vp", "dp", "mbs", "gbs", "ga", "seq_len", "layers")
LAYOUT += ("fsdp", "cuda_graphs", "recompute_layers", "offload_layers", "nodes", "gpus_per_node")
# Nemotron-H 56B FP8 on 256 H100s: its recipe publishes the step time (15.892 s) and MFU (26.86%)
NH256 = "pretrain_nemotronh_56b_fp8_gpus256_tp8_pp1_cp1_vpNone_mbs1_gbs768"


def request(gpu: str, **kw) -> RecipeRequest:
    asked = {"workload": "llama31", "size": "8b", "dtype": "bf16", "gpus": 8} | kw
    return RecipeRequest(gpu=gpu, **asked)


# ------------------------------------------------------------------ the data


def test_the_mapping_is_data_in_gpus_yaml():
    with open(packaged_data("gpus.yaml"), encoding="utf-8") as handle:
        raw = yaml.safe_load(handle)
    assert raw["h200"]["runs_recipes_of"] == "h100" and "H200 product page" in raw["h200"]["why"]
    assert "peak_tflops" not in raw["h200"]  # its peaks are the H100's, written once
    h200, h100 = catalogue()["h200"], catalogue()["h100"]
    assert dict(h200.peak_tflops) == dict(h100.peak_tflops) == {"bf16": 989.0, "fp8": 1979.0}
    assert (h200.memory_gb, h100.memory_gb) == (141.0, 80.0)  # memory: its own
    assert recipes_of("h200") == recipes_of("H200") == "h100"
    assert [recipes_of(g) for g in ("h100", "b200", "gb300")] == ["h100", "b200", "gb300"]
    assert recipes_of("a100") == "a100" and recipes_of(None) is None
    # every type either runs its own recipes or one that does (no chains)
    for name, spec in catalogue().items():
        assert spec.runs_recipes_of in (None, *catalogue()), name
        assert not spec.runs_recipes_of or not catalogue()[spec.runs_recipes_of].runs_recipes_of


def test_a_chain_or_an_unknown_type_in_the_data_is_refused():
    with open(packaged_data("gpus.yaml"), encoding="utf-8") as handle:
        raw = yaml.safe_load(handle)
    for bad in ("a100", "h200"):  # unknown; itself runs another's
        with pytest.raises(ValueError, match="runs_recipes_of"):
            build_catalogue(raw | {"h200x": raw["h200"] | {"runs_recipes_of": bad}})
    without_why = {k: v for k, v in raw["h200"].items() if k != "why"}
    with pytest.raises(ValueError, match="without a `why`"):
        build_catalogue(raw | {"h200x": without_why})


@pytest.fixture
def with_type(tmp_path, monkeypatch):
    """gpus.yaml with one more GPU type (``spec``) added, as a user would add it; the catalogue is read
    afresh from it and back from the packaged file afterwards."""

    def add(name: str, spec: dict) -> None:
        with open(packaged_data("gpus.yaml"), encoding="utf-8") as handle:
            raw = yaml.safe_load(handle)
        changed = tmp_path / "gpus.yaml"
        changed.write_text(yaml.safe_dump(raw | {name: spec}))
        real = gpus_module.packaged_data
        monkeypatch.setattr(
            gpus_module,
            "packaged_data",
            lambda file: str(changed) if file == "gpus.yaml" else real(file),
        )
        catalogue.cache_clear()

    yield add
    catalogue.cache_clear()


def test_adding_a_type_that_runs_anothers_recipes_to_the_data_is_enough(host, with_type):
    with_type(
        "h100x",
        {
            "sm": 90,
            "gpus_per_node": 8,
            "memory_gb": 96,
            "runs_recipes_of": "h100",
            "why": "a test's H100 with 96 GB",
        },
    )
    plan = make_plan(host, request("h100x", dtype="fp8"))
    official = make_plan(host, request("h100", dtype="fp8"))
    assert plan.recipe.gpu == "h100x" and plan.memory.capacity_gb == 96
    assert [getattr(plan.recipe, k) for k in LAYOUT] == [
        getattr(official.recipe, k) for k in LAYOUT
    ]
    assert "h100x runs the h100 recipe (a test's H100 with 96 GB)" in plan.warnings
    peak = peak_source("h100x", "fp8")
    assert (peak.tflops, peak.of_gpu) == (1979.0, "h100")


# ------------------------------------------------------------------ plan and run


@pytest.mark.parametrize(
    ("workload", "size", "dtype", "gpus"),
    [
        ("llama31", "8b", "bf16", 8),
        ("llama31", "8b", "fp8", 8),
        ("llama31", "70b", "fp8", 64),
        ("nemotronh", "56b", "fp8", 256),
    ],
)
def test_plan_on_h200_resolves_the_h100_row_with_the_h200s_memory(
    host, workload, size, dtype, gpus
):
    asked = {"workload": workload, "size": size, "dtype": dtype, "gpus": gpus}
    h200, h100 = (
        make_plan(host, request("h200", **asked)),
        make_plan(host, request("h100", **asked)),
    )
    assert [getattr(h200.recipe, k) for k in LAYOUT] == [getattr(h100.recipe, k) for k in LAYOUT]
    assert h200.recipe.provenance is h100.recipe.provenance  # the H100 table's row
    assert h200.recipe.gpu == "h200"  # the run keeps its own GPU type
    assert (h200.memory.capacity_gb, h100.memory.capacity_gb) == (141.0, 80.0)
    assert h200.memory.total_gb == h100.memory.total_gb
    assert h200.recipe.warnings[0] == NOTE and NOTE not in h100.warnings
    # the H100's published figures and container
    assert h200.expected is h100.expected
    assert [f.document for f in h200.other_figures] == [f.document for f in h100.other_figures]
    assert h200.container == h100.container


def test_plan_says_whose_recipe_figure_and_peak(cli):
    args = ["plan", "nemotronh", "--size", "56b", "--dtype", "fp8", "--gpus", "256"]
    text = cli(*args, "--gpu", "h200").out
    assert f"  - {NOTE}" in text
    assert "on 256 h200 GPUs" in text and "GiB per GPU of 141 GiB" in text
    assert "  expected     the h100's published figure: step 15.892 s" in text
    assert (
        "  MFU peak     FP8 1979 TFLOP/s dense per GPU, the h100's (NVIDIA LLM Benchmarking Collection "
        "README; the same figure for the h200: NVIDIA H200 Tensor Core GPU product page)"
    ) in text
    shown = json.loads(cli(*args, "--gpu", "h200", "--json").out)
    official = json.loads(cli(*args, "--gpu", "h100", "--json").out)
    assert shown["gpu"] == "h200" and shown["expected"] == official["expected"]
    assert shown["mfu_peak"]["tflops"] == 1979 and shown["mfu_peak"]["of_gpu"] == "h100"
    assert NOTE in shown["warnings"]
    # a GPU type llama31 has no table for, and that runs none's recipes, is still refused, naming h200
    refused = cli("plan", "llama31", "--size", "8b", "--gpu", "a100", "--gpus", "8")
    assert refused.code == 2 and "h100, h200" in refused.err


def test_a_peak_of_anothers_names_both_sources():
    for dtype, value in (("bf16", 989.0), ("fp8", 1979.0)):
        found = peak_source("h200", dtype)
        assert (found.tflops, found.of_gpu, found.same_for) == (value, "h100", "h200")
        assert found.document == "NVIDIA LLM Benchmarking Collection README"
        assert found.confirmed_by == "NVIDIA H200 Tensor Core GPU product page"
        assert found.others == ()
    assert peak_source("h200", "nvfp4") is None  # Hopper has no FP4 tensor cores
    assert peak_source("h100", "bf16").of_gpu is None


def test_preflight_expects_the_h100_gemm_peak_and_the_h200s_own_memory():
    from llmb.preflight.expected import expected

    h200 = expected("h200")
    assert (h200.gemm, h200.memory, h200.intra, h200.inter) == (989.0, 4800.0, 450.0, 50.0)
    assert "the h100's" in h200.sources["gemm"] and "H200" in h200.sources["gemm"]


# ------------------------------------------------------------------ the GPU check


def test_the_gpu_check_sends_an_h200_to_gpu_h200_which_now_resolves(host):
    on_h200 = gpu_seen.parse_query(H200_NODE * 8)
    assert gpu_seen.check("h200", on_h200) == []
    with pytest.raises(gpu_seen.GpuMismatchError) as caught:
        gpu_seen.check("h100", on_h200)
    message = str(caught.value)
    assert "runs on NVIDIA H200 (h200) but the run was planned for h100" in message
    assert "Run it with --gpu h200" in message and "\n" not in message
    assert "recorded as a h100 run" in message  # not "MFU would be wrong": the peaks are the same
    # and what it says to do works: no loop back to "no GPU type 'h200'"
    assert host.resolve(request("h200")).gpu == "h200"
    # the other way round too
    with pytest.raises(gpu_seen.GpuMismatchError, match="Run it with --gpu h100"):
        gpu_seen.check("h200", gpu_seen.parse_query(H100_NODE * 8))
    assert gpu_seen.check("h100", gpu_seen.parse_query(H100_NODE * 8)) == []


# ------------------------------------------------------------------ results and compare


def h200_run(root: Path, gpu: str = "h200") -> Path:
    """A Nemotron-H 56B FP8 run on 256 GPUs at the recipe's published step time (NeMo 2 log format)."""
    return nemotronh_56b_run(root, gpu=gpu)


def test_an_h200_runs_mfu_is_against_the_h100_peak_with_its_source(host, tmp_path):
    h200_run(tmp_path / "h200")
    h200_run(tmp_path / "h100", gpu="h100")
    (h200,) = Collector(host).collect([str(tmp_path / "h200")])
    (h100,) = Collector(host).collect([str(tmp_path / "h100")])
    r, o = h200.result, h100.result
    assert r.context.gpu == "h200" and r.status == "success"
    assert round(r.mfu_pct, 2) == 26.86  # the published worked example, against 1979
    assert (r.mfu_pct, r.mfu_bf16_pct) == (o.mfu_pct, o.mfu_bf16_pct)
    assert r.mfu_bf16_pct == pytest.approx(r.mfu_pct * 1979 / 989)
    assert (
        "MFU is against the FP8 peak 1979 TFLOP/s dense per GPU, the h100's (NVIDIA LLM Benchmarking "
        "Collection README; the same figure for the h200: NVIDIA H200 Tensor Core GPU product page)"
    ) in r.notes
    assert not any("MFU is against" in n for n in o.notes)  # an H100's own peak needs no note
    # judged against the H100's published figure, labelled as the H100's
    assert r.reference["label"] == "published (h100)" and r.reference["of_gpu"] == "h100"
    assert r.reference_step_time_ms == o.reference_step_time_ms == pytest.approx(15892.0)
    assert (r.reference_mfu_pct, r.reference_mfu_bf16_pct) == (
        o.reference_mfu_pct,
        o.reference_mfu_bf16_pct,
    )


def test_compare_judges_an_h200_run_against_the_h100_figure_and_says_so(cli, tmp_path):
    h200_run(tmp_path / "runs")
    (row,) = json.loads(cli("compare", str(tmp_path / "runs"), "--json").out)
    assert row["gpu"] == "h200"
    (verdict,) = row["verdicts"]
    assert verdict["against"] == "published (h100)" and verdict["outcome"] == "pass"
    assert verdict["ratio"] == pytest.approx(1.0, abs=0.01)
    assert row["reference"]["figure"]["of_gpu"] == "h100"
    text = cli("compare", str(tmp_path / "runs")).out
    assert "published (h100)" in text and "PASS" in text
    assert "; published (h100) 15,892.0 ms" in text
    results = cli("results", str(tmp_path / "runs")).out
    assert "VS PUBLISHED is against published (h100)" in results
    # an H100 run of the same is judged as before
    h200_run(tmp_path / "h100", gpu="h100")
    (own,) = json.loads(cli("compare", str(tmp_path / "h100"), "--json").out)
    assert own["verdicts"][0]["against"] == "published"


def test_an_h200_run_far_beyond_the_h100s_figures_is_implausible(host, tmp_path):
    # ten times the published step rate: no H200 does that on the H100's recipe
    make_run(
        tmp_path,
        NH256,
        loggen.nemo2_lines(
            range(0, 50),
            step_s=dict.fromkeys(range(50), 1.5892),
            gbs=768,
            tflops=dict.fromkeys(range(50), 0.0),
        ),
        recipe={
            "workload": "nemotronh",
            "size": "56b",
            "gpu": "h200",
            "dtype": "fp8",
            "gpus": 256,
            "gbs": 768,
            "seq_len": 8192,
        },
    )
    (collected,) = Collector(host).collect([str(tmp_path)])
    assert collected.result.status == "implausible"
    assert "h200's FP8 dense peak of 1,979" in collected.result.reason


# ------------------------------------------------------------------ install and sweeps


def test_install_and_published_sweeps_take_the_h100s_recipes(host):
    from llmb.install.installer import select
    from llmb.runs.sweeps import published_configurations

    workloads = host.workloads()
    on_h200 = {
        (w.name, v.name): sizes
        for w, v, sizes in select(list(workloads.values()), "h200", None, False)
    }
    on_h100 = {
        (w.name, v.name): sizes
        for w, v, sizes in select(list(workloads.values()), "h100", None, False)
    }
    assert on_h200 == on_h100 and on_h200
    h200 = published_configurations(workloads, "h200")
    h100 = published_configurations(workloads, "h100")
    assert {p.gpu for p in h200} == {"h200"}
    assert [replace(p, gpu="h100") for p in h200] == h100


# ------------------------------------------------------------------ a real run


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch") is None,
    reason="the torch engine needs torch",
)
def test_a_run_asked_for_h100_on_an_h200_node_says_gpu_h200_which_runs(llmb_proc, tmp_path):
    from test_provenance import PROXY, fake_nvidia_smi

    smi = fake_nvidia_smi(tmp_path / "bin", H200_NODE * 2)
    env = {
        "LLMB_INSTALL": str(tmp_path / "install"),
        "LLMB_NO_CACHE": "1",
        "PATH": f"{smi}:{os.environ['PATH']}",
    }
    result = llmb_proc("run", *PROXY, "--json", env=env, timeout=900)
    summary = json.loads(result.out)
    assert result.code == 1 and summary["state"] == "FAILED", result.err[-3000:]
    assert "Run it with --gpu h200" in summary["reason"]
    # what it says to do is taken (a dry run: the fake node cannot train, having no GPU behind it)
    asked = [a if a != "h100" else "h200" for a in PROXY]
    again = llmb_proc("run", *asked, "--dry-run", env=env)
    assert again.code == 0, again.err
    assert "h200 runs the h100 recipe" in again.err and "no GPU type" not in again.err


def test_the_run_summary_of_an_h200_run_names_the_peak_and_whose_figure():
    from llmb.lifecycle.follow import summary
    from llmb.runs.jobs import Job, JobStatus

    job = Job(
        id="local-1",
        backend="local",
        workload="llama31",
        experiment="x",
        run_dir="/r",
        log="/r/log",
        ranks=1,
        submitted_at="2026-11-27T00:00:00Z",
    )
    row = {
        "status": "success",
        "gpu": "h200",
        "dtype": "bf16",
        "window": "35-44",
        "samples_in_window": 10,
        "time_mean_ms": 1169.0,
        "time_std_dev_ms": 1.0,
        "tokens_per_s": 28051.0,
        "tflops_per_gpu_mean": 568.0,
        "tflops_source": "log",
        "mfu_pct": 57.43,
        "mfu_bf16_pct": 57.43,
        "reference_step_time_ms": 1200.0,
        "reference_delta_pct": -2.6,
    }
    text = summary(JobStatus(job, "SUCCEEDED", None, None, {"result": row}))
    assert (
        "MFU         57.43%\n              against the BF16 peak 989 TFLOP/s dense per GPU, the h100's"
        in text
    )
    assert "difference; the h100's figure)" in text
    own = summary(JobStatus(job, "SUCCEEDED", None, None, {"result": {**row, "gpu": "h100"}}))
    assert "against the BF16 peak" not in own and "the h100's figure" not in own
