"""Real failure output through the real scan, ``Collector`` and ``llmb results``:
each sample is a public log's wording, quoted unchanged and short, with its
source beside it (a GitHub repository and issue, or a file path)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from experiment_dirs import make_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402
from llmb.results.collect import Collector  # noqa: E402
from llmb.results.formats import BUILTIN_PARSERS  # noqa: E402
from llmb.results.scan import scan  # noqa: E402

MB8 = "pretrain_llama3_8b_fp8_gpus8_tp1_pp1_cp1_vpNone_ep1_etpNone_mbs2_gbs128"
NEMO8 = "pretrain_llama3.1_8b_fp8_8"

# NVIDIA/nccl#1235: NCCL's own words for a CUDA OOM, two ranks' NCCL_DEBUG=WARN lines.
NCCL_OOM = (
    "ng30903:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'",
    "ng30903:3063028:3066152 [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 bytes",
)
# NVIDIA/nccl#1410: torch's DistBackendError that carries NCCL's CUDA error on its next lines (the issue
# quotes the exception alone; the traceback's first two lines are the form torch gives every rank's).
DIST_BACKEND = (
    "[rank7]: Traceback (most recent call last):",
    '[rank7]:   File "/opt/megatron/pretrain_gpt.py", line 9, in <module>',
    "[rank7]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
    "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
    "[rank7]: ncclUnhandledCudaError: Call to CUDA function failed.",
    "[rank7]: Last error:",
    "[rank7]: Cuda failure 1 'invalid argument'",
)
# NVIDIA-NeMo/Speech#14348: Megatron-Core's NaN check raising under NeMo-Run (its rank prefixes included).
NAN_RAISED = (
    "i.pretrain/0 [default2]:[rank2]: RuntimeError: Rank 2, node dcfai-xe9680-01, device 2, iteration -1: "
    "Unexpected result nan (message='found NaN in local grad norm for bucket #0 in backward pass before "
    "data-parallel communication collective')"
)
# NVIDIA/Megatron-LM#5026: the rerun state machine's words in validate_results mode (it logs, then exits).
NAN_RERUN = (
    "ERROR:megatron.core.rerun_state_machine:Unexpected result nan on rank 3 at iteration #3 invocation #2 "
    "(message='found NaN in local grad norm for bucket #0 in backward pass before data-parallel "
    "communication collective')"
)
# alibaba/Pai-Megatron-Patch#366: the older Megatron assertion (the title).
NAN_ASSERT = (
    "AssertionError: Rank 11: found NaN in local grad norm in backward pass before data-parallel "
    "communication collective. Device: 3"
)
# marbl/canu#1052 (JOB) and desihub/desitarget#628 (STEP, then srun's words for the tasks it ended).
TIME_LIMIT_JOB = "slurmstepd: error: *** JOB 3884617 ON node023 CANCELLED AT 2018-08-19T16:30:21 DUE TO TIME LIMIT ***"
TIME_LIMIT_STEP = (
    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
    "slurmstepd: error: *** STEP 32233190.0 ON nid01934 CANCELLED AT 2020-07-03T02:59:56 DUE TO TIME LIMIT ***",
    "srun: error: nid01934: tasks 2,4-5,7: Terminated",
)
# SystemsGenetics/GEMmaker#242 (its troubleshooting docs).
PREEMPTED = "slurmstepd: error: *** JOB 32391783 ON cn119 CANCELLED AT 2021-06-18T13:05:36 DUE TO PREEMPTION ***"
# pytorch/pytorch#152302: torch's launcher ending a sibling process, written before the failed one's traceback.
SIGTERM = (
    "W0428 00:47:04.140000 51980 .venv/lib/python3.12/site-packages/torch/multiprocessing/spawn.py:169] "
    "Terminating process 52051 via signal SIGTERM"
)


def parse(host, root: Path, **kw):
    return {c.location.experiment: c.result for c in Collector(host).collect([str(root)], **kw)}


def failures(tmp_path, lines, chunk_size: int = 8 << 20):
    path = tmp_path / "log.out"
    path.write_text("\n".join(lines) + "\n")
    return scan(str(path), list(BUILTIN_PARSERS), chunk_size=chunk_size).findings["failures"]


def test_nccls_words_for_cuda_oom_are_cuda_oom(host, tmp_path):
    make_run(tmp_path, MB8, [*loggen.megatron_bridge_lines(range(1, 13)), *NCCL_OOM, *DIST_BACKEND])
    r = parse(host, tmp_path)[MB8]
    assert (r.status, r.failure.kind) == ("failed", "cuda_oom")  # before: no_data
    assert r.reason == (
        "cuda oom: ng30903:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure "
        "'out of memory'"
    )


def test_a_dist_backend_error_is_its_last_errors_kind(tmp_path):
    # NVIDIA/nccl#1410 as printed: 'invalid argument' is no OOM
    [found] = failures(tmp_path, DIST_BACKEND)
    assert (found.kind, found.offset) == ("python_exception", 0)
    # The same lines with the CUDA error pytorch/pytorch#152302 reports (NCCL >= 2.19 prints its code, 2):
    # torch's message puts it three lines below the exception's own (this one line is changed).
    [found] = failures(tmp_path, [*DIST_BACKEND[:5], "[rank7]: Cuda failure 2 'out of memory'"])
    assert found.kind == "cuda_oom"
    assert found.message.startswith("torch.distributed.DistBackendError: NCCL error in:")
    assert found.message.endswith("(Cuda failure 2 'out of memory')")


@pytest.mark.parametrize(
    "line",
    [
        # NVIDIA/nccl#1284 (its title): torch before 2.5 names the class under torch.cuda.
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory",
        loggen.OOM,  # torch 2.5's torch.OutOfMemoryError
    ],
)
def test_torchs_out_of_memory_errors_are_cuda_oom(tmp_path, line):
    [found] = failures(
        tmp_path,
        ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>', line],
    )
    assert (found.kind, found.message) == ("cuda_oom", line)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (NAN_RAISED, NAN_RAISED.split("[rank2]: ", 1)[1]),
        (NAN_RERUN, NAN_RERUN),
        (NAN_ASSERT, NAN_ASSERT),
    ],
)
def test_megatrons_nan_checks_are_a_failure(host, tmp_path, line, message):
    trace = ["Traceback (most recent call last):", '  File "pretrain_gpt.py", line 9, in <module>']
    make_run(
        tmp_path,
        MB8,
        [
            *loggen.megatron_bridge_lines(range(1, 13)),
            *(trace if line.startswith("Assertion") else []),
            line,
            loggen.WATCHDOG,
        ],
    )
    r = parse(host, tmp_path)[MB8]
    assert (r.status, r.failure.kind) == ("failed", "nan_loss_or_grad")
    assert r.reason == f"nan loss or grad: {message}"


def test_step_time_and_iteration_on_one_line_are_both_read(host, tmp_path):
    # field-facts §2's two lines (loggen writes them), each pair joined on one line as two ranks' output can be.
    lines = list(
        loggen.megatron_bridge_lines(range(1, 51), tflops={i: 900.0 + i for i in range(1, 51)})
    )
    joined = [lines[i] + lines[i + 1] for i in range(0, len(lines), 2)]
    assert "MODEL_TFLOP/s/GPU [2026-11-21 10:00:35] iteration       35/      50 |" in joined[34]
    make_run(tmp_path, MB8, joined)
    r = parse(host, tmp_path)[MB8]
    assert (r.status, r.max_iteration, r.stats.count) == ("success", 50, 10)
    assert r.stats.tflops_mean == pytest.approx(sum(900.0 + i for i in range(35, 45)) / 10)


@pytest.mark.parametrize(
    ("lines", "kind", "message"),
    [
        ([TIME_LIMIT_JOB], "time_limit", TIME_LIMIT_JOB),
        (list(TIME_LIMIT_STEP), "time_limit", TIME_LIMIT_STEP[1]),
        ([PREEMPTED], "preempted", PREEMPTED),
        (
            [*loggen.TRACEBACK, TIME_LIMIT_JOB],
            "python_exception",
            loggen.TRACEBACK[-1].removeprefix("[rank3]: "),
        ),
    ],
)
def test_slurms_time_limit_and_preemption_are_named(host, tmp_path, lines, kind, message):
    make_run(tmp_path, MB8, [*loggen.megatron_bridge_lines(range(1, 31)), *lines])
    r = parse(host, tmp_path)[MB8]
    assert (r.status, r.failure.kind, r.failure.message) == ("failed", kind, message)


def test_symptoms_never_win_over_a_cause(host, tmp_path):
    # The launcher's SIGTERM and srun's task exits come first in this log; the traceback is the cause.
    make_run(
        tmp_path,
        MB8,
        [
            *loggen.megatron_bridge_lines(range(1, 31)),
            SIGTERM,
            TIME_LIMIT_STEP[2],
            *loggen.TRACEBACK,
        ],
    )
    r = parse(host, tmp_path)[MB8]
    assert r.failure.kind == "python_exception"
    found = {f.kind for f in failures(tmp_path, [SIGTERM, TIME_LIMIT_STEP[2], *loggen.TRACEBACK])}
    assert found == {"signal", "task_exit", "python_exception"}


def test_a_log_of_symptoms_alone_names_the_first(host, tmp_path):
    make_run(
        tmp_path, MB8, [*loggen.megatron_bridge_lines(range(1, 31)), TIME_LIMIT_STEP[2], SIGTERM]
    )
    r = parse(host, tmp_path)[MB8]
    assert (r.status, r.reason) == ("failed", f"task exit: {TIME_LIMIT_STEP[2]}")


def test_torchruns_summary_is_a_symptom_and_its_own_signal_a_cause(tmp_path):
    # torch/distributed/elastic/multiprocessing/errors/__init__.py (ChildFailedError): the launcher's
    # summary of a worker that failed is a symptom, wherever the worker's own traceback is.
    summary = [
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/torchrun", line 8, in <module>',
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        *loggen.TRACEBACK,
    ]
    # multiprocessing/api.py (SignalException: "Process {pid} got signal: {sigval}"): torchrun itself was
    # signalled from outside; that is why the run ended (issue 40), and a worker's error after it follows.
    signalled = [
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/torchrun", line 8, in <module>',
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4042 got signal: 15",
        *loggen.TRACEBACK,
    ]
    for chunk_size in (64, 1 << 20):
        found = {f.kind: f.message for f in failures(tmp_path, summary, chunk_size)}
        assert set(found) == {"child_failed", "python_exception"}, chunk_size
        assert found["python_exception"] == "ValueError: bad tensor shape (8192, 4096) vs (4096,)"
        found = {f.kind: f.message for f in failures(tmp_path, signalled, chunk_size)}
        assert set(found) == {"killed"}, chunk_size
        assert found["killed"] == (
            "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4042 got signal: 15 "
            "(SIGTERM)"
        )


def test_progress_bars_and_rank_prefixes_are_not_the_message(tmp_path):
    # ironbar/arc24 (its fine-tuning notes): tqdm's bar, then the traceback on the same line.
    bar = (
        "  5%|█████▎                                                                                                 "
        "    | 5/100 [00:18<05:26,  3.44s/it]"
    )
    lines = [
        bar + "Traceback (most recent call last):",
        '  File "/mnt/hdd0/MEGA/AI/22_Kaggle/arc24/scripts/fine-tuning.py", line 773, in <module>',
        "    trainer.train()",
        "ValueError: Batch does not contain any data (`None`). At the end of all iterable data available "
        "before expected stop iteration.",
    ]
    [found] = failures(tmp_path, lines)
    assert found.message == lines[-1]
    # tqdm redraws its line after a \r: a file holds every redraw on one line, the error after the last
    # (bars of the same issue; the OOM is NCCL's words in NVIDIA/nccl#1235).
    redraws = "\r".join([bar, bar.replace("5/100", "6/100"), NCCL_OOM[0].split("] ", 1)[1]])
    [found] = failures(tmp_path, [redraws])
    assert (found.kind, found.message) == (
        "cuda_oom",
        "include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'",
    )
    [found] = failures(tmp_path, [NAN_RAISED])
    assert found.message.startswith("RuntimeError: Rank 2, node dcfai-xe9680-01")


def test_a_run_that_can_never_reach_the_window_says_so(host, tmp_path):
    make_run(tmp_path / "a", MB8, loggen.megatron_bridge_lines(range(1, 30), last=29))
    r = parse(host, tmp_path / "a")[MB8]
    assert (r.status, r.reason) == (
        "too_short",
        (
            "the run ended normally at iteration 29, before the end of the statistics window 35-44, which it can "
            "never reach; run at least 44 steps"
        ),
    )
    make_run(tmp_path / "b", NEMO8, loggen.nemo2_lines(range(0, 30), last=29))  # 0-based: 30 steps
    r = parse(host, tmp_path / "b")[NEMO8]
    assert r.reason.endswith("window 35-44, which it can never reach; run at least 45 steps")
    # stopped at 20 of 29
    make_run(tmp_path / "c", MB8, loggen.megatron_bridge_lines(range(1, 21), last=29))
    r = parse(host, tmp_path / "c")[MB8]
    assert (r.status, r.reason) == (
        "too_short",
        (
            "the run's final iteration is 29 (it stopped at 20): the statistics window 35-44 can never be reached; "
            "run at least 44 steps"
        ),
    )
    make_run(
        tmp_path / "d", MB8, [*loggen.megatron_bridge_lines(range(1, 21), last=29), loggen.OOM]
    )
    r = parse(host, tmp_path / "d")[MB8]  # failed: the reason is the OOM, the note says the rest
    assert (
        r.status == "failed"
        and (
            "the run's final iteration is 29 (it stopped at 20): the statistics window "
            "35-44 can never be reached; run at least 44 steps"
        )
        in r.notes
    )


def test_a_logged_global_batch_size_that_differs_from_the_name_withholds_the_verdict(
    host, tmp_path
):
    make_run(
        tmp_path,
        MB8,
        loggen.megatron_bridge_lines(range(1, 51), gbs=256, step_ms=dict.fromkeys(range(51), 1e3)),
    )
    r = parse(host, tmp_path)[MB8]
    assert r.context.gbs == 256  # what the log says: every figure is derived from it
    doubt = "the log's global batch size is 256 (its iteration lines) but its experiment's name says 128"
    assert r.context.doubts == (doubt,)
    assert f"not judged: {doubt}" in r.notes
    assert r.reference is None  # no published figure judges it
    assert r.tokens_per_s == pytest.approx(8192 * 256 / 1.0)


def test_an_overflowing_step_time_is_invalid_and_the_listing_goes_on(cli, tmp_path):
    good, bad = tmp_path / "good", tmp_path / "bad"
    make_run(good, MB8, loggen.megatron_bridge_lines(range(1, 51)))
    make_run(
        bad,
        MB8,
        loggen.megatron_bridge_lines(range(1, 51), step_ms={40: 1e308}),
        stamp="1766139999",
    )
    assert (
        "elapsed time per iteration (ms): 1000000000000000010979063629440455417404923096773118"
        in (next(bad.rglob("log-*.out")).read_text())
    )  # Megatron's {:.1f} of 1e308
    result = cli("results", "--json", str(tmp_path))
    assert result.code == 0, result.err
    rows = {r["failure_reason"]: r["status"] for r in json.loads(result.out)}
    assert rows == {
        None: "success",
        (
            "step time is not a finite number of ms below 1e+09 (1e+308) at iteration 40, inside the window 35-44"
        ): "invalid_step_time",
    }
    table = cli("results", str(tmp_path))
    short = (
        MB8.removeprefix("pretrain_").replace("_cp1", "").replace("_vpNone", "").replace("_ep1", "")
    )
    # both runs, by their short name
    assert table.code == 0 and table.out.count(short) >= 2, table.out


# torchtitan's metrics lines. pytorch/torchtitan#3393: every step logged, rank prefix, grad_norm.
TITAN_EVERY_STEP = [
    "[rank0]:[titan] 2026-05-18 16:04:46,338 - root - INFO - step: 14  loss:  3.24405  grad_norm:  0.8319  memory:  "
    "9.46GiB(64.99%)  tps: 7,282  tflops: 0.52  mfu: 0.17%",
    "[rank0]:[titan] 2026-05-18 16:04:47,456 - root - INFO - step: 15  loss:  3.10680  grad_norm:  0.8587  memory:  "
    "9.46GiB(64.99%)  tps: 7,334  tflops: 0.53  mfu: 0.17%",
    "[rank0]:[titan] 2026-05-18 16:04:48,577 - root - INFO - step: 16  loss:  3.05047  grad_norm:  0.5443  memory:  "
    "9.46GiB(64.99%)  tps: 7,313  tflops: 0.52  mfu: 0.17%",
]
# pytorch/torchtitan#1287: metrics.log_freq 10, no grad_norm, other [titan] lines between.
TITAN_EVERY_TEN = [
    "[rank0]:[titan] 2025-06-16 22:30:48,735 - root - INFO - [GC] Peforming periodical GC collection. 0.06 seconds.",
    "[rank0]:[titan] 2025-06-16 22:30:50,322 - root - INFO - step: 200  loss:  6.1384  memory: 49.66GiB(52.28%)  "
    "tps: 5,856  tflops: 339.16  mfu: 34.29%",
    "[rank0]:[titan] 2025-06-16 22:30:50,758 - root - INFO - Dumping profiler traces at step 200",
    "[rank0]:[titan] 2025-06-16 22:30:50,976 - root - INFO - Finished dumping profiler traces in 0.22 seconds",
    "[rank0]:[titan] 2025-06-16 22:31:04,970 - root - INFO - step: 210  loss:  6.0388  memory: 49.66GiB(52.28%)  "
    "tps: 5,593  tflops: 323.92  mfu: 32.75%",
]
# pytorch/torchtitan#2389: every rank printing, no prefix (three of its seven step-4 lines).
TITAN_ALL_RANKS = [
    "[titan] 2026-02-24 19:46:17,508 - root - INFO - step:  4  loss:  7.62585  grad_norm: 26.6250  memory: "
    "66.91GiB(37.51%)  tps: 10,050  tflops: 314.71  mfu: 13.99%",
    "[titan] 2026-02-24 19:46:17,508 - root - INFO - step:  4  loss:  7.62585  grad_norm: 26.6250  memory: "
    "66.91GiB(37.51%)  tps: 10,050  tflops: 314.69  mfu: 13.99%",
    "[titan] 2026-02-24 19:46:17,508 - root - INFO - step:  4  loss:  7.62585  grad_norm: 26.6250  memory: "
    "66.91GiB(37.51%)  tps: 10,049  tflops: 314.68  mfu: 13.99%",
    "[titan] 2026-02-24 19:46:19,145 - root - INFO - step:  5  loss:  7.07623  grad_norm: 46.5000  memory: "
    "66.91GiB(37.51%)  tps: 10,007  tflops: 313.36  mfu: 13.93%",
]
# torchtitan/tools/utils.py's Color, as torchtitan/components/metrics.py paints the fields.
RED, GREEN, ORANGE, TURQUOISE = (
    "\033[31m",
    "\033[32m",
    "\033[38;2;180;60;0m",
    "\033[38;2;54;234;195m",
)
BLUE, CYAN, MAGENTA, RESET = "\033[34m", "\033[36m", "\033[35m", "\033[39m"


def titan_line(
    stamp: str, step: int, loss: float, grad_norm: float, tps: float, tflops: float, mfu: float
) -> str:
    """torchtitan/components/metrics.py's metrics line, colours and all."""
    return (
        f"[titan] {stamp} - root - INFO - {RED}step: {step:2}  {GREEN}loss: {loss:7.4f}  "
        f"{ORANGE}grad_norm: {grad_norm:7.4f}  {TURQUOISE}memory: {1.34:5.2f}GiB({0.96:.2f}%)  "
        f"{BLUE}tps: {round(tps):,}  {CYAN}tflops: {tflops:,.2f}  {MAGENTA}mfu: {mfu:.2f}%{RESET}"
    )


