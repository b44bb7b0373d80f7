"""Flaky application failures: the signature list (data), the tail matcher,
the ``llmb_flaky_signatures`` hook, and the Slurm backend retrying them on
the private Slurm (bare ``--proxy tiny`` runs, a failure injected through the
engine's ``llmb_before_step`` hook by ``tests/fault_plugin.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fault_plugin import ENV as FAULTS  # loads tests/fault_plugin.py in the ranks
from llmb import hookimpl
from llmb.lifecycle.flaky import (
    TAIL_BYTES,
    builtin_signatures,
    first_signature,
    flaky_failure,
    retry_nan_asked,
)
from llmb.plugins.host import PluginHost

# The retryable failures of NVIDIA's performance launcher (Megatron-Bridge scripts/performance), verbatim.
REFERENCE_LIST = [
    "The server socket has failed to listen on any local network address.",
    "Some NCCL operations have failed or timed out.",
    "uncorrectable ECC error encountered",
    "illegal memory access",
    "illegal instruction",
    "torch.distributed.DistNetworkError",
    "torch.distributed.DistBackendError",
    "ncclRemoteError",
    "Watchdog caught collective operation timeout",
    "Segmentation fault",
    "found NaN in",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "double free or corruption",
    "Call to CUDA function failed.",
    "Connection reset by peer",
    "invalid pointer",
    "malloc(): unaligned tcache chunk detected",
    "zmq.error.ZMQError: Address already in use",
    "We couldn't connect to 'https://huggingface.co'",
    "Unpack failed: incomplete input",
    "unspecified launch failure",
    "free(): corrupted unsorted chunks",
    "Segfault encountered",
    "Fatal glibc error",
    "EOFError: No data left in file",
]

NCCL = "Some NCCL operations have failed or timed out."
ITERATION = (
    " [2026-11-20 10:00:0{i}] iteration        {i}/       3 | consumed samples:          {c} | elapsed time "
    "per iteration (ms): 812.5 | learning rate: 3.000000E-05 | global batch size:     4 | lm loss: "
    "{loss} | loss scale: 1.0 | grad norm: {norm} | number of skipped iterations:   0 | number of nan "
    "iterations:   0 |\n"
)


def write_log(path: Path, *parts: str) -> str:
    path.write_text("".join(parts))
    return str(path)


def iteration(i: int, norm: str = "1.234", loss: str = "1.050000E+01") -> str:
    return ITERATION.format(i=i, c=4 * i, norm=norm, loss=loss)


# ---------------------------------------------------------------- the list and the matcher


def test_the_core_list_is_the_reference_launchers_list_exactly():
    assert list(builtin_signatures()) == REFERENCE_LIST
    assert PluginHost(discover=False).flaky_signatures() == tuple(REFERENCE_LIST)


def test_the_earliest_signature_in_the_tail_is_the_cause(tmp_path):
    log = write_log(
        tmp_path / "log.out",
        iteration(1),
        "[rank1]: RuntimeError: Some NCCL operations have failed or timed out. Due to the asynchronous "
        "nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.\n",
        "[rank0]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970\n",
        "srun: error: node1: task 1: Exited with exit code 1\n",
    )
    found = flaky_failure(log, builtin_signatures())
    assert (found.signature, found.retry) == (NCCL, True)
    assert found.describe() == f"flaky failure: {NCCL!r}"
    assert (
        first_signature(b"Segfault encountered\nSegmentation fault\n", builtin_signatures())
        == "Segfault encountered"
    )


def test_no_signature_no_flaky_failure_and_case_matters(tmp_path):
    log = write_log(
        tmp_path / "log.out",
        iteration(1),
        "RuntimeError: CUDA out of memory.\n",
        "segmentation FAULT in a message that only looks alike\n",
    )
    assert flaky_failure(log, builtin_signatures()) is None
    assert flaky_failure(str(tmp_path / "missing.out"), builtin_signatures()) is None


def test_llmbs_own_retry_line_never_makes_a_later_failure_flaky(tmp_path):
    # The line the Slurm backend writes at the top of a retried attempt's log quotes the flaky signature
    # of the attempt before; the new attempt then fails for another reason: that is not flaky.
    log = write_log(
        tmp_path / "log.out",
        f"[llmb] retry of attempt 1 (Slurm job 41, flaky failure: {NCCL!r}); its log: /x/log-1.out\n",
        iteration(1),
        "ValueError: a real bug\n",
    )
    assert flaky_failure(log, builtin_signatures()) is None
    log = write_log(
        tmp_path / "again.out",
        f"[llmb] retry of attempt 1 (flaky failure: {NCCL!r})\n",
        iteration(1),
        f"[rank1]: RuntimeError: {NCCL}, again\n",
    )
    # the run's own line still counts
    assert flaky_failure(log, builtin_signatures()).signature == NCCL


def test_only_the_tail_is_read(tmp_path):
    early = "Connection reset by peer\n"
    filler = "x" * 1000 + "\n"
    log = write_log(
        tmp_path / "log.out", early, filler * (TAIL_BYTES // len(filler) + 2), "ValueError: bad\n"
    )
    # out of the tail: not this failure's last words
    assert flaky_failure(log, builtin_signatures()) is None
    log = write_log(
        tmp_path / "near.out", filler * (TAIL_BYTES // len(filler) + 2), early, "ValueError: bad\n"
    )
    assert flaky_failure(log, builtin_signatures()).signature == "Connection reset by peer"


def test_a_failure_after_the_runs_own_nan_is_not_retried_unless_asked(tmp_path):
    log = write_log(
        tmp_path / "log.out",
        iteration(1),
        iteration(2, norm="nan", loss="NAN"),
        "[rank0]: RuntimeError: Rank 0: found NaN in local grad norm for bucket #0\n",
        "[rank1]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE)\n",
    )
    found = flaky_failure(log, builtin_signatures())
    assert (found.signature, found.retry) == ("found NaN in", False)
    assert "invalid_grad_norm" in found.why_not and "LLMB_RETRY_NAN=1" in found.why_not
    assert flaky_failure(log, builtin_signatures(), retry_nan=True).retry is True
    # A NaN check that fired before any iteration logged NaN is the reference launcher's flaky case.
    log = write_log(
        tmp_path / "early.out", iteration(1), "RuntimeError: found NaN in local grad norm\n"
    )
    assert flaky_failure(log, builtin_signatures()).retry is True


def test_the_opt_in_reads_the_runs_environment():
    assert retry_nan_asked({"LLMB_RETRY_NAN": "1"}) and retry_nan_asked({"LLMB_RETRY_NAN": "yes"})
    assert not retry_nan_asked({}) and not retry_nan_asked({"LLMB_RETRY_NAN": "0"})


# ---------------------------------------------------------------- the hook


class SitePlugin:
    @staticmethod
    @hookimpl
    def llmb_flaky_signatures():
        return ["Lustre: client evicted", NCCL]  # the second is the core's: listed once


class BrokenPlugin:
    @staticmethod
    @hookimpl
    def llmb_flaky_signatures():
        raise RuntimeError("no list today")


class WrongTypes:
    @staticmethod
    @hookimpl
    def llmb_flaky_signatures():
        return ["fine", 42]


def test_plugins_add_signatures_and_bad_contributions_are_skipped(tmp_path):
    host = PluginHost(
        discover=False,
        extra_plugins=[("site", SitePlugin), ("broken", BrokenPlugin), ("wrong", WrongTypes)],
    )
    signatures = host.flaky_signatures()
    assert signatures[: len(REFERENCE_LIST)] == tuple(REFERENCE_LIST)  # the core's first
    assert signatures[len(REFERENCE_LIST) :] == ("Lustre: client evicted",)
    assert "fine" not in signatures  # a list with a non-string is refused whole
    log = write_log(
        tmp_path / "log.out", iteration(1), "OSError: [Errno 108] Lustre: client evicted\n"
    )
    assert flaky_failure(log, builtin_signatures()) is None
    assert flaky_failure(log, signatures).signature == "Lustre: client evicted"


# ---------------------------------------------------------------- on the private Slurm


@pytest.fixture
def env(slurm, tmp_path):
    pytest.importorskip(
        "torch", reason="the torch engine needs torch (./dev.sh installs torch==2.13.0)"
    )
    return {
        "LLMB_INSTALL": str(tmp_path / "install"),
        "LLMB_NO_CACHE": "1",
        "LLMB_BACKEND": "slurm",
        **slurm.env(),
    }


PROXY = [
    "llama31",
    "--size",
    "8b",
    "--gpu",
    "h100",
    "--dtype",
    "bf16",
    "--proxy",
    "tiny",
    "--bare",
    "--gpus",
    "2",
    "--steps",
    "3",
    "--no-window-check",
]


def run_json(llmb_proc, *args, env):
    result = llmb_proc("run", *PROXY, *args, "--json", env=env, timeout=600)
    assert result.out.strip(), result.err[-3000:]
    return result, json.loads(result.out)


def job_record(env, job_id) -> dict:
    return json.loads((Path(env["LLMB_INSTALL"]) / "jobs" / job_id / "job.json").read_text())


@pytest.mark.slurm
def test_a_flaky_failure_is_retried_on_a_fresh_job_that_completes(llmb_proc, env, tmp_path):
    once = tmp_path / "failed-once"
    result, summary = run_json(
        llmb_proc,
        "--retries",
        "1",
        "--env",
        "LLMB_FAIL_AT_STEP=2:1",
        "--env",
        f"LLMB_FAIL_MESSAGE={NCCL}",
        "--env",
        f"LLMB_FAIL_ONCE={once}",
        env={**env, **FAULTS},
    )
    assert result.code == 0 and summary["state"] == "SUCCEEDED", (summary, result.err[-3000:])
    assert summary["attempts"] == 2 and once.exists()
    first, second = job_record(env, summary["job_id"])["details"]["attempts"]
    assert first["slurm_id"] != second["slurm_id"] and first["run_dir"] != second["run_dir"]
    assert first["ended"].startswith(f"flaky failure: {NCCL!r} on node")
    assert first["ended"].endswith("; retried as attempt 2")
    failed_log = Path(first["log"]).read_text()
    assert f"RuntimeError: {NCCL}" in failed_log and f"ended: {first['ended']}" in failed_log
    assert summary["result"]["status"] == "too_short"  # 3 steps: the retry ran to its end
    # The retry's run directory carries the submission's provenance as well as its own job's.
    retried = json.loads((Path(second["run_dir"]) / "provenance.json").read_text())
    first_record = json.loads((Path(first["run_dir"]) / "provenance.json").read_text())
    assert retried["submission"] == first_record["submission"]
    assert retried["job"]["scheduler"] != first_record["job"]["scheduler"]


@pytest.mark.slurm
def test_without_retries_a_flaky_failure_fails_with_its_signature_as_reason(llmb_proc, env):
    result, summary = run_json(
        llmb_proc,
        "--env",
        "LLMB_FAIL_AT_STEP=2:1",
        "--env",
        f"LLMB_FAIL_MESSAGE={NCCL}",
        env={**env, **FAULTS},
    )
    assert result.code == 1 and (summary["state"], summary["attempts"]) == ("FAILED", 1)
    assert summary["reason"].startswith(f"flaky failure: {NCCL!r} on node"), summary["reason"]
    assert summary["reason"].endswith("(not retried: llmb run --retries N resubmits such failures)")


@pytest.mark.slurm
def test_a_nan_that_is_the_runs_own_is_not_retried(llmb_proc, env):
    result, summary = run_json(
        llmb_proc,
        "--retries",
        "1",
        "--env",
        "LLMB_NAN_FROM_STEP=2",
        "--env",
        "LLMB_FAIL_AT_STEP=3",
        "--env",
        "LLMB_FAIL_MESSAGE=found NaN in local grad norm for bucket #0",
        env={**env, **FAULTS},
    )
    assert result.code == 1 and (summary["state"], summary["attempts"]) == ("FAILED", 1), summary
    assert summary["result"]["status"] == "invalid_grad_norm"
    assert summary["reason"].startswith("flaky failure: 'found NaN in' on node")
    assert (
        "not retried: it follows the run's own NaN grad norm (invalid_grad_norm)"
        in summary["reason"]
    )
    assert len(job_record(env, summary["job_id"])["details"]["attempts"]) == 1
