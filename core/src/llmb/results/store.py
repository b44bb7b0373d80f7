"""The results database: SQLite in the install directory.

One row per run, keyed by its log (or, without a log, its run directory),
with the columns people filter and sort on and the whole ``RunResult`` as
JSON. The log's size and modification time are stored too, so an unchanged
log is never parsed twice.

The schema version is SQLite's ``user_version``; ``MIGRATIONS[i]`` takes a
database from version ``i`` to ``i + 1`` inside one ``BEGIN IMMEDIATE``
transaction, so two processes opening an old database migrate it once.
The journal is WAL and every write waits for the lock (``busy_timeout``),
so concurrent writers - runs finishing at the same moment - lose nothing;
``LLMB_DB_TIMEOUT`` (seconds, default 60) sets how long.

Every failure of the database (damaged, read-only, locked past the
timeout, written by a newer llmb) is a ``StoreError`` whose message names
the file and the cause: callers carry on without the store, since a result
can always be computed again from its log. A database whose schema is newer
than this llmb knows is refused before anything is written to it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone

from llmb.errors import LlmbError
from llmb.results.records import ANALYSIS, RunResult

BUSY_TIMEOUT_S = 60.0
TIMEOUT_VARIABLE = "LLMB_DB_TIMEOUT"

MIGRATIONS: tuple[str, ...] = (
    # 0 -> 1
    """
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        log_size INTEGER,
        log_mtime_ns INTEGER,
        recorded_at TEXT NOT NULL,
        experiment TEXT NOT NULL,
        workload TEXT,
        variant TEXT,
        size TEXT,
        gpu TEXT,
        dtype TEXT,
        gpus INTEGER,
        status TEXT NOT NULL,
        time_mean_ms REAL,
        tflops_per_gpu_mean REAL,
        result TEXT NOT NULL
    );
    CREATE INDEX runs_by_selection ON runs (workload, gpu, dtype);
    CREATE INDEX runs_by_time ON runs (recorded_at);
    """,
)


@dataclass(frozen=True)
class StoredRun:
    id: int
    recorded_at: str
    result: RunResult
    # its log, or without one its run directory: where it was found (``experiments.stored_location``)
    key: str | None = None


class StoreError(LlmbError):
    """The results database cannot be used; the message names the file and the cause."""


def default_path() -> str:
    from llmb.paths import install_dir

    return os.path.join(install_dir(), "results.sqlite")


def lock_timeout_s() -> float:
    """How long to wait for another process's lock: ``$LLMB_DB_TIMEOUT`` seconds, default 60."""
    text = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not text:
        return BUSY_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        from llmb.errors import UsageError

        raise UsageError(
            f"{TIMEOUT_VARIABLE}={text!r} is not a number of seconds to wait for the results "
            f"database's lock: give one such as 60 (0: do not wait), or unset it."
        )
    return value


def _hint(exc: sqlite3.Error, timeout_s: float) -> str:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return (
            f"{text}: another process held it for more than {timeout_s:g} s "
            f"({TIMEOUT_VARIABLE} sets how long to wait)"
        )
    if "malformed" in text or "not a database" in text or "corrupt" in text:
        return f"{text}: the file is damaged; move it aside, and llmb results rebuilds it from the logs"
    if "readonly" in text or "read-only" in text:
        return f"{text}: the file or its directory cannot be written"
    return text


BATCH_ROWS = 500  # rows a transaction of ``ResultStore.batch`` holds at most


