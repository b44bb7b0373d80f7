"""The results database: SQLite in the install directory.

One row per run, keyed by its log (or, without a log, its run directory),
with the columns people filter and sort on and the whole ``RunResult`` as
JSON. The log's size and modification time are stored too, so an unchanged
log is never parsed twice.

The schema version is SQLite's ``user_version``; ``MIGRATIONS[i]`` takes a
database from version ``i`` to ``i + 1`` inside one ``BEGIN IMMEDIATE``
transaction, so two processes opening an old database migrate it once.
The journal is WAL and every write waits for the lock (``busy_timeout``),
so concurrent writers - runs finishing at the same moment - lose nothing.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone

from llmb.results.records import RunResult

BUSY_TIMEOUT_MS = 60_000

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


def default_path() -> str:
    from llmb.paths import install_dir

    return os.path.join(install_dir(), "results.sqlite")


class ResultStore:
    def __init__(self, path: str | None = None):
        self.path = path or default_path()
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        self.db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        self._migrate()

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def version(self) -> int:
        return self.db.execute("PRAGMA user_version").fetchone()[0]

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

    # ---------------------------------------------------------------- writing

    def save(self, key: str, result: RunResult, log_size: int | None = None, log_mtime_ns: int | None = None) -> int:
        """Insert or replace the run stored under ``key``; returns its id."""
        c = result.context
        stats = result.stats
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        row = (
            key, log_size, log_mtime_ns, now, c.experiment, c.workload, c.variant, c.size, c.gpu, c.dtype,
            c.gpus, result.status, stats.time_mean_ms if stats else None,
            stats.tflops_mean if stats else None, json.dumps(result.to_dict()),
        )
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
        )  # autocommit: one statement, one transaction (no RETURNING: SQLite < 3.35 lacks it)
        return self.db.execute("SELECT id FROM runs WHERE key = ?", (key,)).fetchone()[0]

    # ---------------------------------------------------------------- reading

    def cached(self, key: str, log_size: int | None, log_mtime_ns: int | None) -> StoredRun | None:
        """The stored run for ``key`` if its log has not changed since."""
        row = self.db.execute(
            "SELECT id, recorded_at, result, log_size, log_mtime_ns FROM runs WHERE key = ?", (key,)
        ).fetchone()
        if row is None or (row[3], row[4]) != (log_size, log_mtime_ns):
            return None
        return StoredRun(row[0], row[1], RunResult.from_dict(json.loads(row[2])))

    def get(self, run_id: int) -> StoredRun | None:
        row = self.db.execute("SELECT id, recorded_at, result FROM runs WHERE id = ?", (run_id,)).fetchone()
        return None if row is None else StoredRun(row[0], row[1], RunResult.from_dict(json.loads(row[2])))

    def query(
        self, workload: str | None = None, gpu: str | None = None, dtype: str | None = None,
        since: str | None = None,
    ) -> list[StoredRun]:
        clauses, values = [], []
        for column, value in (("workload", workload), ("gpu", gpu), ("dtype", dtype)):
            if value is not None:
                clauses.append(f"{column} = ?")
                values.append(value.lower())
        if since is not None:
            clauses.append("recorded_at >= ?")
            values.append(since)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self.db.execute(f"SELECT id, recorded_at, result FROM runs {where} ORDER BY id", values).fetchall()
        return [StoredRun(r[0], r[1], RunResult.from_dict(json.loads(r[2]))) for r in rows]

    def count(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]


def open_or_none(path: str | None = None) -> ResultStore | None:
    """The store, or None (with a warning) when it cannot be opened: storing a
    result must never cost the result itself."""
    try:
        return ResultStore(path)
    except Exception as exc:  # noqa: BLE001
        from llmb.log import get_logger

        get_logger("llmb.results").warning("results database unavailable; results are not stored",
                                           path=path or default_path(), error=str(exc))
        return None