def titan_run(steps, total: int | None = 50, step_ms: float = 1000.0) -> list[str]:
    """A torchtitan log: torchtitan/train.py's Trainer line (total steps), its start, then each step's line."""
    from datetime import datetime, timedelta

    start = datetime(2025, 11, 25, 19, 45, 0)

    def stamp(at: datetime) -> str:
        return at.strftime("%Y-%m-%d %H:%M:%S") + f",{at.microsecond // 1000:03d}"

    lines = [
        f"[titan] {stamp(start)} - root - INFO - Trainer is initialized with local batch size 8, global batch "
        f"size 64, gradient accumulation steps 1, sequence length 2048, total steps {total} (warmup 2)"
    ]
    lines = lines if total else []
    lines.append(f"[titan] {stamp(start)} - root - INFO - Training starts at step 1")
    for step in steps:
        lines.append(
            titan_line(
                stamp(start + timedelta(milliseconds=step_ms * step)),
                step,
                7.5,
                1.5,
                5000 + step,
                300.0 + step,
                30.0,
            )
        )
    return lines


def titan(tmp_path, lines):
    path = tmp_path / "titan.log"
    path.write_text("\n".join(lines) + "\n")
    return scan(str(path), list(BUILTIN_PARSERS)).findings["torchtitan"]


