"""The worker (``python -m llmb.worker RUN_JSON``) as a process: how a rank that fails says so in its log."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from llmb.runs.runspec import RunSpec

# The worker with the job's start (the GPU check) replaced by ``action``; then the worker's own main.
RUN = """
import os, sys
import llmb.lifecycle.provenance as provenance
import llmb.worker as worker
provenance.start_job = lambda *args, **kwargs: {action}
sys.exit(worker.main([sys.argv[1]]))
"""


# The worker with the job's start a no-op and the torch engine's training replaced by ``train``; an exit
# handler shows whether the interpreter finalized.
FINISH = """
import atexit, sys
import llmb.engines.torch.train as engine
import llmb.lifecycle.provenance as provenance
import llmb.worker as worker
provenance.start_job = lambda *args, **kwargs: None
engine.train = {train}
atexit.register(lambda: print("FINALIZED", flush=True))
print("worker returned", worker.main([sys.argv[1]]), flush=True)
"""


def _run_json(tmp_path: Path, **changes) -> Path:
    inner = tmp_path / "e"
    inner.mkdir(parents=True)
    spec = RunSpec(
        job_id="local-abc123",
        workload="llama31",
        variant="v",
        framework="megatron_bridge",
        engine="torch",
        size="8b",
        arch={},
        proxy="tiny",
        gpu="h100",
        dtype="bf16",
        compute_dtype="float32",
        device="cpu",
        ranks=1,
        mbs=1,
        ga=1,
        gbs=1,
        seq_len=64,
        steps=3,
        seed=1,
        compile=False,
        flops_per_sample=1.0,
        experiment="e",
        run_dir=str(tmp_path),
        inner_dir=str(inner),
        log=str(inner / "log-e.out"),
        **changes,
    )
    path = tmp_path / "run.json"
    path.write_text(json.dumps(spec.to_dict()))
    return path


def _worker(tmp_path: Path, action: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", RUN.format(action=action), str(_run_json(tmp_path))],
        capture_output=True,
        text=True,
        timeout=300,
        env={"RANK": "1", "WORLD_SIZE": "2", "PATH": "/usr/bin:/bin"},
    )


def test_an_exception_is_printed_with_the_rank_on_every_line_and_exits_1(tmp_path):
    proc = _worker(tmp_path, "(_ for _ in ()).throw(RuntimeError('the node is on fire'))")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == "[rank1]: RuntimeError: the node is on fire" and all(
        x.startswith("[rank1]: ") for x in lines
    )


def test_a_rank_that_native_code_aborts_prints_where_python_was(tmp_path):
    proc = _worker(tmp_path, "os.abort()")
    assert proc.returncode == -signal.SIGABRT, proc.stderr
    assert "Fatal Python error: Aborted" in proc.stderr
    stack = proc.stderr[proc.stderr.index("Fatal Python error") :]
    assert "in <lambda>" in stack and "worker.py" in stack and "in main" in stack, stack


def _finish(tmp_path: Path, train: str, **changes) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", FINISH.format(train=train), str(_run_json(tmp_path, **changes))],
        capture_output=True,
        text=True,
        timeout=300,
        env={"RANK": "0", "WORLD_SIZE": "1", "PATH": "/usr/bin:/bin"},
    )


def _after_first_line(stdout: str) -> str:
    """The worker's output after its first line, which says what it imports (tests/test_worker_library.py)."""
    first, _, rest = stdout.partition("\n")
    assert first.startswith("[llmb] worker: Python ") and "click " in first, first
    return rest


def test_a_finished_torch_engine_rank_exits_0_without_finalizing(tmp_path):
    proc = _finish(tmp_path, "lambda spec, **kwargs: print('trained', flush=True)")
    assert proc.returncode == 0, proc.stderr
    assert _after_first_line(proc.stdout).split("\n")[0] == "trained"
    assert "FINALIZED" not in proc.stdout and "returned" not in proc.stdout


def test_a_failed_rank_and_an_nsys_profiled_one_finalize_as_usual(tmp_path):
    failed = _finish(tmp_path / "failed", "lambda spec, **kwargs: 1 / 0")
    assert failed.returncode == 0, failed.stderr
    assert _after_first_line(failed.stdout).split() == ["worker", "returned", "1", "FINALIZED"], (
        failed.stderr
    )
    assert "[rank0]: ZeroDivisionError: division by zero" in failed.stderr
    profiled = _finish(
        tmp_path / "nsys",
        "lambda spec, **kwargs: None",
        profile={"kind": "nsys", "start": 2, "stop": 3},
    )
    assert _after_first_line(profiled.stdout).split() == ["worker", "returned", "0", "FINALIZED"], (
        profiled.stderr
    )
