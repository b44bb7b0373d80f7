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

import contextlib
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from llmb.plugins.host import PluginHost
from llmb.results.analyze import analyze, unreadable
from llmb.results.experiments import RunLocation, complete_from_recipes, context_for, find_runs
from llmb.results.records import ASSUMED_GPU_SOURCES, RunContext, RunResult
from llmb.results.scan import SEGMENTED_MIN, scan, why_unreadable
from llmb.results.store import NOT_STORED, ResultStore, StoreError, encode, warn_in_log


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
    return assume_gpu is not None and (stored.gpu, stored.gpu_source) == (
        assume_gpu.lower(),
        gpu_source,
    )


class Collector:
    """Parses runs with the host's workloads and parsers. ``store`` is a
    ResultStore, or a callable that opens one (None: do not store), called
    only once there is a run to look up. ``warn`` is told when the store
    fails (default: the log); the collector then stops using it."""

    def __init__(
        self,
        host: PluginHost,
        store: ResultStore | Callable[[], ResultStore | None] | None = None,
        warn: Callable[[str], None] | None = None,
    ):
        self.host = host
        self._store = store
        self._parsers = None
        self._warn = warn or warn_in_log
        # processes that may read one large log in segments (scan's jobs); None: parallel_jobs()
        self.scan_jobs: int | None = None

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
            self._give_up_store(store, exc)
            return None

    def _give_up_store(self, store: ResultStore, exc: StoreError) -> None:
        """Say once that the store failed, and use it no more."""
        self._warn(f"{exc}; {NOT_STORED}")
        self._store = None
        store.close()

    @contextlib.contextmanager
    def _batch(self):
        """The store's ``batch`` around what is saved inside, its failure said as ``_with_store``
        says one."""
        store = self.store
        if store is None:
            yield
            return
        try:
            with store.batch():
                yield
        except StoreError as exc:
            self._give_up_store(store, exc)

    @property
    def parsers(self) -> list:
        if self._parsers is None:
            self._parsers = self.host.log_parsers()
        return self._parsers

    def result_for(
        self,
        location: RunLocation,
        *,
        window: tuple[int, int] | None = None,
        assume_gpu: str | None = None,
        context: RunContext | None = None,
        gpu_source: str = "--gpu",
    ) -> RunResult:
        """``assume_gpu``: the GPU type to take for a run that records none (``gpu_source`` says who
        said so: ``--gpu`` or the cluster file); what the run recorded always wins."""
        workloads = self.host.workloads()
        context = context or context_for(location, workloads)
        workload = workloads.get(context.workload) if context.workload else None
        if context.gpu is None and assume_gpu:
            context = complete_from_recipes(
                replace(context, gpu=assume_gpu.lower(), gpu_source=gpu_source), workload
            )

        def model_flops(established: RunContext) -> float | None:
            """The workload's formula's FLOPs per sample for the run as analysed (its sequence length
            and layers may be what its log states): recipe.json's own count where it gives one."""
            if established.flops_per_sample is not None:
                return established.flops_per_sample
            if (
                workload is None
                or established.size not in workload.architectures
                or not established.seq_len
            ):
                return None
            arch = workload.architecture(established.size)
            if established.layers:
                arch = arch.with_layers(min(established.layers, arch.layers))
            model = self.host.model_flops(workload, arch, established.seq_len)
            return model.per_sample if model else None

        try:
            report = (
                scan(location.log, self.parsers, jobs=self._scan_jobs()) if location.log else None
            )
        except OSError as exc:
            return unreadable(
                location.log,
                context,
                why_unreadable(location.log, exc),
                workload=workload,
                window=window,
            )
        return analyze(
            report,
            context,
            workload=workload,
            window=window,
            model_flops=model_flops,
            missing_log_reason=f"no log-*.out file in {location.run_dir}",
        )

    def _scan_jobs(self) -> int:
        """How many processes may read one large log (in segments, ``scan``'s
        ``jobs``): ``parallel_jobs()``, but 1 in a worker of the pool (every
        CPU already parses a log) or where ``LLMB_RESULTS_JOBS`` is no number
        (the pool's start reports that)."""
        if self.scan_jobs is None:
            from llmb.errors import UsageError

            try:
                self.scan_jobs = parallel_jobs()
            except UsageError:
                self.scan_jobs = 1
        return self.scan_jobs

    def collect(
        self,
        paths: list[str],
        *,
        window: tuple[int, int] | None = None,
        rescan: bool = False,
        assume_gpu: str | None = None,
        progress: Callable[[int, int, RunLocation], None] | None = None,
        gpu_source: str = "--gpu",
        samples: bool = True,
    ) -> list[Collected]:
        """Every run under ``paths``, stored where its log was parsed. Without ``samples`` the results
        come without their iterations (``RunResult.samples`` empty; what was stored keeps them): a
        listing of thousands of runs then holds only their figures."""
        locations = find_runs(paths)
        stamps = [_stamp(location.log) for location in locations]
        out = [
            self._cached(
                location,
                size,
                mtime,
                window=window,
                rescan=rescan,
                assume_gpu=assume_gpu,
                gpu_source=gpu_source,
                samples=samples,
            )
            for location, (size, mtime) in zip(locations, stamps, strict=True)
        ]
        todo = [
            (index, locations[index], stamps[index][0] or 0)
            for index, hit in enumerate(out)
            if hit is None
        ]
        early = self._parse_dominant(
            todo, window=window, assume_gpu=assume_gpu, gpu_source=gpu_source, progress=progress
        )
        parsed = self._parse_in_parallel(
            [item for item in todo if item[0] not in early],
            window=window,
            assume_gpu=assume_gpu,
            gpu_source=gpu_source,
            progress=progress
            and (lambda done, total, where: progress(done + len(early), total + len(early), where)),
            samples=samples,
        )
        with self._batch():
            self._store_in_order(
                locations,
                stamps,
                out,
                early,
                parsed,
                window=window,
                assume_gpu=assume_gpu,
                gpu_source=gpu_source,
                progress=progress,
                samples=samples,
            )
        return out

    def _store_in_order(
        self,
        locations,
        stamps,
        out,
        early,
        parsed,
        *,
        window,
        assume_gpu,
        gpu_source,
        progress,
        samples,
    ) -> None:
        for index, location in enumerate(locations):
            if parsed is None and progress and index not in early:
                progress(index, len(locations), location)
            if out[index] is not None:
                continue
            # A run no worker parsed (one process, or the pool failed it) is parsed here; results are
            # stored in the order found, by this process only: the run ids one process would give.
            result, encoded = (
                early.pop(index, None)
                or (parsed or {}).pop(index, None)
                or (
                    self.result_for(
                        location, window=window, assume_gpu=assume_gpu, gpu_source=gpu_source
                    ),
                    None,
                )
            )
            out[index] = self._stored(
                location, result, *stamps[index], window=window, encoded=encoded
            )
            if not samples and out[index].result.samples:
                out[index] = replace(out[index], result=replace(out[index].result, samples=()))

    def _parse_dominant(
        self,
        todo: list[tuple[int, RunLocation, int]],
        *,
        window: tuple[int, int] | None,
        assume_gpu: str | None,
        gpu_source: str,
        progress: Callable[[int, int, RunLocation], None] | None,
    ) -> dict[int, tuple[RunResult, None]]:
        """{index: (result, None)} of the logs in ``todo`` (index, location, log
        size) that alone hold a CPU's share of all there is to read (and at
        least ``SEGMENTED_MIN`` bytes), parsed here, first, each by every CPU
        in segments (``scan``'s ``jobs``): in the pool one worker would read
        such a log while the others, done with the rest, waited. Empty with one
        CPU, or one log (``result_for`` reads that one in segments anyway)."""
        jobs = self._scan_jobs()
        if jobs < 2 or len(todo) < 2:
            return {}
        total = sum(size for _, _, size in todo)
        found: dict[int, tuple[RunResult, None]] = {}
        for index, location, size in sorted(todo, key=lambda item: -item[2]):
            if size < SEGMENTED_MIN or size * jobs < total:
                break
            if progress:
                progress(len(found), len(todo), location)
            found[index] = (
                self.result_for(
                    location, window=window, assume_gpu=assume_gpu, gpu_source=gpu_source
                ),
                None,
            )
        return found

    def _parse_in_parallel(
        self,
        todo: list[tuple[int, RunLocation, int]],
        *,
        window: tuple[int, int] | None,
        assume_gpu: str | None,
        gpu_source: str,
        progress: Callable[[int, int, RunLocation], None] | None,
        samples: bool = True,
    ) -> dict[int, tuple[RunResult, str | None]] | None:
        """{index: (result, its JSON for the store)} of the runs in ``todo``
        (index, location, log size) that worker processes parsed, largest
        logs first so that the workers finish together; None when workers
        would not pay (one CPU, one log, little to read, not Linux, threads
        running: forking them is not safe). A run a worker could not parse is
        missing from the answer, for the caller to parse itself: the pool
        never costs a result, nor hides an error that parsing in one process
        would raise. Each worker encodes its results for the store itself
        (``_parse_in_worker``)."""
        jobs = min(parallel_jobs(), len(todo))
        if (
            jobs < 2
            or sum(size for _, _, size in todo) < PARALLEL_MIN_BYTES
            or threading.active_count() > 1
        ):
            return None
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        global _WORKER_COLLECTOR
        # loaded here, once: the forked workers inherit them
        _ = self.parsers, self.host.workloads()
        _WORKER_COLLECTOR = self
        parsed: dict[int, tuple[RunResult, str | None]] = {}
        storing = window is None and self._store is not None
        pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork"))
        try:
            futures = {
                pool.submit(
                    _parse_batch_in_worker,
                    [location for _, location in batch],
                    window,
                    assume_gpu,
                    gpu_source,
                    storing,
                    samples,
                ): batch
                for batch in _batches(sorted(todo, key=lambda item: -item[2]), jobs)
            }
            done = 0
            for future in as_completed(futures):
                # popped: a finished future holds its whole result (iterations and all) while referenced
                batch = futures.pop(future)
                try:
                    answers = future.result()
                except Exception:  # noqa: BLE001 - parsed again in this process, which reports any error
                    answers = [None] * len(batch)
                for (index, location), answer in zip(batch, answers, strict=True):
                    if progress:
                        progress(done, len(todo), location)
                    done += 1
                    if answer is not None:
                        parsed[index] = answer
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            _WORKER_COLLECTOR = None
        return parsed

    def _cached(
        self,
        location: RunLocation,
        size: int | None,
        mtime: int | None,
        *,
        window: tuple[int, int] | None,
        rescan: bool,
        assume_gpu: str | None,
        gpu_source: str,
        samples: bool = True,
    ) -> Collected | None:
        if window is not None or rescan:
            return None
        hit = self._with_store(
            lambda store: store.cached(location.log or location.run_dir, size, mtime, samples)
        )
        if hit is None or not same_assumption(hit.result.context, assume_gpu, gpu_source):
            return None
        return Collected(location, hit.result, hit.id, True)

    def _stored(
        self,
        location: RunLocation,
        result: RunResult,
        size: int | None,
        mtime: int | None,
        *,
        window: tuple[int, int] | None,
        encoded: str | None = None,
    ) -> Collected:
        run_id = None
        if window is None and result.status != "unreadable":
            key = location.log or location.run_dir
            run_id = self._with_store(lambda store: store.save(key, result, size, mtime, encoded))
        return Collected(location, result, run_id, False)

    def collect_one(
        self,
        location: RunLocation,
        *,
        window: tuple[int, int] | None = None,
        rescan: bool = False,
        assume_gpu: str | None = None,
        context: RunContext | None = None,
        gpu_source: str = "--gpu",
    ) -> Collected:
        size, mtime = _stamp(location.log)
        hit = self._cached(
            location,
            size,
            mtime,
            window=window,
            rescan=rescan,
            assume_gpu=assume_gpu,
            gpu_source=gpu_source,
        )
        if hit is not None:
            return hit
        result = self.result_for(
            location, window=window, assume_gpu=assume_gpu, context=context, gpu_source=gpu_source
        )
        return self._stored(location, result, size, mtime, window=window)


