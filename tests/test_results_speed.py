"""What the parse-speed work must not change: a result never depends on the
chunk size, nor on whether worker processes parsed the logs; a worker that
fails costs no result; the fast ``to_dict`` is ``asdict``."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, fields, replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402
from llmb.errors import UsageError  # noqa: E402
from llmb.results import collect  # noqa: E402
from llmb.results import scan as scan_module  # noqa: E402
from llmb.results.collect import Collector  # noqa: E402
from llmb.results.formats import BUILTIN_PARSERS  # noqa: E402
from llmb.results.records import RunResult, Sample, plain  # noqa: E402
from llmb.results.scan import NEAR, Chunk, as_chunk, scan  # noqa: E402
from llmb.results.store import ResultStore, without_samples  # noqa: E402

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="worker processes are forked on Linux only"
)
NOISE = loggen.NOISE_LINE + "\n"


def mixed_log(path: Path) -> None:
    """A log with something for every parser, the lines of a step far apart (noise between)."""
    lines = [
        "[NeMo I 2026-11-21 10:00:00 nemo_logging:393] Experiments will be logged at /nemo_run/experiments/x",
        "node001:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA",
        "node001:1:2 [0] NCCL INFO Using network IB",
    ]
    lines += loggen.nccl_lines(3000, seed=3)
    for i, line in enumerate(loggen.megatron_bridge_lines(range(1, 51))):
        lines += [line] + [NOISE.rstrip("\n")] * (200 if i % 7 == 0 else 2)
    lines += [loggen.CHECKPOINT_MEGATRON, *loggen.TRACEBACK, loggen.OOM, loggen.NODE_FAILURE]
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("chunk_size", [4096, 65536, 1 << 20])
def test_findings_do_not_depend_on_the_chunk_size(tmp_path, chunk_size):
    log = tmp_path / "log-x.out"
    mixed_log(log)
    reference = scan(str(log), list(BUILTIN_PARSERS), chunk_size=8 << 20)
    report = scan(str(log), list(BUILTIN_PARSERS), chunk_size=chunk_size)
    assert not report.errors
    assert report.findings == reference.findings
    step_times = reference.findings["megatron_bridge"]
    assert len(step_times.samples) == 50
    assert all(sample.tflops_per_gpu is not None for sample in step_times.samples.values())


def test_findings_are_the_same_without_memmem(tmp_path, monkeypatch):
    log = tmp_path / "log-x.out"
    mixed_log(log)
    reference = scan(str(log), list(BUILTIN_PARSERS))
    monkeypatch.setattr(scan_module, "_MEMMEM", None)
    assert scan(str(log), list(BUILTIN_PARSERS)).findings == reference.findings


@linux_only
def test_a_chunk_finds_what_bytes_find():
    text = (NOISE * 100 + "Traceback (most recent call last):\n" + NOISE * 100 + "end").encode()
    chunk = as_chunk(text)
    assert type(chunk) is Chunk and chunk == text
    needles = [
        b"",
        b"end",
        b"Traceback (most recent call last):",
        b"traceback",
        b"\n",
        b"useful \n",
        b"x" * 5000,
        text,
        text + b"!",
        text[:-1],
        text[1:],
        10,
        0,
        bytearray(b"end"),
        memoryview(b"useful"),
    ]
    for needle in needles:
        assert (needle in chunk) == (needle in text), needle
    # find from any start: the near bytes are CPython's search, the rest memmem's, and a match that
    # straddles where one ends and the other begins is found by either
    at = text.find(b"Traceback")
    starts = {0, 1, len(text) - 1, len(text), len(text) + 5, -3}
    starts |= {at + d for d in range(-NEAR - 40, -NEAR + 40)} | {at + d for d in range(-3, 4)}
    for needle in (n for n in needles if type(n) is bytes):
        for start in starts:
            assert chunk.find(needle, start) == text.find(needle, start), (needle[:20], start)
    assert as_chunk(b"short") == b"short" and type(as_chunk(b"short")) is bytes
    assert type(chunk[:10]) is bytes and type(chunk.split(b"\n")[0]) is bytes


def test_a_step_time_line_chunks_before_its_iteration_keeps_its_tflops(tmp_path):
    step, iteration = loggen.megatron_bridge_lines([35], tflops={35: 777.0})
    log = tmp_path / "log-x.out"
    log.write_text(step + "\n" + NOISE * 2000 + iteration + "\n")  # ~330 kB between them
    report = scan(str(log), list(BUILTIN_PARSERS), chunk_size=65536)
    assert report.findings["megatron_bridge"].samples[35].tflops_per_gpu == 777.0


def tree(root: Path) -> Path:
    experiments = root / "experiments"
    loggen.write_experiments_tree(str(experiments), 6_000_000, small_runs=10)
    bad = experiments / "pretrain_broken" / "pretrain_broken_1763719999" / "pretrain_broken"
    bad.mkdir(parents=True)
    (bad / "log-pretrain_broken.out").write_bytes(b"\x00\xff" * 1000)
    if hasattr(os, "mkfifo"):
        os.mkfifo(bad.parent / "log-pretrain_fifo.out")  # unreadable: a result all the same
    return experiments


def collected(root: Path, db: Path, monkeypatch, jobs: str, samples: bool = True) -> list:
    monkeypatch.setenv(collect.JOBS_VARIABLE, jobs)
    with ResultStore(str(db)) as store:
        return [
            (c.location, json.dumps(c.result.to_dict()), c.run_id, c.cached)  # JSON: NaN == NaN
            for c in Collector(collect_host(), store).collect([str(root)], samples=samples)
        ]


_HOST = []


def collect_host():
    if not _HOST:
        from llmb.plugins.host import PluginHost

        _HOST.append(PluginHost())
    return _HOST[0]


ISOLATED = "LLMB_TEST_IN_FRESH_PROCESS"


def in_fresh_process(test) -> bool:
    """Run ``test`` again alone in a fresh pytest process and check it passed there (True: the caller
    returns); False inside that process. Workers are forked only while no other thread runs, and a
    suite's earlier tests may leave one (a server, a poller): here the workers must really start."""
    import subprocess
    import threading

    if os.environ.get(ISOLATED) == "1":
        assert threading.active_count() == 1, "a fresh process has one thread"
        return False
    node = f"{Path(__file__).resolve()}::{test.__name__}"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node],
        capture_output=True,
        text=True,
        env={**os.environ, ISOLATED: "1"},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return True