def test_torchtitans_metrics_lines(tmp_path):
    log = titan(tmp_path, TITAN_EVERY_STEP)
    s = log.samples[15]
    assert (
        s.loss,
        s.grad_norm,
        s.memory_gib,
        s.tokens_per_s_per_gpu,
        s.tflops_per_gpu,
        s.mfu_pct,
    ) == (3.10680, 0.8587, 9.46, 7334.0, 0.53, 0.17)
    assert s.step_time_ms == pytest.approx(1118.0)  # 16:04:46,338 -> 16:04:47,456
    assert log.samples[14].step_time_ms is None  # nothing before it
    assert log.format == "torchtitan" and log.last is None  # an excerpt: no "total steps", no end
    # torchtitan/train.py ends with logger.info("Training completed"): then the last step seen is final.
    log = titan(
        tmp_path,
        [
            *TITAN_EVERY_STEP,
            "[rank0]:[titan] 2026-05-18 16:04:50,000 - root - INFO - Training completed",
        ],
    )
    assert log.last == 16
    log = titan(tmp_path, TITAN_EVERY_TEN)
    assert sorted(log.samples) == [200, 210]
    assert log.samples[210].step_time_ms == pytest.approx(1464.8)  # 14.648 s over 10 steps
    log = titan(tmp_path, TITAN_ALL_RANKS)
    # the first print of each step
    assert (log.samples[4].tflops_per_gpu, log.duplicates) == (314.71, 0)
    assert log.samples[5].step_time_ms == pytest.approx(1637.0)


