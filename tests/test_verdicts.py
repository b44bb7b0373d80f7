"""How a verdict is reached (docs/verdicts.md), through the real CLI.

The matrix: every run status (success, failed, incomplete, implausible) x every reference source the one
policy can pick (the run's own recipe, the NeMo 2 recipe, Megatron-Bridge's performance summary, none) x
every source of the GPU type (recipe.json, provenance.json, --gpu, the cluster file, unknown) x tuned or
official, each judged by ``llmb compare``: its exit code and its words. No combination with an impossible
figure exits 0.

The logs are synthetic, in the formats of the real ones (benchmarks/loggen.py); their figures are chosen
to be possible (about 600 TFLOP/s per GPU on the workload's formula) except where the case is an
impossible one (1.2 x the dense peak on both FLOP counts).
"""

from __future__ import annotations

import itertools
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from experiment_dirs import make_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402
from llmb.recipes.gpus import catalogue  # noqa: E402

FLOPS_8B = 474422087516160.0  # Llama 3.1 8B's model FLOPs per sample at sequence 8192 (llmb plan)
FLOPS_405B = 2.15074782314496e16
MB_TO_FORMULA = 0.889  # Megatron-Bridge's count over the workload's formula for 8b (llmb plan)


@dataclass(frozen=True)
class Config:
    """One configuration whose published figure comes from one source under the policy."""

    reference: str  # own | nemo2 | summary | none
    name: str  # the experiment name llmb-run gives it
    tuned_name: str  # the same name with a layout the recipe does not use
    fmt: str  # megatron_bridge | nemo2
    variant: str
    size: str
    gpu: str
    dtype: str
    gpus: int
    gbs: int
    flops: float
    published_ms: float | None
    words: str  # how the verdict names the figure's document


CONFIGS = {
    c.reference: c
    for c in (
        Config(
            "own",
            "pretrain_llama3.1_8b_bf16_8",
            "pretrain_llama3.1_8b_bf16_8",  # a NeMo 2 name has no layout: tuned through recipe.json
            "nemo2",
            "nemo2",
            "8b",
            "h100",
            "bf16",
            8,
            128,
            FLOPS_8B,
            12270.0,
            "Llama 3.1 NeMo 2 recipe",
        ),
        Config(
            "nemo2",
            "pretrain_llama3_8b_bf16_gpus8_tp1_pp1_cp2_vpNone_ep1_etpNone_mbs1_gbs128",
            "pretrain_llama3_8b_bf16_gpus8_tp1_pp1_cp1_vpNone_ep1_etpNone_mbs4_gbs128",
            "megatron_bridge",
            "megatron-bridge",
            "8b",
            "h100",
            "bf16",
            8,
            128,
            FLOPS_8B,
            12270.0,
            "the nemo2 recipe's figure",
        ),
        Config(
            "summary",
            "pretrain_llama3_8b_fp8_gpus8_tp1_pp1_cp1_vpNone_ep1_etpNone_mbs2_gbs128",
            "pretrain_llama3_8b_fp8_gpus8_tp2_pp1_cp1_vpNone_ep1_etpNone_mbs2_gbs128",
            "megatron_bridge",
            "megatron-bridge",
            "8b",
            "b200",
            "fp8",
            8,
            128,
            FLOPS_8B,
            4280.041797283177,
            "the performance summary's figure",
        ),
        Config(
            "none",
            "pretrain_llama31_405b_fp8_gpus128_tp8_pp8_cp2_vp8_ep1_etp2_mbs1_gbs64",
            "pretrain_llama31_405b_fp8_gpus128_tp8_pp8_cp2_vp4_ep1_etp2_mbs1_gbs64",
            "megatron_bridge",
            "megatron-bridge",
            "405b",
            "h100",
            "fp8",
            128,
            64,
            FLOPS_405B,
            None,
            "no published document has a figure",
        ),
    )
}
STATUSES = ("success", "failed", "incomplete", "implausible")
GPU_SOURCES = ("recipe", "provenance", "flag", "cluster file", "unknown")


def step_ms(config: Config, status: str) -> float:
    """A possible step time (the published one at 99% throughput, else ~600 TFLOP/s/GPU); for an
    implausible run, one at 1.2 x the dense peak on the workload's formula."""
    if status == "implausible":
        peak = catalogue()[config.gpu].peak_tflops[config.dtype]
        return 1000.0 * config.gbs * config.flops / (1.2 * peak * 1e12) / config.gpus
    if config.published_ms is not None:
        return config.published_ms / 0.99
    return 1000.0 * config.gbs * config.flops / (600e12) / config.gpus


