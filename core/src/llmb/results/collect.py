"""Results of the runs under some directories: find, parse, analyse, store.

The database doubles as a cache: a log whose size and modification time
match its stored row is not read again (``rescan`` forces it). Results with
a non-default window are computed but never stored, so the database always
holds each workload's own window.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace

from llmb.gpus import catalogue
from llmb.host import PluginHost
from llmb.results.analyze import analyze
from llmb.results.experiments import RunLocation, context_for, find_runs
from llmb.results.records import RunContext, RunResult
from llmb.results.scan import scan
from llmb.results.store import ResultStore


@dataclass(frozen=True)
class Collected:
    location: RunLocation
    result: RunResult
    run_id: int | None
    cached: bool


def _stamp(path: str | None) -> tuple[int | None, int | None]:
    if path is None:
        return None, None
    try:
        stat = os.stat(path)
    except OSError:
        return None, None
    return stat.st_size, stat.st_mtime_ns


class Collector:
    """Parses runs with the host's workloads and parsers. ``store`` is a
    ResultStore, or a callable that opens one (None: do not store), called
    only once there is a run to look up."""

    def __init__(self, host: PluginHost, store: ResultStore | Callable[[], ResultStore | None] | None = None):
        self.host = host
        self._store = store
        self._parsers = None

    @property
    def store(self) -> ResultStore | None:
        if callable(self._store) and not isinstance(self._store, ResultStore):
            self._store = self._store()
        return self._store

    @property
    def parsers(self) -> list:
        if self._parsers is None:
            self._parsers = self.host.log_parsers()
        return self._parsers

    def result_for(
        self, location: RunLocation, *, window: tuple[int, int] | None = None,
        assume_gpu: str | None = None, context: RunContext | None = None,
    ) -> RunResult:
        workloads = self.host.workloads()
        context = context or context_for(location, workloads)
        if context.gpu is None and assume_gpu:
            context = replace(context, gpu=assume_gpu.lower())
        workload = workloads.get(context.workload) if context.workload else None
        flops = context.flops_per_sample
        peak = None
        if flops is None and workload is not None and context.size in workload.architectures and context.seq_len:
            arch = workload.architecture(context.size)
            if context.layers:
                arch = arch.with_layers(min(context.layers, arch.layers))
            model = self.host.model_flops(workload, arch, context.seq_len)
            flops = model.per_sample if model else None
        if context.gpu in catalogue() and context.dtype and context.device != "cpu":  # no GPU peak for a CPU run
            peak = catalogue()[context.gpu].peak(context.dtype)
        report = scan(location.log, self.parsers) if location.log else None
        return analyze(
            report, context, workload=workload, window=window, flops_per_sample=flops, peak_tflops=peak,
            missing_log_reason=f"no log-*.out file in {location.run_dir}",
        )

    def collect(
        self, paths: list[str], *, window: tuple[int, int] | None = None, rescan: bool = False,
        assume_gpu: str | None = None, progress: Callable[[int, int, RunLocation], None] | None = None,
    ) -> list[Collected]:
        locations = find_runs(paths)
        out = []
        for index, location in enumerate(locations):
            if progress:
                progress(index, len(locations), location)
            out.append(self.collect_one(location, window=window, rescan=rescan, assume_gpu=assume_gpu))
        return out

    def collect_one(
        self, location: RunLocation, *, window: tuple[int, int] | None = None, rescan: bool = False,
        assume_gpu: str | None = None, context: RunContext | None = None,
    ) -> Collected:
        key = location.log or location.run_dir
        size, mtime = _stamp(location.log)
        store = self.store
        if store is not None and window is None and not rescan and assume_gpu is None:
            hit = store.cached(key, size, mtime)
            if hit is not None:
                return Collected(location, hit.result, hit.id, True)
        result = self.result_for(location, window=window, assume_gpu=assume_gpu, context=context)
        run_id = None
        if store is not None and window is None:
            run_id = store.save(key, result, size, mtime)
        return Collected(location, result, run_id, False)