def test_torchtitans_colours_old_wps_and_validation_lines(tmp_path):
    coloured = "[rank0]:" + titan_line(
        "2026-05-18 16:04:47,456", 15, 3.10680, 0.8587, 7334, 0.53, 0.17
    )
    assert "\033[34mtps: 7,334  \033[36mtflops: 0.53  \033[35mmfu: 0.17%\033[39m" in coloured
    # torchtitan's train.py before "tps": its f-string's fields, "wps:" and no tflops or grad_norm.
    old = (
        "[titan] 2024-05-10 10:00:02,000 - root - INFO - \033[36mstep: 16  \033[32mloss:  3.0505  "
        "\033[33mmemory:  9.46GiB(64.99%)  \033[34mwps: 7,313  \033[35mmfu: 0.17%\033[39m"
    )
    # torchtitan/components/metrics.py's log_validation line: not a training step.
    validation = (
        "[titan] 2024-05-10 10:00:03,000 - root - INFO - \033[33mvalidate step: 17  \033[32mloss:  3.1000  "
        "\033[38;2;54;234;195mmemory:  9.46GiB(64.99%)  \033[34mtps: 9,000\033[39m"
    )
    log = titan(tmp_path, [TITAN_EVERY_STEP[0], coloured, old, validation])
    assert sorted(log.samples) == [14, 15, 16]
    assert (log.samples[15].tokens_per_s_per_gpu, log.samples[15].step_time_ms) == (
        7334.0,
        pytest.approx(1118.0),
    )
    assert (log.samples[16].tokens_per_s_per_gpu, log.samples[16].tflops_per_gpu) == (7313.0, None)


