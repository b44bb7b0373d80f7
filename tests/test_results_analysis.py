"""Statuses, window statistics and derived metrics of parsed runs."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest
from experiment_dirs import make_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402
from llmb.results.collect import Collector  # noqa: E402
from llmb.results.experiments import find_runs, infer_from_name  # noqa: E402

MB8 = "pretrain_llama3_8b_fp8_gpus8_tp1_pp1_cp1_vpNone_ep1_etpNone_mbs2_gbs128"
NEMO8 = "pretrain_llama3.1_8b_fp8_8"
NH256 = "pretrain_nemotronh_56b_fp8_gpus256_tp8_pp1_cp1_vpNone_mbs1_gbs768"


def parse(host, root: Path, **kw):
    return {c.location.experiment: c.result for c in Collector(host).collect([str(root)], **kw)}


def test_success_statistics_are_window_mean_and_sample_std(host, tmp_path):
    step = {i: 1000.0 + 3 * i + (i % 3) for i in range(1, 51)}
    tflops = {i: 500.0 + i for i in range(1, 51)}
    make_run(tmp_path, MB8, loggen.megatron_bridge_lines(range(1, 51), step_ms=step, tflops=tflops))
    r = parse(host, tmp_path)[MB8]
    assert (r.status, r.reason, r.window, r.max_iteration) == ("success", None, (35, 44), 50)
    window = [round(step[i], 1) for i in range(35, 45)]
    assert r.stats.time_mean_ms == pytest.approx(statistics.mean(window))
    assert r.stats.time_std_ms == pytest.approx(statistics.stdev(window))
    assert r.stats.tflops_mean == pytest.approx(statistics.mean(tflops[i] for i in range(35, 45)))
    assert r.stats.count == 10 and r.stats.tflops_source == "log"


def test_context_from_the_experiment_name(host, tmp_path):
    make_run(tmp_path, MB8, loggen.megatron_bridge_lines(range(1, 51)))
    r = parse(host, tmp_path)[MB8]
    c = r.context
    assert (c.source, c.workload, c.variant, c.size, c.dtype, c.gpus, c.gbs, c.seq_len, c.gpu) == (
        "name",
        "llama31",
        "megatron-bridge",
        "8b",
        "fp8",
        8,
        128,
        8192,
        None,
    )
    assert r.tokens_per_s == pytest.approx(8192 * 128 / (r.stats.time_mean_ms / 1000))
    assert r.mfu_pct is None  # no GPU type in a name
    with_gpu = parse(host, tmp_path, assume_gpu="h100")[MB8]
    # the MB seed's method
    assert with_gpu.mfu_pct == pytest.approx(100 * with_gpu.stats.tflops_mean / 1979)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "pretrain_llama31_405b_fp8_cs_gpus128_tp2_pp1_cp1_vpNone_ep1_mbs1_gbs64",
            ("llama31", "405b", "fp8", 128, 64),
        ),
        ("pretrain_llama3.1_70b_bf16_256", ("llama31", "70b", "bf16", 256, None)),
        (
            "pretrain_llama4_e128_fp8_64nodes_tp4_pp1_cp1_vp1_ep128_etp4_1mbs_1024gbs",
            ("llama4", "400b", "fp8", None, 1024),
        ),
        (
            "pretrain_nemotron4_340b_fp8_gpus128_tp8_pp4_cp1_vp12_mbs1_gbs512",
            ("nemotron4", "340b", "fp8", 128, 512),
        ),
        (NH256, ("nemotronh", "56b", "fp8", 256, 768)),
        ("my_own_experiment", (None, None, None, None, None)),
    ],
)
def test_experiment_names_of_the_seeds(host, name, expected):
    c = infer_from_name(name, host.workloads())
    assert (c.workload, c.size, c.dtype, c.gpus, c.gbs) == expected


def test_nemo2_run_ends_at_49_of_49(host, tmp_path):
    make_run(tmp_path, NEMO8, loggen.nemo2_lines(range(0, 50)))
    r = parse(host, tmp_path)[NEMO8]
    assert (r.status, r.format, r.context.variant, r.last_iteration) == (
        "success",
        "nemo2",
        "nemo2",
        49,
    )


@pytest.mark.parametrize(
    ("iterations", "reason"),
    [
        (
            range(1, 40),
            "the final iteration (50) was not reached; the last logged is 39; window iterations 40-44 are missing",
        ),
        ([*range(1, 38), *range(40, 51)], "window iterations 38-39 are missing"),
    ],
)
def test_incomplete_says_what_is_missing(host, tmp_path, iterations, reason):
    make_run(tmp_path, MB8, loggen.megatron_bridge_lines(iterations))
    r = parse(host, tmp_path)[MB8]
    assert (r.status, r.reason) == ("incomplete", reason)


def test_nan_grad_norm_is_invalid_even_when_complete(host, tmp_path):
    make_run(tmp_path, MB8, loggen.megatron_bridge_lines(range(1, 51), nan_at=[12, 13, 40]))
    r = parse(host, tmp_path)[MB8]
    assert (r.status, r.reason) == ("invalid_grad_norm", "grad norm is NaN at iteration 12-13, 40")


def test_failed_runs_name_their_reason_and_the_seed_hint(host, tmp_path):
    name = "pretrain_nemotron4_340b_bf16_gpus256_tp8_pp4_cp1_vp12_mbs1_gbs64"
    make_run(
        tmp_path,
        name,
        [*loggen.nemo2_lines(range(0, 5)), loggen.WATCHDOG],
        recipe={
            "workload": "nemotron4",
            "variant": "nemo2",
            "size": "340b",
            "gpu": "gb200",
            "dtype": "bf16",
            "gpus": 256,
            "gbs": 64,
            "seq_len": 4096,
        },
    )
    r = parse(host, tmp_path)[name]
    assert r.status == "failed"
    assert r.reason.startswith(
        "nccl timeout: [E808 04:21:41.160918398 ProcessGroupNCCL.cpp:655] [Rank 368] Watchdog"
    )
    assert "TP_COMM_OVERLAP=False" in r.reason and "TP_COMM_OVERLAP=False" in r.failure.hint


@pytest.mark.parametrize(
    ("order", "kind"),
    [
        (
            ("OOM", "WATCHDOG", "TRACEBACK"),
            "cuda_oom",
        ),  # before the timeouts and tracebacks it causes
        (("TRACEBACK", "WATCHDOG", "OOM"), "python_exception"),  # the first real error in log order
        (
            ("WATCHDOG", "TRACEBACK", "OOM"),
            "nccl_timeout",
        ),  # a hang: what follows it is its consequence
        (("TRACEBACK", "OOM", "NODE_FAILURE"), "node_failure"),  # wherever Slurm's words land
    ],
)
def test_root_cause_order(host, tmp_path, order, kind):
    lines = {
        "OOM": [loggen.OOM],
        "WATCHDOG": [loggen.WATCHDOG],
        "TRACEBACK": list(loggen.TRACEBACK),
        "NODE_FAILURE": [loggen.NODE_FAILURE],
    }
    make_run(
        tmp_path,
        MB8,
        [*loggen.megatron_bridge_lines(range(1, 3)), *(x for o in order for x in lines[o])],
    )
    r = parse(host, tmp_path)[MB8]
    assert r.failure.kind == kind


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "an empty log"),
        (b"hello\nworld\n", "no iteration lines in 12 bytes"),
        (b"\x00\x01\x02" * 100, "not a text log (binary data), 300 bytes read"),
    ],
)
def test_no_data(host, tmp_path, content, reason):
    run = make_run(tmp_path, MB8, None)
    (run / MB8 / f"log-{MB8}.out").write_bytes(content)
    r = parse(host, tmp_path)[MB8]
    assert (r.status, r.reason) == ("no_data", reason)


def test_no_log(host, tmp_path):
    run = make_run(tmp_path, NH256, None)
    r = parse(host, tmp_path)[NH256]
    assert (r.status, r.window) == ("no_log", (11, 44))
    assert r.reason == f"no log-*.out file in {run}"


def test_nemotronh_tflops_are_computed_from_its_flops(host, tmp_path):
    step = {i: 15.892 for i in range(0, 50)}
    make_run(
        tmp_path,
        NH256,
        loggen.nemo2_lines(
            range(0, 50), step_s=step, tflops=dict.fromkeys(range(50), 0.0), gbs=768
        ),
        recipe={
            "workload": "nemotronh",
            "size": "56b",
            "gpu": "h100",
            "dtype": "fp8",
            "gpus": 256,
            "gbs": 768,
            "seq_len": 8192,
        },
    )
    r = parse(host, tmp_path)[NH256]
    assert (r.status, r.window, r.stats.tflops_source) == ("success", (11, 44), "computed")
    assert r.stats.tflops_mean == pytest.approx(768 * 2.816073e15 / 15.892 / 256 / 1e12, rel=1e-6)
    # The seed's worked example: 26.86% MFU, 395888 tokens/s, and its published 15.892 s at 256 GPUs.
    assert round(r.mfu_pct, 2) == 26.86
    assert round(r.tokens_per_s) == 395888
    assert r.reference_step_time_ms == pytest.approx(
        15892.0
    ) and r.reference_delta_pct == pytest.approx(0.0)


def test_window_override(host, tmp_path):
    make_run(
        tmp_path,
        MB8,
        loggen.megatron_bridge_lines(range(1, 51), step_ms={i: float(i) for i in range(1, 51)}),
    )
    r = parse(host, tmp_path, window=(1, 4))[MB8]
    assert (r.window, r.stats.time_mean_ms) == ((1, 4), 2.5)


def test_proxy_runs_are_not_compared_with_published_numbers(host, tmp_path):
    make_run(
        tmp_path,
        NH256,
        loggen.nemo2_lines(range(0, 50), gbs=768),
        recipe={
            "workload": "nemotronh",
            "size": "56b",
            "gpu": "h100",
            "dtype": "fp8",
            "gpus": 256,
            "gbs": 768,
            "seq_len": 8192,
            "layers": 4,
            "proxy": True,
        },
    )
    r = parse(host, tmp_path)[NH256]
    assert r.reference_step_time_ms is None and "proxy run" in " ".join(r.notes)


def test_find_runs_in_the_seeds_layout(tmp_path):
    make_run(tmp_path, MB8, ["x"], stamp="1766132151")
    make_run(tmp_path, MB8, ["x"], stamp="1766139999")
    make_run(tmp_path, NH256, None)
    (tmp_path / "stray.out").write_text("not a run log")
    runs = find_runs([str(tmp_path)])
    assert [(r.experiment, r.short_name, r.log is not None) for r in runs] == [
        (MB8, f"{MB8}_1766132151", True),
        (MB8, f"{MB8}_1766139999", True),
        (NH256, f"{NH256}_1766132151", False),
    ]
    single = find_runs([runs[0].log])
    assert [r.short_name for r in single] == [f"{MB8}_1766132151"]


def test_the_sample_stdev_is_the_standard_librarys_to_the_bit():
    """analyze's stdev (integers over a common power of two) is ``statistics.stdev``, bit for bit, on
    step times, on values a thousand orders of magnitude apart, on repeats and signed zeros; both
    overflow alike."""
    import random
    import statistics

    from llmb.results.analyze import sample_stdev

    rng = random.Random(42)
    for k in range(20_000):
        n = rng.randrange(2, 14)
        values = [
            rng.uniform(200, 300),
            rng.uniform(-1e-300, 1e-300),
            rng.choice([1.0, 2.0, 1e-5, 3e7, 0.0, -0.0]),
            rng.lognormvariate(0, 30),
            12.5,
        ]
        data = [values[k % 5] if k % 5 == 4 else rng.choice(values) for _ in range(n)]
        assert sample_stdev(data).hex() == statistics.stdev(data).hex(), data
    for huge in ([1.7e308, 1.7e308, -1.7e308],):
        with pytest.raises(OverflowError):
            statistics.stdev(huge)
        with pytest.raises(OverflowError):
            sample_stdev(huge)