def parsed_serially_then_pooled(tmp_path, monkeypatch) -> tuple[Path, list, list]:
    """A tree, what one process collects of it, and (filled by the next collections, which always use
    a pool) what each collection's pool parsed."""
    root = tree(tmp_path)
    serial = collected(root, tmp_path / "serial.sqlite", monkeypatch, "1")
    monkeypatch.setattr(collect, "PARALLEL_MIN_BYTES", 0)
    return root, serial, pools_run(monkeypatch)


def pools_run(monkeypatch) -> list:
    """What each collection's worker pool parsed ({index: result}; None: no pool ran), in order."""
    pools = []
    real = collect.Collector._parse_in_parallel

    def spy(self, todo, **kw):
        parsed = real(self, todo, **kw)
        # a copy: the collector pops what it takes
        pools.append(None if parsed is None else dict(parsed))
        return parsed

    monkeypatch.setattr(collect.Collector, "_parse_in_parallel", spy)
    return pools


@linux_only
def test_workers_give_the_results_and_run_ids_of_one_process(tmp_path, monkeypatch):
    if in_fresh_process(test_workers_give_the_results_and_run_ids_of_one_process):
        return
    root, serial, pools = parsed_serially_then_pooled(tmp_path, monkeypatch)
    parallel = collected(root, tmp_path / "parallel.sqlite", monkeypatch, "2")
    assert pools[0] is not None and len(pools[0]) > 10  # the workers parsed them
    assert parallel == serial
    # a listing's workers send their results without iterations, and store them whole
    slim = collected(root, tmp_path / "slim.sqlite", monkeypatch, "2", samples=False)
    assert slim == [
        (
            where,
            json.dumps({**json.loads(r), "samples": {**json.loads(r)["samples"], "rows": []}}),
            i,
            c,
        )
        for where, r, i, c in serial
    ]
    with ResultStore(str(tmp_path / "slim.sqlite")) as store:
        assert [json.dumps(s.result.to_dict()) for s in store.query()] == [
            r for _, r, i, _ in serial if i is not None
        ]
    statuses = {json.loads(r)["status"] for _, r, _, _ in serial}
    assert {"success", "incomplete", "invalid_grad_norm", "failed", "unreadable"} <= statuses