@pytest.mark.parametrize(
    ("steps", "count"),
    [
        (range(1, 51), 10),  # metrics.log_freq 1
        (
            [1, *range(10, 51, 10)],
            2,
        ),  # the default log_freq 10: steps 40 (31-40) and 50 (41-50) overlap 35-44
    ],
)
def test_a_torchtitan_run_in_results_and_compare(cli, tmp_path, steps, count):
    make_run(tmp_path / "base", "torchtitan_llama3_8b", titan_run(steps, step_ms=1010.0))
    run = make_run(tmp_path / "runs", "torchtitan_llama3_8b", titan_run(steps))
    rows = json.loads(cli("results", "--json", str(tmp_path / "runs")).out)
    [row] = rows
    assert (row["status"], row["samples_in_window"], row["max_iteration"]) == ("success", count, 50)
    assert row["time_mean_ms"] == pytest.approx(1000.0)
    assert row["tflops_per_gpu_mean"] == pytest.approx(
        sum(300.0 + s for s in steps if 35 <= s <= 50 and (count == 2 or s <= 44)) / count
    )
    baseline = tmp_path / "baseline.json"
    baseline.write_text(cli("results", "--json", str(tmp_path / "base")).out)
    compared = cli("compare", str(run), "--baseline", str(baseline), "--json")
    [verdict] = [v for v in json.loads(compared.out)[0]["verdicts"] if v["against"] == "baseline"]
    assert (verdict["outcome"], verdict["ratio"]) == ("pass", pytest.approx(1.01))