def log_lines(config: Config, status: str) -> list[str]:
    ms = step_ms(config, status)
    tflops = config.gbs * config.flops / (ms / 1000.0) / config.gpus / 1e12 * MB_TO_FORMULA
    if status == "implausible":  # the log's own count is above the peak too
        tflops = 1.2 * catalogue()[config.gpu].peak_tflops[config.dtype]
    first = 0 if config.fmt == "nemo2" else 1
    stop = {"success": 50, "implausible": 50, "failed": 30, "incomplete": 40}[status]
    steps = range(first, first + stop)
    if config.fmt == "nemo2":
        lines = loggen.nemo2_lines(
            steps,
            step_s=dict.fromkeys(steps, ms / 1000.0),
            tflops=dict.fromkeys(steps, tflops),
            gbs=config.gbs,
        )
    else:
        lines = loggen.megatron_bridge_lines(
            steps,
            step_ms=dict.fromkeys(steps, ms),
            tflops=dict.fromkeys(steps, tflops),
            gbs=config.gbs,
        )
    return [*lines, *([loggen.OOM] if status == "failed" else [])]


def make_case(root: Path, config: Config, status: str, gpu_source: str, tuned: bool) -> Path:
    """The run's directory, with what tells its GPU type (recipe.json, provenance.json or nothing)."""
    name = config.tuned_name if tuned else config.name
    recipe = None
    if gpu_source == "recipe" or (tuned and name == config.name):
        recipe = {
            "workload": "llama31",
            "variant": config.variant,
            "size": config.size,
            "dtype": config.dtype,
            "gpus": config.gpus,
            "gbs": config.gbs,
            "seq_len": 8192,
            **({"gpu": config.gpu} if gpu_source == "recipe" else {}),
            **({"tuned": [{"setting": "mbs", "published": 1, "run": 2}]} if tuned else {}),
        }
    run = make_run(root, name, log_lines(config, status), recipe=recipe)
    if gpu_source == "provenance":
        (run / "provenance.json").write_text(
            json.dumps({"submission": {"gpu": config.gpu}, "job": {"gpu": {"type": config.gpu}}})
        )
    return run


def expected(config: Config, status: str, gpu_source: str) -> tuple[int, str]:
    """compare's exit code and outcome, by the order docs/verdicts.md gives."""
    if status in ("failed", "incomplete"):
        return 1, status
    if gpu_source == "unknown":  # no peak to hold it against, no figure to look up
        return 3, "not_compared"
    if status == "implausible":
        return 1, "implausible"
    if config.reference == "none":
        return 3, "not_compared"
    return 0, "pass"


CASES = list(itertools.product(STATUSES, CONFIGS, GPU_SOURCES, (False, True)))


@pytest.mark.parametrize(
    ("status", "reference", "gpu_source", "tuned"),
    CASES,
    ids=[f"{s}-{r}-{g.replace(' ', '_')}-{'tuned' if t else 'official'}" for s, r, g, t in CASES],
)
def test_the_verdict_matrix(cli, tmp_path, monkeypatch, status, reference, gpu_source, tuned):
    config = CONFIGS[reference]
    install = tmp_path / "install"
    monkeypatch.setenv("LLMB_INSTALL", str(install))
    run = make_case(tmp_path / "runs", config, status, gpu_source, tuned)
    args = ["compare", str(run)]
    if gpu_source == "flag":
        args += ["--gpu", config.gpu]
    if gpu_source == "cluster file":
        install.mkdir(parents=True, exist_ok=True)
        (install / "cluster.yaml").write_text(f"gpu: {config.gpu}\n")
    result = cli(*args, "--json")
    code, outcome = expected(config, status, gpu_source)
    [row] = json.loads(result.out)
    [verdict] = row["verdicts"]
    assert (result.code, verdict["outcome"]) == (code, outcome), verdict["detail"]
    assert not (status == "implausible" and result.code == 0)
    detail = verdict["detail"]
    if outcome == "implausible":
        peak = catalogue()[config.gpu].peak_tflops[config.dtype]
        assert (
            f"above the {config.gpu}'s {config.dtype.upper()} dense peak of {peak:,.0f}" in detail
        )
        assert f"the GPU type is probably not {config.gpu}" in detail
    elif outcome == "pass":
        assert "by step time" in detail and config.words in detail
        assert verdict["reference_ms"] == pytest.approx(config.published_ms)
    elif outcome == "not_compared" and gpu_source == "unknown":
        assert "GPU type unknown" in detail
    elif outcome == "not_compared":
        assert config.words in detail
    else:
        assert detail.startswith(f"{status}: ")
    if gpu_source != "unknown":
        shown = {"flag": "--gpu"}.get(gpu_source, gpu_source)
        assert (row["gpu"], row["gpu_source"]) == (config.gpu, shown)
        assert bool(row["tuned"]) == tuned, row["tuned"]
    # the table says the same, and a tuned run is never shown as the official configuration
    text = cli(*args)
    assert text.code == code
    assert outcome.upper() in text.out
    if tuned and outcome == "pass":
        assert "tuned (" in text.out and "official configuration" in text.out