class ResultStore:
    def __init__(self, path: str | None = None):
        self.path = path or default_path()
        self.timeout_s = lock_timeout_s()
        self._batched: int | None = None  # rows saved in the open transaction of a batch
        with self._guard("cannot be opened"):
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            self.db = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
        try:
            with self._guard("cannot be opened"):
                self.db.execute(f"PRAGMA busy_timeout = {int(self.timeout_s * 1000)}")
                self._refuse_newer()  # before anything below writes to the file
                self.db.execute("PRAGMA journal_mode = WAL")
                self.db.execute("PRAGMA synchronous = NORMAL")
                self._migrate()
        except BaseException:
            self.db.close()
            raise

    @contextlib.contextmanager
    def _guard(self, doing: str):
        """sqlite3's and the file system's errors as a StoreError naming the file."""
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(
                f"the results database {self.path} {doing}: {_hint(exc, self.timeout_s)}"
            ) from exc
        except OSError as exc:
            raise StoreError(
                f"the results database {self.path} {doing}: {exc.strerror or exc}"
            ) from exc

    def close(self) -> None:
        if self._batched is not None and self.db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self.db.execute("COMMIT")  # what a batch saved stays saved
        self._batched = None
        self.db.close()

    @contextlib.contextmanager
    def batch(self):
        """Saves inside it are written ``BATCH_ROWS`` to a transaction (a transaction a row costs as
        much as the row: a first scan of 10,000 runs spent a second and a half on them); whatever
        ends it, what was saved is committed on leaving. Other writers wait for one batch at most."""
        self._batched = 0
        try:
            yield self
        finally:
            if self._batched is not None:
                self._batched = None
                if self.db.in_transaction:
                    with self._guard("cannot be written"):
                        self.db.execute("COMMIT")

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def version(self) -> int:
        return self.db.execute("PRAGMA user_version").fetchone()[0]

    def _refuse_newer(self) -> None:
        version, supported = self.version, len(MIGRATIONS)
        if version > supported:
            raise StoreError(
                f"the results database {self.path} has schema version {version}, from a newer llmb; this llmb "
                f"supports version {supported} and has not changed the file: use the newer llmb, or give another "
                f"database with --db (llmb results fills a new one from the logs)"
            )

    def _migrate(self) -> None:
        if self.version >= len(MIGRATIONS):
            return
        self.db.execute("BEGIN IMMEDIATE")
        try:
            version = self.version  # re-read under the lock: another process may have migrated
            for step in range(version, len(MIGRATIONS)):
                for statement in filter(str.strip, MIGRATIONS[step].split(";")):
                    self.db.execute(statement)
                self.db.execute(f"PRAGMA user_version = {step + 1}")
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def _result(self, row_id: int, text: str, samples: bool = True) -> RunResult:
        try:
            return RunResult.from_dict(
                json.loads(without_samples(text) if not samples else text), samples=samples
            )
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise StoreError(
                f"the results database {self.path}: run {row_id} is damaged ({type(exc).__name__}: "
                f"{exc}); llmb results --rescan stores it again from its log"
            ) from None

    # ---------------------------------------------------------------- writing

    def save(
        self,
        key: str,
        result: RunResult,
        log_size: int | None = None,
        log_mtime_ns: int | None = None,
        encoded: str | None = None,
    ) -> int:
        """Insert or replace the run stored under ``key``; returns its id.
        ``encoded``: ``encode(result)``, when the caller made it already."""
        c = result.context
        stats = result.stats
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        with self._guard("cannot be written"):
            return self._save(
                key,
                (
                    key,
                    log_size,
                    log_mtime_ns,
                    now,
                    c.experiment,
                    c.workload,
                    c.variant,
                    c.size,
                    c.gpu,
                    c.dtype,
                    c.gpus,
                    result.status,
                    stats.time_mean_ms if stats else None,
                    stats.tflops_mean if stats else None,
                    encoded or encode(result),
                ),
            )

    def _save(self, key: str, row: tuple) -> int:
        if self._batched is not None and not self.db.in_transaction:
            self.db.execute("BEGIN IMMEDIATE")
        self.db.execute(
            """
            INSERT INTO runs (key, log_size, log_mtime_ns, recorded_at, experiment, workload, variant, size,
                              gpu, dtype, gpus, status, time_mean_ms, tflops_per_gpu_mean, result)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(key) DO UPDATE SET
                log_size = excluded.log_size, log_mtime_ns = excluded.log_mtime_ns,
                recorded_at = excluded.recorded_at, experiment = excluded.experiment,
                workload = excluded.workload, variant = excluded.variant, size = excluded.size,
                gpu = excluded.gpu, dtype = excluded.dtype, gpus = excluded.gpus, status = excluded.status,
                time_mean_ms = excluded.time_mean_ms, tflops_per_gpu_mean = excluded.tflops_per_gpu_mean,
                result = excluded.result
            """,
            row,
        )  # autocommit outside a batch: one statement, one transaction
        # (no RETURNING: SQLite < 3.35 lacks it)
        run_id = self.db.execute("SELECT id FROM runs WHERE key = ?", (key,)).fetchone()[0]
        if self._batched is not None:
            self._batched += 1
            if self._batched >= BATCH_ROWS:
                self.db.execute("COMMIT")
                self._batched = 0
        return run_id

    # ---------------------------------------------------------------- reading

    def cached(
        self, key: str, log_size: int | None, log_mtime_ns: int | None, samples: bool = True
    ) -> StoredRun | None:
        """The stored run for ``key`` if its log has not changed since (without its iterations where
        not ``samples``)."""
        with self._guard("cannot be read"):
            row = self.db.execute(
                "SELECT id, recorded_at, result, log_size, log_mtime_ns FROM runs WHERE key = ?",
                (key,),
            ).fetchone()
        if row is None or (row[3], row[4]) != (log_size, log_mtime_ns):
            return None
        result = self._result(row[0], row[2], samples)
        if result.analysis != ANALYSIS:
            return None  # computed by another llmb's analysis: compute it again
        return StoredRun(row[0], row[1], result)

    def get(self, run_id: int) -> StoredRun | None:
        with self._guard("cannot be read"):
            row = self.db.execute(
                "SELECT id, recorded_at, result, key FROM runs WHERE id = ?", (run_id,)
            ).fetchone()
        return (
            None if row is None else StoredRun(row[0], row[1], self._result(row[0], row[2]), row[3])
        )

    def query(
        self,
        workload: str | None = None,
        gpu: str | None = None,
        dtype: str | None = None,
        since: str | None = None,
        samples: bool = True,
    ) -> list[StoredRun]:
        """The stored runs these filters take, in the order stored (without their iterations where not
        ``samples``)."""
        clauses, values = [], []
        for column, value in (("workload", workload), ("gpu", gpu), ("dtype", dtype)):
            if value is not None:
                clauses.append(f"{column} = ?")
                values.append(value.lower())
        if since is not None:
            clauses.append("recorded_at >= ?")
            values.append(since)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._guard("cannot be read"):
            # decoded row by row: the text of every stored result is never held at once
            return [
                StoredRun(r[0], r[1], self._result(r[0], r[2], samples), r[3])
                for r in self.db.execute(
                    f"SELECT id, recorded_at, result, key FROM runs {where} ORDER BY id", values
                )
            ]

    def count(self) -> int:
        with self._guard("cannot be read"):
            return self.db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]


def encode(result: RunResult) -> str:
    """The JSON a run is stored as: its samples, most of it, its last key (``without_samples``)."""
    return json.dumps(result.to_dict())


# Where the samples start in what ``encode`` wrote. Unescaped quotes never occur inside a JSON string, and
# after this key come only numbers, null and the Sample fields' names: the last occurrence is the key.
_SAMPLES_KEY = ', "samples": {"columns": '


def without_samples(text: str) -> str:
    """A stored result's JSON without its samples, cut before they are decoded (most of the decoding of a
    listing of many runs went there); the text as it is where they are not last (an older store's)."""
    cut = text.rfind(_SAMPLES_KEY)
    return text[:cut] + "}" if cut > 0 and text.endswith("]}}") else text


NOT_STORED = "results are computed from the logs and not stored"


def open_or_none(path: str | None = None, warn=None) -> ResultStore | None:
    """The store, or None when it cannot be used: storing a result must never
    cost the result itself. ``warn`` (default: the log) is told why."""
    try:
        return ResultStore(path)
    except StoreError as exc:
        (warn or warn_in_log)(f"{exc}; {NOT_STORED}")
        return None


def warn_in_log(message: str) -> None:
    from llmb.log import warn

    warn(message)