def test_torchtitan_results_carry_its_own_figures(host, tmp_path):
    make_run(tmp_path, "torchtitan_llama3_8b", titan_run(range(1, 51)))
    [c] = Collector(host).collect([str(tmp_path)])
    r = c.result
    assert (r.format, r.last_iteration, r.context.gbs) == ("torchtitan", 50, 64)
    assert r.stats.tflops_mean == pytest.approx(sum(300.0 + s for s in range(35, 45)) / 10)
    assert (
        "torchtitan's own figures over the window (means): 5,040 tokens/s per GPU, MFU 30.00% (of the peak "
        "torchtitan assumes), peak reserved memory 1.34 GiB"
    ) in r.notes
    # total steps 50, stopped at 30
    make_run(tmp_path / "short", "torchtitan_llama3_8b", titan_run(range(1, 31)))
    [c] = Collector(host).collect([str(tmp_path / "short")])
    assert (c.result.status, c.result.reason) == (
        "incomplete",
        "the final iteration (50) was not reached; the last logged is 30; window iterations 35-44 are "
        "missing",
    )


# Issue 31, item 9: real failure wordings that were read wrong.

# deepspeedai/Megatron-DeepSpeed#207: torchrun's SIGTERMs to the survivors, written before its agent's line.
TORCHRUN_SIGTERMS = (
    "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 142438 closing signal SIGTERM",
    "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 142439 closing signal SIGTERM",
)
TORCHRUN_FAILED = (
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -6) local_rank: 0 (pid: 142437) of "
    "binary: /opt/conda/bin/python"
)
# czp16/Bridge-LLM-reasoning#1: the end of ChildFailedError's report.
ROOT_CAUSE = (
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2025-11-24_17:05:40",
    "  host      : user-Rack-Server",
    "  rank      : 1 (local_rank: 1)",
    "  exitcode  : -6 (pid: 2195196)",
    "  error_file: <N/A>",
    "  traceback : Signal 6 (SIGABRT) received by PID 2195196",
    "========================================================",
)
ROOT_CAUSE_REASON = (
    "worker failed: Root Cause (first observed failure): rank 1 (local_rank: 1) on user-Rack-Server, "
    "exitcode -6 (pid: 2195196): Signal 6 (SIGABRT) received by PID 2195196"
)