# Worker processes parse logs when there is this much to read (and two or more logs and CPUs): below
# it, starting them costs more than they save.
PARALLEL_MIN_BYTES = 32 << 20
MAX_JOBS = 4  # each worker holds a chunk and its parsers' state: memory grows with their number
JOBS_VARIABLE = "LLMB_RESULTS_JOBS"

_WORKER_COLLECTOR: Collector | None = None  # the collector a forked worker parses with


def parallel_jobs() -> int:
    """How many processes may parse logs at once: ``$LLMB_RESULTS_JOBS``, else
    the CPUs this process may use (at most ``MAX_JOBS``); 1 where workers
    cannot be forked (not Linux)."""
    if not sys.platform.startswith("linux"):
        return 1
    text = os.environ.get(JOBS_VARIABLE, "").strip()
    if text:
        try:
            return max(1, int(text))
        except ValueError:
            from llmb.errors import UsageError

            raise UsageError(
                f"{JOBS_VARIABLE}={text!r} is not a number of processes: give one such as 2 "
                f"(1: parse in one process), or unset it."
            ) from None
    return max(1, min(MAX_JOBS, len(os.sched_getaffinity(0))))


def _encoded(result: RunResult) -> str | None:
    try:
        return encode(result)
    except Exception:  # noqa: BLE001 - the store encodes it again, and reports what fails there
        return None


