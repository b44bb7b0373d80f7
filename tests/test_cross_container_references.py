"""Today's references for DeepSeek-V3, Kimi-K2, GPT-OSS 120B and Qwen3, and the verdict across containers.

Sources can't be fetched at test time, so each test holds the source's text: the rows of
Megatron-Bridge's performance summary as printed (docs/performance-summary.md and its archive at commit
4ab94dfad, 2026-08-11) and the cells of Megatron-Bridge's model verification cards (at HEAD 067f987d,
2026-08-22). Each data file's cells are checked against them, and each card's step time against its own
tokens/s (GBS x sequence / step time / GPUs).

The verdict rule: a figure measured in another container release than the run's is shown with both
containers, and judged by step time or tokens/s per GPU, never by TFLOP/s per GPU (the FLOP count of a
framework can change between releases; the summary's own rows show by how much: ``test_flop_count_*``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from llmb.recipes.card_file import cards_from_dict
from llmb.recipes.references import Configuration, Figure, find, same_container, sources
from llmb.recipes.summary_file import summary_from_dict
from llmb.results.compare import NOT_COMPARED, judge_published
from llmb.results.records import RunContext, RunResult, WindowStats
from llmb.yamlio import load_yaml_file

ROOT = Path(__file__).resolve().parents[1]
DEEPSEEK = ROOT / "plugins/deepseekv3/src/llmb_plugin_deepseekv3"
GPTOSS = ROOT / "plugins/gptoss/src/llmb_plugin_gptoss"
QWEN3 = ROOT / "examples/llmb-plugin-qwen3/src/llmb_plugin_qwen3"
GPU_TYPES = {"gb300", "gb200", "b300", "b200", "h100"}

# Megatron-Bridge's performance summary, the rows as printed (section > model: lines)
PRINTED = {
    ("26.08", "DeepSeekV3"): """
| DGX-GB300 | 256 | MXFP8 | 4096 | 1 | 4096 | 1 | 2 | 1 | 8 | 32 | 6288 | 1635 |
| DGX-GB200 | 256 | MXFP8 | 4096 | 1 | 4096 | 1 | 4 | 1 | 4 | 64 | 4912 | 1276 |""",
    ("26.06.01", "DeepSeekV3"): """
| DGX-GB300 | 256 | MXFP8 | 4096 | 1 | 4096 | 1 | 2 | 1 | 8 | 32 | 6304 | 1640 |
| DGX-GB200 | 256 | MXFP8 | 4096 | 1 | 4096 | 1 | 4 | 1 | 4 | 64 | 4928 | 1280 |""",
    ("26.06", "DeepSeekV3"): """
| DGX-GB300 | 256 | MXFP8 | 4096 | 1 | 4096 | 1 | 2 | 1 | 8 | 32 | 6338 | 1648 |
| DGX-GB300 | 256 | MXFP8 | 15360 | 1 | 4096 | 1 | 2 | 1 | 8 | 32 | 6422 | 1670 |
| DGX-GB200 | 256 | MXFP8 | 4096 | 1 | 4096 | 1 | 4 | 1 | 4 | 64 | 4969 | 1292 |
| DGX-B300 | 256 | MXFP8 | 4096 | 2 | 4096 | 1 | 8 | 1 | n/a | 8 | 3541 | 920 |""",
    ("26.06", "Kimi_K2"): """
| DGX-GB300 | 256 | MXFP8 | 4096 | 2 | 4096 | 1 | 4 | 1 | 4 | 64 | 5372 | 1099 |""",
    ("26.08", "GPT OSS 120B"): """
| DGX-GB300 | 64 | MXFP8 | 1280 | 4 | 4096 | 1 | 1 | 1 | n/a | 16 | 33024 | 1077 |
| DGX-GB200 | 64 | MXFP8 | 1280 | 4 | 4096 | 1 | 1 | 1 | n/a | 64 | 28672 | 934 |""",
    ("26.06.01", "GPT OSS 120B"): """