def test_torchruns_root_cause_is_the_reason_not_the_sigterms_it_sent(host, tmp_path):
    steps = list(loggen.megatron_bridge_lines(range(1, 31)))
    make_run(tmp_path / "a", MB8, [*steps, *TORCHRUN_SIGTERMS, TORCHRUN_FAILED, *ROOT_CAUSE])
    # before: "signal: ...Sending process 142438 closing signal SIGTERM"
    r = parse(host, tmp_path / "a")[MB8]
    assert (r.status, r.failure.kind, r.reason) == ("failed", "worker_failed", ROOT_CAUSE_REASON)
    # the agent's line alone: its words, and the signal its exit code stands for
    make_run(tmp_path / "b", MB8, [*steps, *TORCHRUN_SIGTERMS, TORCHRUN_FAILED])
    r = parse(host, tmp_path / "b")[MB8]
    assert r.reason == (
        "worker failed: failed (exitcode: -6) local_rank: 0 (pid: 142437) of binary: /opt/conda/bin/python "
        "(SIGABRT)"
    )
    # a worker that said why is the cause; torchrun's account of it is not
    make_run(tmp_path / "c", MB8, [*steps, *loggen.TRACEBACK, *TORCHRUN_SIGTERMS, *ROOT_CAUSE])
    assert parse(host, tmp_path / "c")[MB8].failure.kind == "python_exception"
    # the block read the same across chunk ends
    lines = [*TORCHRUN_SIGTERMS, TORCHRUN_FAILED, *ROOT_CAUSE]
    for chunk_size in (64, 200, 1 << 20):
        found = {f.kind: f for f in failures(tmp_path, lines, chunk_size)}
        assert found["worker_failed"].message == ROOT_CAUSE_REASON.removeprefix("worker failed: ")
        assert (
            found["worker_failed"].offset
            == len(TORCHRUN_SIGTERMS[0]) + len(TORCHRUN_SIGTERMS[1]) + 2
        )


# banyan-team/banyan-julia#6 (JOB and STEP) and lyulyul/shine-cluster#4 (slurmstepd-<host>): scancel's words.
CANCEL_JOB = (
    "slurmstepd: error: *** JOB 3737 ON compute-dy-t3large-2 CANCELLED AT 2021-08-03T16:28:28 ***"
)
CANCEL_STEP = (
    "slurmstepd-localhost: error: *** STEP 204.0 ON localhost CANCELLED AT 2021-02-13T16:38:01 ***"
)


@pytest.mark.parametrize("line", [CANCEL_JOB, CANCEL_STEP])
def test_a_slurm_cancel_without_a_cause_is_cancelled(host, tmp_path, line):
    make_run(tmp_path, MB8, [*loggen.megatron_bridge_lines(range(1, 31)), line, TIME_LIMIT_STEP[2]])
    r = parse(host, tmp_path)[MB8]  # before: incomplete, the cancel unread
    assert (r.status, r.failure.kind) == ("cancelled", "cancelled")
    assert r.reason == (
        f"the job was cancelled at iteration 30: {line} (Slurm names no cause: scancel, by a user, an "
        "administrator or a tool)"
    )
    # one with a cause stays that cause
    assert {f.kind for f in failures(tmp_path, [TIME_LIMIT_JOB, PREEMPTED])} == {
        "time_limit",
        "preempted",
    }


