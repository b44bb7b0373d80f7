"""Each built-in parser on the line formats of field-facts §2 and the seeds."""

from __future__ import annotations

import math
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402
from llmb.results.formats import BUILTIN_PARSERS, NCCL_DATATYPE_BYTES  # noqa: E402
from llmb.results.scan import scan  # noqa: E402


def scan_text(tmp_path, text: str, chunk_size: int = 8 << 20, name: str = "log.out"):
    path = tmp_path / name
    path.write_text(text)
    return scan(str(path), list(BUILTIN_PARSERS), chunk_size=chunk_size)


def test_megatron_bridge_field_facts_example(tmp_path):
    text = (
        "Step Time : 1.00s GPU utilization: 939.5MODEL_TFLOP/s/GPU\n"
        " [2026-11-21 10:00:00] iteration       35/      50 | consumed samples: 4480 | elapsed time per iteration "
        "(ms): 1004.9 | learning rate: 3.0E-05 | global batch size:   128 | lm loss: 1.2E+01 | loss scale: 1.0 | "
        "grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    )
    log = scan_text(tmp_path, text).findings["megatron_bridge"]
    sample = log.samples[35]
    assert (
        sample.step_time_ms,
        sample.tflops_per_gpu,
        sample.loss,
        sample.grad_norm,
        sample.global_batch_size,
    ) == (1004.9, 939.5, 12.0, 1.234, 128)
    assert log.last == 50


def test_tflops_pair_with_their_own_iteration_not_by_position(tmp_path):
    lines = list(
        loggen.megatron_bridge_lines(range(30, 41), tflops={i: 100.0 + i for i in range(30, 41)})
    )
    del lines[2 * (36 - 30)]  # iteration 36 lost its Step Time line
    log = scan_text(tmp_path, "\n".join(lines) + "\n").findings["megatron_bridge"]
    assert log.samples[36].tflops_per_gpu is None
    assert [log.samples[i].tflops_per_gpu for i in (35, 37, 40)] == [135.0, 137.0, 140.0]


def test_throughput_field_in_the_iteration_line_wins(tmp_path):
    text = (
        "Step Time : 1.00s GPU utilization: 1.0MODEL_TFLOP/s/GPU\n"
        "iteration 7/50 | elapsed time per iteration (ms): 1000.0 | throughput per GPU (TFLOP/s/GPU): 555.5 |\n"
        "iteration 8/50 | elapsed time per iteration (ms): 2000.0 | 300.0 MODEL_TFLOP/s/GPU |\n"
    )
    log = scan_text(tmp_path, text).findings["megatron_bridge"]
    assert (log.samples[7].tflops_per_gpu, log.samples[8].tflops_per_gpu) == (555.5, 300.0)


def test_ranks_interleaving_keep_their_own_step_time(tmp_path):
    text = (
        "job/0 Step Time : 1.00s GPU utilization: 111.0MODEL_TFLOP/s/GPU\n"
        "job/7 Step Time : 1.00s GPU utilization: 777.0MODEL_TFLOP/s/GPU\n"
        "job/0  [2026-11-21] iteration 5/50 | elapsed time per iteration (ms): 1000.0 |\n"
    )
    log = scan_text(tmp_path, text).findings["megatron_bridge"]
    assert log.samples[5].tflops_per_gpu == 111.0


def test_nan_grad_norm_and_duplicates(tmp_path):
    lines = list(loggen.megatron_bridge_lines(range(1, 6), nan_at=[3], step_ms={2: 500.0}))
    # a restarted run logs 2 again
    lines += list(loggen.megatron_bridge_lines([2], step_ms={2: 700.0}))
    log = scan_text(tmp_path, "\n".join(lines) + "\n").findings["megatron_bridge"]
    assert log.nan_grad_norm == [3] and math.isnan(log.samples[3].grad_norm)
    assert log.duplicates == 1 and log.samples[2].step_time_ms == 700.0


def test_nemo2_lines_are_zero_based(tmp_path):
    text = (
        "Training epoch 0, iteration 45/99 | lr: 6.897e-06 | global_batch_size: 128 | global_step: 45 | "
        "reduced_train_loss: 11.96 | train_step_timing in s: 6.08 | TFLOPS_per_GPU: 1.249e+03 | consumed_samples: 5888\n"
        "Training epoch 0, iteration 49/49 | lr: 7.496e-06 | global_batch_size: 128 | global_step: 49 | "
        "peak_memory_usage: 70833405952 | memory_allocated: 44271689728 | reduced_train_loss: 11.96 | "
        "train_step_timing in s: 12.39 | consumed_samples: 6400\n"
    )
    log = scan_text(tmp_path, text).findings["nemo2"]
    assert log.samples[45].step_time_ms == pytest.approx(6080.0)
    assert log.samples[45].tflops_per_gpu == 1249.0
    assert log.samples[49].step_time_ms == pytest.approx(12390.0) and log.last == 99
    # not Megatron's format
    assert scan_text(tmp_path, text).findings.get("megatron_bridge") is None


@pytest.mark.parametrize(
    ("lines", "save", "load", "iteration"),
    [
        ([loggen.CHECKPOINT_MEGATRON], 24.89513, None, 50),
        ([loggen.CHECKPOINT_NEMO_SAVE, loggen.CHECKPOINT_NEMO_LOAD], 4.389, 9.712, 50),
        (
            [
                "successfully saved checkpoint from iteration 50 to /x",
                "(min, max) time across ranks (ms):",
                "    save-checkpoint ................................: (100.0, 2500.5)",
                "    load-checkpoint ................................: (700.25, 900.75)",
            ],
            2.5005,
            0.90075,
            50,
        ),
    ],
)
def test_checkpoint_timings_both_formats(tmp_path, lines, save, load, iteration):
    timings = scan_text(tmp_path, "\n".join(lines) + "\n").findings["checkpoint"]
    assert timings.save_s == pytest.approx(save) if save else timings.save_s is None
    assert timings.load_s == pytest.approx(load) if load else timings.load_s is None
    assert timings.save_iteration == iteration


def test_nccl_trace_summary_matches_an_independent_count(tmp_path):
    lines = list(loggen.nccl_lines(3000, seed=5))
    lines.insert(
        100,
        "[7] NCCL INFO AllReduce: opCount 2 sendbuff 0x1 recvbuff 0x1 count 1 datatype 1 op 0 root 0 "
        "comm 0x55556b100660 [nranks=128] stream 0x5555630c58b0",
    )  # field-facts' example
    # not a collective
    lines.insert(200, "node1:1:1 [0] NCCL INFO Channel 00/02 :    0   1   2   3")
    found = scan_text(tmp_path, "\n".join(lines) + "\n", chunk_size=4096).findings["nccl"]
    expected: dict[str, dict] = {}
    for line in lines:
        words = line.split()
        if "opCount" not in words:
            continue
        name = words[words.index("opCount") - 1].rstrip(":")
        count, dtype = int(words[words.index("count") + 1]), int(words[words.index("datatype") + 1])
        nranks = int(line.split("[nranks=")[1].split("]")[0])
        e = expected.setdefault(name, {"calls": 0, "elements": 0, "bytes": 0, "sizes": Counter()})
        e["calls"] += 1
        e["elements"] += count
        e["bytes"] += count * NCCL_DATATYPE_BYTES[dtype]
        e["sizes"][nranks] += 1
    assert {c.name: (c.calls, c.elements, c.bytes, c.communicator_sizes) for c in found} == {
        n: (e["calls"], e["elements"], e["bytes"], dict(e["sizes"])) for n, e in expected.items()
    }


def test_failures(tmp_path):
    text = "\n".join([loggen.NODE_FAILURE, loggen.WATCHDOG, loggen.OOM, *loggen.TRACEBACK]) + "\n"
    found = {f.kind: f.message for f in scan_text(tmp_path, text).findings["failures"]}
    assert found["cuda_oom"].startswith(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    )
    assert (
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5" in found["nccl_timeout"]
    )
    assert "DUE TO NODE FAILURE" in found["node_failure"]
    assert found["python_exception"] == "ValueError: bad tensor shape (8192, 4096) vs (4096,)"


def test_traceback_with_interleaved_ranks_and_across_chunks(tmp_path):
    other = '[rank5]:   File "elsewhere.py", line 1, in f'
    lines = list(loggen.TRACEBACK)
    lines.insert(3, other)
    lines.insert(2, "[rank5]: some unrelated log line from another rank")
    text = "noise\n" * 50 + "\n".join(lines) + "\n"
    for chunk_size in (64, 97, 1 << 20):  # tiny chunks split the traceback
        found = {
            f.kind: f.message
            for f in scan_text(tmp_path, text, chunk_size=chunk_size).findings["failures"]
        }
        assert (
            found["python_exception"] == "ValueError: bad tensor shape (8192, 4096) vs (4096,)"
        ), chunk_size


def test_chained_tracebacks_report_the_first_exception(tmp_path):
    text = (
        "\n".join(
            [
                "Traceback (most recent call last):",
                '  File "a.py", line 1, in <module>',
                "KeyError: 'tp'",
                "",
                "During handling of the above exception, another exception occurred:",
                "",
                "Traceback (most recent call last):",
                '  File "b.py", line 2, in <module>',
                "RuntimeError: config incomplete",
            ]
        )
        + "\n"
    )
    found = {f.kind: f.message for f in scan_text(tmp_path, text).findings["failures"]}
    assert found["python_exception"] == "KeyError: 'tp'"


def test_step_time_lines_are_a_finding_only_without_iteration_lines(tmp_path):
    lines = list(loggen.megatron_bridge_lines(range(1, 4)))
    assert scan_text(tmp_path, "\n".join(lines) + "\n").findings["step_time_lines"] is None
    alone = "\n".join(lines[0::2]) + "\n"  # rank 0's lines alone
    found = scan_text(tmp_path, alone, chunk_size=64).findings["step_time_lines"]
    assert found["lines"] == 3 and found["median_tflops"] is not None


def test_training_done_is_where_the_failures_parser_counts(tmp_path):
    # the NCCL trace lines the nccl parser takes out are not counted by either
    text = "".join(line + "\n" for line in loggen.nccl_lines(50)) + (
        "[after training is done] datetime: 2025-12-03 14:45:03 \n"
        "slurmstepd: error: *** STEP 4226796.2 ON eos0117 CANCELLED AT 2025-12-03T14:53:02 DUE TO TIME LIMIT ***\n"
    )
    findings = scan_text(tmp_path, text, chunk_size=256).findings
    done, [limit] = findings["training_done"], findings["failures"]
    assert done["line"] == "[after training is done] datetime: 2025-12-03 14:45:03"
    assert limit.kind == "time_limit" and limit.offset > done["offset"]


@pytest.mark.parametrize(
    "piece",
    [
        "*** JOB 1 ON " * 20,  # a Slurm line that never ends its fields
        "failed (exitcode: " * 20,
        "Step Time : 1" * 20,
        "  rank      : " * 20,
        "[after training is done] datetime: " * 20,
    ],
)
def test_the_failure_readers_stay_linear_in_a_line(tmp_path, piece):
    import time

    def seconds(repeats: int) -> float:
        text = "Root Cause (first observed failure):\n" + piece * repeats + " CANCELLED AT x\n"
        start = time.perf_counter()
        scan_text(tmp_path, text)
        return time.perf_counter() - start

    small, large = seconds(1_000), seconds(4_000)  # lines of about 0.3 and 1 MiB
    assert large < 8 * small + 0.5, (small, large)


def test_colour_codes_around_fields_are_read_through(tmp_path):
    # loggen's lines with a terminal's colour codes around the iteration, a value and an exception
    step, line = list(loggen.megatron_bridge_lines([35], step_ms={35: 1004.9}))
    coloured = (
        line.replace(" iteration ", " \x1b[32miteration ", 1)
        .replace("(ms): 1004.9", "(ms): \x1b[1;33m1004.9\x1b[0m", 1)
        .replace(" | consumed", "\x1b[0m | consumed", 1)
    )
    nemo = next(loggen.nemo2_lines([45], step_s={45: 6.08})).replace(
        "6.08", "\x1b[36m6.08\x1b[39m", 1
    )
    error = "\x1b[31m[rank3]: RuntimeError: bad tensor shape\x1b[0m"
    text = "\n".join([step, coloured, nemo, "Traceback (most recent call last):", error]) + "\n"
    findings = scan_text(tmp_path, text).findings
    assert findings["megatron_bridge"].samples[35].step_time_ms == 1004.9  # before: None
    assert findings["nemo2"].samples[45].step_time_ms == pytest.approx(6080.0)
    [failure] = findings["failures"]
    assert failure.message == "RuntimeError: bad tensor shape"


def test_torchtitan_lines_from_before_its_titan_prefix_are_read(tmp_path):
    # torchtitan's logger had no "[titan]" before pytorch/torchtitan#861 (2025-02-19); here under
    # srun --label and in its colours, as tests/real_logs/torchtitan/srun-label-colour-codes-* has them
    def line(stamp: str, step: int, loss: str) -> str:
        return (
            f"1: 2025-03-04 {stamp} - root - INFO - \x1b[36mstep: {step}  \x1b[32mloss:  {loss}  "
            "\x1b[33mmemory: 68.57GiB(86.69%)  \x1b[34mtps: 6,785  \x1b[35mmfu: 39.73%\x1b[39m"
        )

    text = line("00:44:34,441", 1980, "3.4500") + "\n" + line("00:44:44,441", 1990, "3.4370") + "\n"
    log = scan_text(tmp_path, text).findings["torchtitan"]
    assert log is not None  # before: None, no "[titan] " in the log
    sample = log.samples[1990]
    assert (sample.step_time_ms, sample.loss, sample.mfu_pct) == (1000.0, 3.437, 39.73)
    # another program's root-logger line is not torchtitan's
    other = "2025-03-04 00:44:44,441 - trainer - INFO - step: 5  loss:  1.0\n"
    assert scan_text(tmp_path, other).findings["torchtitan"] is None


# AMD Primus's logger puts "[20260515 17:10:34][rank-0/8][INFO] [----metrics.py:12] : " (in colour codes;
# the time and the source tag may be absent) before each line of the trainer it runs; ezpz's is
# "[2025-09-11 14:09:46,954794][I][components/metrics:437:log] ". Lines in those formats, with
# torchtitan's own metrics text after them (tests/real_logs holds ezpz's real log).
PRIMUS = (
    "[\x1b[32m20260515 17:10:{sec:02d}\x1b[0m][\x1b[36mrank-0/8\x1b[0m]"
    "\x1b[1m[INFO]     \x1b[0m\x1b[1m[------------trainer.py:412] : "
)


@pytest.mark.parametrize("header", [PRIMUS, "[rank-0/8][INFO] "], ids=["timed", "untimed"])
def test_torchtitan_behind_primus_headers_is_read_through_the_prefix_stage(tmp_path, header):
    """Issue 40: torchtitan's step lines behind Primus's prefix were not found, and a finished 3-step
    run was no_data; it is too_short, at its last iteration 3."""
    lines = [
        header.format(sec=0)
        + "Trainer is initialized with local batch size 8, global batch size 64, gradient accumulation "
        "steps 1, sequence length 8192, total steps 3 (warmup 1)",
        header.format(sec=1) + "Training starts at step 1.",
        *(
            header.format(sec=10 + 2 * step)
            + f"step: {step}  loss: {12 - step}.0  grad_norm:  1.20  memory: 42.15GiB(44.37%)  "
            f"tps: 1,176  tflops: 68.11  mfu: 6.89%"
            for step in (1, 2, 3)
        ),
        header.format(sec=20) + "Training completed",
    ]
    log = scan_text(tmp_path, "\n".join(lines) + "\n").findings["torchtitan"]
    assert sorted(log.samples) == [1, 2, 3] and log.last == 3
    times = [log.samples[s].step_time_ms for s in (1, 2, 3)]
    # step 1 is warm-up (no time); then the header's seconds between consecutive lines, where it has them
    assert times == ([None, 2000.0, 2000.0] if "17:10" in header else [None, None, None])
    assert log.samples[2].global_batch_size == 64


def test_unread_step_time_lines_pair_as_reading_every_line_pairs():
    """MegatronReader leaves an unprefixed Step Time line unread until an iteration line wants its
    figure: on logs of every mix (prefixed writers, joined lines, colour codes, iteration lines with
    and without their own TFLOP/s/GPU, figures that do not parse), fed in chunks cut anywhere, its
    samples are those of a reader that reads every line at once."""
    import random

    from llmb.results.formats.megatron import ITERATION, MegatronReader
    from llmb.results.lines import find_lines

    class EveryLine(MegatronReader):
        def feed(self, chunk: bytes) -> None:
            for line in find_lines(chunk, b"elapsed time per iteration", b"TFLOP/s/GPU"):
                if b"Step Time : " not in line.body:
                    if (m := ITERATION.search(line.body)) is not None:
                        self._iteration(line.key, m)
                    continue
                self._parts(line.key, line.body)

    rng = random.Random(32)

    def step_time() -> str:
        figure = rng.choice(["939.5", "1.2.3", "12", "4e2"])
        return f"Step Time : {rng.random():.2f}s GPU utilization: {figure}MODEL_TFLOP/s/GPU"

    def iteration(i: int) -> str:
        own = rng.choice(["", f" throughput per GPU (TFLOP/s/GPU): {rng.random():.3f} |"])
        return (
            f" [2026-01-01 00:00:00] iteration {i:8d}/ 50 | elapsed time per iteration (ms): "
            f"{rng.random() * 1000:.1f} |{own} global batch size: 128 | lm loss: 6.4E+00 |"
        )

    for _ in range(300):
        lines = []
        for i in range(1, rng.randrange(2, 40)):
            for _ in range(rng.randrange(0, 3)):
                lines.append(rng.choice(["", "", "3: ", "[rank0]: "]) + step_time())
            text = iteration(i)
            kind = rng.randrange(6)
            if kind == 0:
                text = step_time() + text  # joined
            elif kind == 1:
                text = "\x1b[32m" + step_time() + "\x1b[0m"  # a coloured Step Time, then the line
                lines.append(text)
                text = iteration(i)
            elif kind == 2:
                text = "7: " + text
            lines.append(text)
            if rng.random() < 0.2:
                lines.append("some other output TFLOP/s/GPU")
        data = ("\n".join(lines) + "\n").encode()
        cuts = sorted({0, len(data), *(rng.randrange(len(data)) for _ in range(3))})
        readers = (MegatronReader(), EveryLine())
        for reader in readers:
            begin = 0
            for cut in cuts[1:]:  # chunks end at a line end, as the scanner hands them
                end = data.rfind(b"\n", 0, cut) + 1
                if end > begin:
                    reader.feed(data[begin:end])
                    begin = end
            reader.feed(data[begin:])
        ours, everyline = (reader.finish() for reader in readers)
        assert (ours and ours.samples) == (everyline and everyline.samples), data.decode()