| DGX-GB300 | 64 | MXFP8 | 1280 | 4 | 4096 | 1 | 1 | 1 | n/a | 16 | 20288 | 661[^gpt-oss-note] |
| DGX-GB200 | 64 | MXFP8 | 1280 | 4 | 4096 | 1 | 1 | 1 | n/a | 64 | 18304 | 597[^gpt-oss-note] |""",
    ("26.06", "GPT OSS 120B"): """
| DGX-GB300 | 64 | MXFP8 | 1280 | 4 | 4096 | 1 | 1 | 1 | n/a | 16 | 33166 | 1081 |
| DGX-GB200 | 64 | MXFP8 | 1280 | 4 | 4096 | 1 | 1 | 1 | n/a | 64 | 28947 | 943 |
| DGX-B300 | 64 | MXFP8 | 1280 | 4 | 4096 | 1 | 1 | 1 | n/a | 8 | 18534 | 604 |""",
    ("26.04.01", "GPT OSS 120B"): """
| DGX-GB300 | 64 | BF16 | 1280 | 4 | 4096 | 0 | 1 | 1 | 1 | n/a | 64 | 19200 | 523 |
| DGX-GB200 | 64 | BF16 | 1280 | 4 | 4096 | 0 | 1 | 1 | 1 | n/a | 64 | 16640 | 452 |
| DGX-B300 | 64 | BF16 | 1280 | 4 | 4096 | 0 | 1 | 1 | 1 | n/a | 8 | 15232 | 414 |
| DGX-B200 | 64 | BF16 | 1280 | 4 | 4096 | 0 | 1 | 1 | 1 | n/a | 8 | 13568 | 369 |
| DGX-H100 | 64 | BF16 | 1280 | 1 | 4096 | 0 | 1 | 4 | 1 | n/a | 8 | 5824 | 158 |""",
    # not in the Qwen3 data file (its recipe's container is 26.06.01, whose section it copies): the
    # evidence of the FLOP count across the two sections
    ("26.08", "Qwen3_235B_a22B"): """
| DGX-GB300 | 256 | MXFP8 | 8192 | 2 | 4096 | 1 | 4 | 1 | 12 | 32 | 8816 | 1306 |
| DGX-GB200 | 256 | MXFP8 | 8192 | 1 | 4096 | 1 | 8 | 1 | 3 | 32 | 7280 | 1077 |""",
    ("26.08", "Qwen3_30B_a3B"): """