def test_an_impossible_result_is_implausible_everywhere_and_never_passes(cli, tmp_path):
    """Issue 31, case 1: a B300-class log (1,167 TFLOP/s per GPU on Megatron-Bridge's count) judged with
    --gpu h100 showed MFU 118.02% in results, and compare --reference nemo2 said PASS 212.3%, exit 0."""
    name = "pretrain_llama3_8b_bf16_gpus8_tp1_pp1_cp1_vpNone_ep1_mbs4_gbs128"
    steps = range(1, 51)
    run = make_run(
        tmp_path,
        name,
        loggen.megatron_bridge_lines(
            steps, step_ms=dict.fromkeys(steps, 5780.0), tflops=dict.fromkeys(steps, 1167.0)
        ),
    )
    [row] = cli("results", str(run), "--gpu", "h100", "--format", "json").json()
    assert row["status"] == "implausible"
    assert (
        "1,167.0 TFLOP/s/GPU (on the log) is above the h100's BF16 dense peak of 989"
        in row["failure_reason"]
        or "TFLOP/s/GPU (on the workload's formula) is above the h100's BF16 dense peak of 989"
        in row["failure_reason"]
    )
    assert "the GPU type is probably not h100; check --gpu" in row["failure_reason"]
    table = cli("results", str(run), "--gpu", "h100")
    assert "implausible" in table.out

    for reference in ("auto", "nemo2", "summary", "recipe"):
        compared = cli("compare", str(run), "--gpu", "h100", "--reference", reference, "--json")
        assert compared.code == 1, (reference, compared.out)
        [verdict] = json.loads(compared.out)[0]["verdicts"]
        assert verdict["outcome"] == "implausible"

    # on the GPU type it ran on, the same log is possible
    [row] = cli("results", str(run), "--gpu", "b300", "--format", "json").json()
    assert row["status"] == "success" and row["mfu_pct"] < 100


def test_tokens_per_second_far_beyond_every_published_figure_is_impossible(host):
    """Where no FLOP count is known, a throughput no document comes near is the finding."""
    from llmb.results.plausibility import BEYOND_PUBLISHED, best_published_per_gpu, impossible
    from llmb.results.records import RunContext

    workload = host.workloads()["llama31"]
    context = RunContext(
        "x",
        "name",
        workload="llama31",
        size="8b",
        gpu="h100",
        dtype="bf16",
        gpus=8,
        gpu_source="--gpu",
    )
    best, where = best_published_per_gpu(workload, context)
    # any precision, any GPU count: the performance summary's 8b FP8 row on H100s
    assert best == pytest.approx(14451.0) and "performance summary" in where and "row" in where
    assert BEYOND_PUBLISHED == 2.0
    just_possible = impossible(context, tflops={}, tokens_per_s=1.99 * best * 8, workload=workload)
    assert just_possible is None
    why = impossible(context, tflops={}, tokens_per_s=2.5 * best * 8, workload=workload)
    assert why is not None and "2.5x the best any document publishes for llama31 8b on h100" in why
    assert "check --gpu" in why
    from dataclasses import replace

    # A CPU run is held against the published figures too (issue 40: no record field turns the check
    # off); a proxy's scaled-down model is not the published one, so it is held against the peak alone.
    cpu = replace(context, device="cpu")
    assert "2.5x the best" in impossible(
        cpu, tflops={}, tokens_per_s=2.5 * best * 8, workload=workload
    )
    proxy = replace(context, proxy=True)
    assert impossible(proxy, tflops={}, tokens_per_s=1e12, workload=workload) is None
    for other in (cpu, proxy):
        over = impossible(other, tflops={"the log": 1000.0}, tokens_per_s=None, workload=workload)
        assert "above the h100's BF16 dense peak of 989" in over