def test_step_time_lines_without_iteration_lines_say_what_they_hold(host, tmp_path):
    # The log of a node without the last rank: rank 0's Step Time lines, never an iteration line.
    lines = loggen.megatron_bridge_lines(
        range(1, 51),
        step_ms=dict.fromkeys(range(51), 1250.0),
        tflops=dict.fromkeys(range(51), 900.0),
    )
    make_run(tmp_path, MB8, [line for line in lines if "Step Time" in line])
    r = parse(host, tmp_path)[MB8]  # before: "no iteration lines in N bytes", then no_data
    assert (r.status, r.stats, r.failure) == ("incomplete", None, None)
    assert r.reason.startswith(
        "no iteration lines, but 50 Megatron-Bridge 'Step Time' lines (median 1.25 s, mean 1.25 s, median "
        "900.0 TFLOP/s/GPU): Megatron-Bridge prints them on rank 0 and the iteration lines on the last rank"
    )
    assert r.extra["step_time_lines"]["lines"] == 50


def test_step_time_lines_of_before_november_2025_pair_with_their_iteration(tmp_path):
    # NVIDIA-NeMo/Megatron-Bridge#388's wording ("...TFLOP/s/GPU", no MODEL_), then its iteration's line.
    iteration = list(loggen.megatron_bridge_lines([7]))[1]
    path = tmp_path / "log.txt"
    path.write_text("Step Time : 12.78s GPU utilization: 528.1 TFLOP/s/GPU\n" + iteration + "\n")
    log = scan(str(path), list(BUILTIN_PARSERS)).findings["megatron_bridge"]
    assert log.samples[7].tflops_per_gpu == 528.1  # before: None


# NVIDIA-NeMo/Megatron-Bridge#1656: Megatron's line once training finished, then the hang until the time limit.
TRAINING_DONE = "[after training is done] datetime: 2025-12-03 14:45:03 "
HUNG = (
    "warning: training finished (iteration 50/50), but the job did not end cleanly: it did not exit before "
    f"Slurm's time limit ended it (a hang at exit?) (time limit: {TIME_LIMIT_JOB}); the measurement is complete"
)


def test_a_run_killed_after_training_finished_has_one_status_for_every_covered_window(
    host, tmp_path
):
    make_run(tmp_path / "all", MB8, [*loggen.megatron_bridge_lines(range(1, 51)), TIME_LIMIT_JOB])
    for window in ((35, 44), (50, 50), (1, 50)):
        r = parse(host, tmp_path / "all", window=window)[MB8]
        assert (r.status, r.reason, r.failure.kind) == ("success", HUNG, "time_limit"), window
    # logged every 10 iterations: the default window is not covered, 40:40 and 50:50 are
    every10 = [*loggen.megatron_bridge_lines(range(10, 51, 10)), TRAINING_DONE, TIME_LIMIT_JOB]
    make_run(tmp_path / "every10", MB8, every10)
    r = parse(host, tmp_path / "every10")[MB8]  # before: "failed", "time limit: ..."
    assert r.status == "incomplete"
    assert r.reason == "window iterations 35-39, 41-44 are missing; " + HUNG.removeprefix(
        "warning: "
    ).removesuffix("; the measurement is complete")
    for window in ((40, 40), (50, 50)):
        assert parse(host, tmp_path / "every10", window=window)[MB8].status == "success", window
    # Megatron's own line says training finished even where the final iteration is not logged
    make_run(
        tmp_path / "done",
        MB8,
        [*loggen.megatron_bridge_lines(range(1, 45)), TRAINING_DONE, TIME_LIMIT_JOB],
    )
    r = parse(host, tmp_path / "done")[MB8]  # before: "failed", "time limit: ..."
    assert r.status == "incomplete" and r.failure.kind == "time_limit"
    assert r.reason.startswith(
        "the final iteration (50) was not reached; the last logged is 44; training finished (the log says "
        "'[after training is done] datetime: 2025-12-03 14:45:03'), but the job did not end cleanly"
    )
    # a time limit before that line is still the reason
    make_run(
        tmp_path / "before",
        MB8,
        [*loggen.megatron_bridge_lines(range(1, 31)), TIME_LIMIT_JOB, TRAINING_DONE],
    )
    assert parse(host, tmp_path / "before")[MB8].status == "failed"