| DGX-GB300 | 8 | MXFP8 | 512 | 8 | 4096 | 1 | 1 | 1 | n/a | 8 | 44544 | 1029 |
| DGX-GB200 | 8 | MXFP8 | 512 | 4 | 4096 | 1 | 1 | 1 | n/a | 8 | 39936 | 923 |""",
}
FILES = {
    "DeepSeekV3": DEEPSEEK / "performance_summary.yaml",
    "Kimi_K2": DEEPSEEK / "performance_summary_kimi_k2.yaml",
    "GPT OSS 120B": GPTOSS / "performance_summary.yaml",
    "Qwen3_235B_a22B": QWEN3 / "performance_summary.yaml",
    "Qwen3_30B_a3B": QWEN3 / "performance_summary.yaml",
}


def _printed(text: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in text.strip().splitlines()
    ]


def _table(release: str, model: str) -> dict | None:
    raw = load_yaml_file(FILES[model])
    return next((t for t in raw["tables"] if t["release"] == release and t["model"] == model), None)


def _per_token(tokens, tflops) -> float:
    """GFLOP per token as the document counts them: TFLOP/s per GPU over tokens/s per GPU."""
    return float(str(tflops).split("[")[0]) / float(tokens) * 1e3


@pytest.mark.parametrize(("release", "model"), [k for k in PRINTED if _table(*k) is not None])
def test_every_summary_cell_is_the_documents(release, model):
    table = _table(release, model)
    assert [[str(c) for c in row] for row in table["rows"]] == _printed(PRINTED[release, model])
    assert table["container"] == f"nvcr.io/nvidia/nemo:{release}"
    assert (
        table["section"] == f"{release} NeMo Container > Pre-Training Performance > Model: {model}"
    )


def test_the_figures_llmb_judges_by_are_the_newest_release_per_gpu_type():
    ds = {
        (r.gpu, r.gpus): r
        for r in summary_from_dict(load_yaml_file(FILES["DeepSeekV3"]), GPU_TYPES)
    }
    assert (ds["gb300", 256].tflops_per_gpu, ds["gb300", 256].tokens_per_s / 256) == (1635, 6288)
    assert (ds["gb200", 256].tflops_per_gpu, ds["gb200", 256].tokens_per_s / 256) == (1276, 4912)
    assert ds["gb300", 256].container.endswith("nemo:26.08")
    assert ds["gb300", 256].step_time_s == pytest.approx(4096 * 4096 / (6288 * 256))
    assert ds["b300", 256].container.endswith("nemo:26.06")  # 26.08 prints no B300 row
    oss = {
        (r.gpu, r.dtype): r
        for r in summary_from_dict(load_yaml_file(FILES["GPT OSS 120B"]), GPU_TYPES)
    }
    assert (oss["gb300", "fp8"].tflops_per_gpu, oss["gb200", "fp8"].tflops_per_gpu) == (1077, 934)
    assert oss["h100", "bf16"].container.endswith("nemo:26.04.01")
    [kimi] = summary_from_dict(load_yaml_file(FILES["Kimi_K2"]), GPU_TYPES)
    assert (kimi.size, kimi.gpu, kimi.gpus, kimi.tflops_per_gpu) == ("1t", "gb300", 256, 1099)


@pytest.mark.parametrize(
    ("model", "row"),
    [
        ("DeepSeekV3", 0),
        ("DeepSeekV3", 1),
        ("GPT OSS 120B", 0),
        ("GPT OSS 120B", 1),
        ("Qwen3_235B_a22B", 0),
        ("Qwen3_235B_a22B", 1),
        ("Qwen3_30B_a3B", 0),
    ],
)
def test_flop_count_per_token_is_the_same_in_26_06_01_and_26_08(model, row):
    """The 26.08 figures count the same FLOPs per token as 26.06.01's, to the rounding of the printed
    cells (0.2%): the summary shows no change of Megatron-Bridge's FLOP count between these two
    releases (DeepSeek-V3 GB300: 260.15 -> 260.02 GFLOP/token; GPT-OSS 120B GB300: 32.58 -> 32.61;
    Qwen3 235B GB300: 147.98 -> 148.14)."""
    new = _printed(PRINTED["26.08", model])[row]
    old = _table("26.06.01", model)["rows"][row]
    assert new[:11] == [str(c) for c in old[:11]]  # the same layout
    assert _per_token(new[-2], new[-1]) == pytest.approx(_per_token(old[-2], old[-1]), rel=0.002)


def test_flop_count_per_token_changed_between_other_releases():
    """Where the FLOP count did change: GPT-OSS 120B at the same GBS and sequence, 27.2 GFLOP/token in
    26.04.01 (BF16) against 32.6 in 26.06 (MXFP8): +19.8% TFLOP/s for the same tokens/s. TFLOP/s per
    GPU is no measure across releases."""
    old = _printed(PRINTED["26.04.01", "GPT OSS 120B"])[0]
    new = _printed(PRINTED["26.06", "GPT OSS 120B"])[0]
    ratio = _per_token(new[-2], new[-1]) / _per_token(old[-2], old[-1])
    assert ratio == pytest.approx(1.198, abs=0.003)


# Megatron-Bridge's model verification cards: items.pretrain_performance.<GPU>.metrics as printed
CARDS = {
    (DEEPSEEK, "h100"): (
        "nvcr.io/nvidia/nemo:26.08.rc5",
        1024,
        16384,
        "61756.130",
        "276.030",
        "1061.206",
    ),
    (DEEPSEEK, "gb200"): (
        "nvcr.io/nvidia/nemo:26.08.rc5",
        256,
        4096,
        "13841.180",
        "1231.040",
        "4734.856",
    ),
    (DEEPSEEK, "gb300"): (
        "nvcr.io/nvidia/nemo:26.08.rc5",
        256,
        4096,
        "10667.300",
        "1597.310",
        "6143.635",
    ),
    (GPTOSS, "gb200"): ("nvcr.io/nvidia/nemo:26.06", 64, 1280, "4995.630", "535.230", "16398.332"),
    (GPTOSS, "gb300"): ("nvcr.io/nvidia/nemo:26.06", 64, 1280, "2481.140", "1077.350", "33017.081"),
    (QWEN3, "gb300"): ("nvcr.io/nvidia/nemo:26.08", 256, 8192, "14920.84", "1300.44", "8784.492"),
    (QWEN3, "gb200"): ("nvcr.io/nvidia/nemo:26.08", 256, 8192, "17905.34", "1083.66", "7320.274"),
}


@pytest.mark.parametrize(("where", "gpu"), list(CARDS), ids=lambda v: getattr(v, "name", v))
def test_every_card_cell_is_the_cards(where, gpu):
    container, gpus, gbs, step_ms, tflops, tokens = CARDS[where, gpu]
    refs = {
        (r.gpu, r.gpus): r
        for r in cards_from_dict(load_yaml_file(where / "verification_cards.yaml"), GPU_TYPES)
    }
    ref = refs[gpu, gpus]
    assert (ref.container, ref.gbs) == (container, gbs)
    assert ref.step_time_s * 1000 == pytest.approx(float(step_ms), abs=1e-6)
    assert ref.tflops_per_gpu == pytest.approx(float(tflops), abs=1e-6)
    assert ref.tokens_per_s / gpus == pytest.approx(float(tokens), abs=1e-6)
    # the card's tokens/s is its step time's: GBS x 4096 / step time / GPUs
    assert gbs * 4096 / (float(step_ms) / 1000 * gpus) == pytest.approx(float(tokens), rel=2e-4)
    assert f"GBS/MBS {gbs}/" in next(
        e["expected_result"]
        for c in load_yaml_file(where / "verification_cards.yaml")["cards"]
        for e in c["entries"]
        if e["gpu"] == gpu and e["gpus"] == gpus
    )


# ------------------------------------------------------------------------------ the verdict across containers


def _run(container: str | None, step_ms: float, tflops: float, *, tokens: bool = True, gbs=4096):
    context = RunContext(
        experiment="e",
        source="recipe",
        workload="w",
        size="671b",
        gpu="gb300",
        dtype="fp8",
        gpus=256,
        gbs=gbs,
        seq_len=4096,
        container=container,
    )
    stats = WindowStats(1, 10, 10, step_ms, 1.0, tflops, 1.0, "log", 10)
    per_s = gbs * 4096 / (step_ms / 1000) if tokens else None
    return RunResult(
        None,
        context,
        "success",
        None,
        "megatron_bridge",
        (1, 10),
        stats,
        50,
        50,
        tokens_per_s=per_s,
    )


def _figure(container: str, **more) -> Figure:
    values = dict(
        source="summary",
        label="the performance summary's figure",
        document="D",
        gpus=256,
        step_time_ms=4096 * 4096 / (6288 * 256) * 1000,
        tokens_per_s=6288 * 256,
        tflops_per_gpu=1635,
        gbs=4096,
        container=container,
    )
    return Figure(**{**values, **more})


def test_across_containers_the_verdict_is_by_step_time_and_tflops_is_shown_not_judged():
    figure = _figure("26.08", newer_than_run="26.06.01")
    # a run 10% slower than the figure whose log claims more TFLOP/s (another FLOP count): it regresses
    slow = judge_published(_run("nvcr.io#nvidia/nemo:26.06.01", 10422.0 * 1.1, 1700), figure, 0.95)
    assert slow.outcome == "regress" and "by step time" in slow.detail
    assert "newer than the run's nemo:26.06.01" in slow.detail
    assert "TFLOP/s per GPU 1,700 vs the figure's 1,635, shown, not judged" in slow.detail
    assert "measured in nemo:26.08, the run in nemo:26.06.01" in slow.detail
    fast = judge_published(_run("nvcr.io#nvidia/nemo:26.06.01", 10422.0, 1500), figure, 0.95)
    assert fast.outcome == "pass" and "not judged" in fast.detail


def test_across_containers_tokens_per_s_at_another_batch_and_never_tflops():
    figure = _figure("26.08", other_batch_of=8192)
    by_tokens = judge_published(_run("26.06.01", 20844.0, 1635, gbs=8192), figure, 0.95)
    assert "by tokens/s per GPU" in by_tokens.detail and by_tokens.outcome == "pass"
    # no tokens/s: only TFLOP/s would be left, and across containers that is no measure
    only_tflops = judge_published(
        _run("26.06.01", 20844.0, 1635, tokens=False, gbs=8192), figure, 0.95
    )
    assert only_tflops.outcome == NOT_COMPARED and only_tflops.ratio is None
    assert "only by TFLOP/s per GPU" in only_tflops.detail and "not judged" in only_tflops.detail
    # nor where the run's container is not recorded
    unknown = judge_published(_run(None, 20844.0, 1635, tokens=False, gbs=8192), figure, 0.95)
    assert unknown.outcome == NOT_COMPARED


def test_in_the_same_container_the_verdict_is_unchanged():
    figure = _figure("26.08", other_batch_of=8192)
    same = judge_published(
        _run("nvcr.io#nvidia/nemo:26.08.00", 20844.0, 1635, tokens=False, gbs=8192), figure, 0.95
    )
    assert same.outcome == "pass" and "by TFLOP/s per GPU" in same.detail
    by_step = judge_published(_run("26.08", 10422.0, 1635), _figure("26.08"), 0.95)
    assert "by step time" in by_step.detail and "not judged" not in by_step.detail
    assert same_container("nvcr.io#nvidia/nemo:26.08.00", "26.08") is True
    assert same_container("26.06.01", "26.08") is False and same_container(None, "26.08") is None


def test_a_qwen3_run_in_26_06_01_against_its_26_08_card(host):
    qwen3 = host.workloads()["qwen3"]
    assert "card" in sources(qwen3)
    config = Configuration(
        None, "235b", "gb300", "fp8", 256, container="nvcr.io#nvidia/nemo:26.06.01", gbs=8192
    )
    figure = find(qwen3, config, "card")
    assert (figure.source, figure.container, figure.newer_than_run) == ("card", "26.08", "26.06.01")
    assert figure.step_time_ms == pytest.approx(14920.84)
    assert "model verification card for Qwen3 235B-A22B" in figure.describe()
    # the summary's figure for the same run is its own container's: no cross-container note
    summary = find(qwen3, config, "summary")
    assert summary.container == "26.06.01" and summary.newer_than_run is None


# ------------------------------------------------------------------------------ certify


@pytest.fixture
def install(tmp_path):
    return {"LLMB_INSTALL": str(tmp_path / "install"), "LLMB_NO_CACHE": "1"}


@pytest.mark.parametrize("gpu", ["gb300", "gb200", "b300", "b200"])
def test_certify_lists_deepseek_v3_and_gpt_oss_where_the_summary_has_a_figure(
    llmb_proc, install, gpu
):
    import json

    result = llmb_proc(
        "certify", "--gpu", gpu, "--backend", "slurm", "--dry-run", "--json", env=install
    )
    assert result.code == 0, result.err
    jobs = {job["task"]: job for job in json.loads(result.out)}
    deepseek = jobs[f"deepseekv3 671b {gpu} fp8 256 GPUs"]["judged_by"]
    assert deepseek["source"] == "summary" and "Model: DeepSeekV3" in deepseek["document"]
    oss = jobs[f"gptoss 120b {gpu} bf16 64 GPUs"]["judged_by"]
    assert oss["source"] == "summary" and "Model: GPT OSS 120B" in oss["document"]
    if gpu == "gb300":
        assert "Model: Kimi_K2" in jobs["kimik2 1t gb300 fp8 256 GPUs"]["judged_by"]["document"]
        assert deepseek["container"] == "26.08"