BATCH_RUNS = (
    32  # runs a worker is sent at once, at most: a task each costs the pool's thread the GIL
)
BATCH_BYTES = 8 << 20  # bytes of logs in one batch, at most (one larger log is a batch of its own)


def _batches(
    todo: list[tuple[int, RunLocation, int]], jobs: int
) -> list[list[tuple[int, RunLocation]]]:
    """``todo`` (index, location, log size), in its order, in batches of consecutive runs for the
    workers: at most ``BATCH_RUNS`` runs and ``BATCH_BYTES`` bytes each, and small enough that every
    one of ``jobs`` workers gets eight batches or more (so that they finish together)."""
    most = max(1, min(BATCH_RUNS, len(todo) // (8 * jobs)))
    batches: list[list[tuple[int, RunLocation]]] = []
    batch: list[tuple[int, RunLocation]] = []
    size = 0
    for index, location, log_size in todo:
        if batch and (len(batch) >= most or size + log_size > BATCH_BYTES):
            batches.append(batch)
            batch, size = [], 0
        batch.append((index, location))
        size += log_size
    if batch:
        batches.append(batch)
    return batches


def _parse_batch_in_worker(
    locations: list[RunLocation], *args
) -> list[tuple[RunResult, str | None] | None]:
    """``_parse_in_worker``'s answer for each of ``locations``, in order; None for a run it raised
    on (the caller parses that one itself, and reports the error)."""
    answers: list[tuple[RunResult, str | None] | None] = []
    for location in locations:
        try:
            answers.append(_parse_in_worker(location, *args))
        except Exception:  # noqa: BLE001 - the caller parses it again, and reports what fails
            answers.append(None)
    return answers


def _parse_in_worker(
    location: RunLocation,
    window: tuple[int, int] | None,
    assume_gpu: str | None,
    gpu_source: str,
    storing: bool,
    samples: bool,
) -> tuple[RunResult, str | None]:
    """The run's result and, where it is to be stored, its JSON for the store: encoded here, by every
    worker at once, and sent without its iterations where the caller does not keep them (a failed
    encoding leaves them, for the store to encode the whole result again)."""
    _WORKER_COLLECTOR.scan_jobs = (
        1  # every CPU parses a log already (this copy of it is the worker's)
    )
    result = _WORKER_COLLECTOR.result_for(
        location, window=window, assume_gpu=assume_gpu, gpu_source=gpu_source
    )
    stored = storing and result.status != "unreadable"
    encoded = _encoded(result) if stored else None
    if not samples and (encoded is not None or not stored):
        result = replace(result, samples=())
    return result, encoded
