"""Results of the runs under some directories: find, parse, analyse, store.

The database doubles as a cache: a log whose size and modification time
match its stored row is not read again (``rescan`` forces it). Results with
a non-default window are computed but never stored, so the database always
holds each workload's own window; nor are those of logs that could not be
read (the next look may succeed).

The database is a convenience, never a condition: when it fails (damaged,
read-only, locked, newer), the collector says so once through ``warn`` and
goes on computing every result from its log.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace

from llmb.plugins.host import PluginHost
from llmb.recipes.gpus import catalogue
from llmb.results.analyze import analyze, unreadable
from llmb.results.experiments import RunLocation, complete_from_recipes, context_for, find_runs
from llmb.results.records import ASSUMED_GPU_SOURCES, RunContext, RunResult
from llmb.results.scan import scan, why_unreadable
from llmb.results.store import NOT_STORED, ResultStore, StoreError, warn_in_log


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


def same_assumption(stored: RunContext, assume_gpu: str | None, gpu_source: str) -> bool:
    """Whether a stored result holds for this command: one whose GPU type the run recorded always
    does; one whose GPU type an earlier command assumed (``--gpu``, the cluster file) only for the
    same assumption, and one without a GPU type only where none is assumed now. So nothing an
    earlier command assumed decides a later command's verdict."""
    if stored.gpu is not None and stored.gpu_source not in ASSUMED_GPU_SOURCES:
        return True
    if stored.gpu is None:
        return assume_gpu is None
    return assume_gpu is not None and (stored.gpu, stored.gpu_source) == (assume_gpu.lower(), gpu_source)


class Collector:
    """Parses runs with the host's workloads and parsers. ``store`` is a
    ResultStore, or a callable that opens one (None: do not store), called
    only once there is a run to look up. ``warn`` is told when the store
    fails (default: the log); the collector then stops using it."""

    def __init__(self, host: PluginHost, store: ResultStore | Callable[[], ResultStore | None] | None = None,
                 warn: Callable[[str], None] | None = None):
        self.host = host
        self._store = store
        self._parsers = None
        self._warn = warn or warn_in_log

    @property
    def store(self) -> ResultStore | None:
        if callable(self._store) and not isinstance(self._store, ResultStore):
            self._store = self._store()
        return self._store

    def _with_store(self, use: Callable[[ResultStore], object]):
        """``use(store)``, or None when there is no store or it fails (then
        said once, and the store is not used again)."""
        store = self.store
        if store is None:
            return None
        try:
            return use(store)
        except StoreError as exc:
            self._warn(f"{exc}; {NOT_STORED}")
            self._store = None
            store.close()
            return None

    @property
    def parsers(self) -> list:
        if self._parsers is None:
            self._parsers = self.host.log_parsers()
        return self._parsers

    def result_for(
        self, location: RunLocation, *, window: tuple[int, int] | None = None,
        assume_gpu: str | None = None, context: RunContext | None = None, gpu_source: str = "--gpu",
    ) -> RunResult:
        """``assume_gpu``: the GPU type to take for a run that records none (``gpu_source`` says who
        said so: ``--gpu`` or the cluster file); what the run recorded always wins."""
        workloads = self.host.workloads()
        context = context or context_for(location, workloads)
        workload = workloads.get(context.workload) if context.workload else None
        if context.gpu is None and assume_gpu:
            context = complete_from_recipes(replace(context, gpu=assume_gpu.lower(), gpu_source=gpu_source),
                                            workload)
        flops = context.flops_per_sample
        peaks = None
        if flops is None and workload is not None and context.size in workload.architectures and context.seq_len:
            arch = workload.architecture(context.size)
            if context.layers:
                arch = arch.with_layers(min(context.layers, arch.layers))
            model = self.host.model_flops(workload, arch, context.seq_len)
            flops = model.per_sample if model else None
        if context.gpu in catalogue() and context.device != "cpu":  # no GPU peak for a CPU run
            peaks = catalogue()[context.gpu].peak_tflops
        try:
            report = scan(location.log, self.parsers) if location.log else None
        except OSError as exc:
            return unreadable(location.log, context, why_unreadable(location.log, exc), workload=workload,
                              window=window)
        return analyze(
            report, context, workload=workload, window=window, flops_per_sample=flops, peaks=peaks,
            missing_log_reason=f"no log-*.out file in {location.run_dir}",
        )

    def collect(
        self, paths: list[str], *, window: tuple[int, int] | None = None, rescan: bool = False,
        assume_gpu: str | None = None, progress: Callable[[int, int, RunLocation], None] | None = None,
        gpu_source: str = "--gpu",
    ) -> list[Collected]:
        locations = find_runs(paths)
        out = []
        for index, location in enumerate(locations):
            if progress:
                progress(index, len(locations), location)
            out.append(self.collect_one(location, window=window, rescan=rescan, assume_gpu=assume_gpu,
                                        gpu_source=gpu_source))
        return out

    def collect_one(
        self, location: RunLocation, *, window: tuple[int, int] | None = None, rescan: bool = False,
        assume_gpu: str | None = None, context: RunContext | None = None, gpu_source: str = "--gpu",
    ) -> Collected:
        key = location.log or location.run_dir
        size, mtime = _stamp(location.log)
        if window is None and not rescan:
            hit = self._with_store(lambda store: store.cached(key, size, mtime))
            if hit is not None and same_assumption(hit.result.context, assume_gpu, gpu_source):
                return Collected(location, hit.result, hit.id, True)
        result = self.result_for(location, window=window, assume_gpu=assume_gpu, context=context,
                                 gpu_source=gpu_source)
        run_id = None
        if window is None and result.status != "unreadable":
            run_id = self._with_store(lambda store: store.save(key, result, size, mtime))
        return Collected(location, result, run_id, False)