_PARSE_IN_WORKER = collect._parse_in_worker


def _dying_worker(location, *args):
    if "4200003" in (location.log or ""):
        os._exit(3)  # the worker process dies: the pool breaks
    if "4200005" in (location.log or ""):
        raise RuntimeError("this worker cannot parse it")
    return _PARSE_IN_WORKER(location, *args)


@linux_only
def test_a_failing_worker_costs_no_result(tmp_path, monkeypatch):
    if in_fresh_process(test_a_failing_worker_costs_no_result):
        return
    root, serial, pools = parsed_serially_then_pooled(tmp_path, monkeypatch)
    monkeypatch.setattr(collect, "_parse_in_worker", _dying_worker)
    assert collected(root, tmp_path / "parallel.sqlite", monkeypatch, "2") == serial
    # the pool ran (and lost the runs its dead and failing workers held)
    assert pools[0] is not None


def test_jobs_variable(monkeypatch):
    monkeypatch.setenv(collect.JOBS_VARIABLE, "many")
    if sys.platform.startswith("linux"):
        with pytest.raises(UsageError, match="LLMB_RESULTS_JOBS"):
            collect.parallel_jobs()
    monkeypatch.setenv(collect.JOBS_VARIABLE, "1")
    assert collect.parallel_jobs() == 1


def _stored_as(result) -> dict:
    """What to_dict must give: asdict, the samples as columns of the Sample fields."""
    data = asdict(result)
    names = [f.name for f in fields(Sample)]
    data["samples"] = {
        "columns": names,
        "rows": [tuple(s[n] for n in names) for s in data["samples"]],
    }
    return data


def test_to_dict_is_asdict_with_samples_as_columns_and_from_dict_reads_it_back(tmp_path):
    root = tree(tmp_path)
    results = [c.result for c in Collector(collect_host()).collect([str(root)])]
    assert results and all(plain(r) == asdict(r) and r.to_dict() == _stored_as(r) for r in results)
    assert any(r.samples for r in results) and any(r.nccl for r in results)
    # compared as stored (a NaN loss is never equal to itself)
    stored = [json.dumps(r.to_dict()) for r in results]
    back = [RunResult.from_dict(json.loads(text)) for text in stored]
    assert [json.dumps(r.to_dict()) for r in back] == stored
    slim = [RunResult.from_dict(json.loads(text), samples=False) for text in stored]
    assert [json.dumps(r.to_dict()) for r in slim] == [
        json.dumps(replace(r, samples=()).to_dict()) for r in results
    ]
    # a listing's decoding cuts the samples off before decoding them
    assert [json.dumps(json.loads(without_samples(t))) for t in stored] == [
        json.dumps({k: v for k, v in json.loads(t).items() if k != "samples"}) for t in stored
    ]
    # a store an older llmb wrote: samples as a list of dicts
    older = [
        {**json.loads(text), "samples": asdict(r)["samples"]}
        for text, r in zip(stored, results, strict=True)
    ]
    assert [json.dumps(RunResult.from_dict(d).to_dict()) for d in older] == stored


def test_a_listing_collects_no_samples_and_stores_them_all(tmp_path):
    root = tree(tmp_path)
    store = ResultStore(str(tmp_path / "results.sqlite"))
    listed = [
        c.result for c in Collector(collect_host(), store).collect([str(root)], samples=False)
    ]
    assert listed and not any(r.samples for r in listed)
    whole = [c.result for c in Collector(collect_host()).collect([str(root)])]
    assert any(r.samples for r in whole)

    def as_stored(results):  # compared as stored: a NaN loss is never equal to itself
        return [json.dumps(r.to_dict()) for r in results]

    assert as_stored(replace(r, samples=()) for r in whole) == as_stored(listed)
    # what was stored keeps its iterations
    assert as_stored(s.result for s in store.query()) == as_stored(
        r for r in whole if r.status != "unreadable"
    )
