"""The results database: schema migrations, WAL, caching, concurrent writers."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap

from llmb.results.records import RunContext, RunResult
from llmb.results.store import MIGRATIONS, ResultStore


def result(name: str, status: str = "success", workload: str = "llama31") -> RunResult:
    return RunResult(
        log=f"/x/{name}",
        context=RunContext(experiment=name, source="name", workload=workload),
        status=status,
        reason=None,
        format=None,
        window=(35, 44),
        stats=None,
        max_iteration=None,
        last_iteration=None,
    )


def test_a_new_database_is_at_the_latest_version_in_wal_mode(tmp_path):
    with ResultStore(str(tmp_path / "r.sqlite")) as store:
        assert store.version == len(MIGRATIONS)
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_an_old_database_is_migrated_once(tmp_path, monkeypatch):
    path = str(tmp_path / "r.sqlite")
    with ResultStore(path) as store:
        store.save("/x/a", result("a"))
    added = MIGRATIONS + ("ALTER TABLE runs ADD COLUMN note TEXT;",)
    monkeypatch.setattr("llmb.results.store.MIGRATIONS", added)
    with ResultStore(path) as store:
        assert store.version == len(added)
        assert [r.result.context.experiment for r in store.query()] == ["a"]
        columns = {row[1] for row in store.db.execute("PRAGMA table_info(runs)")}
        assert "note" in columns


def test_save_replaces_by_key_and_round_trips(tmp_path):
    with ResultStore(str(tmp_path / "r.sqlite")) as store:
        first = store.save("/x/a", result("a", "incomplete"), 10, 111)
        again = store.save("/x/a", result("a", "success"), 20, 222)
        assert first == again and store.count() == 1
        assert store.cached("/x/a", 20, 222).result.status == "success"
        assert store.cached("/x/a", 10, 111) is None  # the log changed since
        assert store.get(first).result == result("a", "success")


def test_a_batch_commits_every_batch_rows_and_whatever_ends_it(tmp_path, monkeypatch):
    monkeypatch.setattr("llmb.results.store.BATCH_ROWS", 3)
    path = str(tmp_path / "r.sqlite")

    def seen() -> int:  # what another connection sees: only what was committed
        with sqlite3.connect(path) as other:
            return other.execute("SELECT COUNT(*) FROM runs").fetchone()[0]

    with ResultStore(path) as store:
        try:
            with store.batch():
                ids = [store.save(f"/x/{n}", result(n)) for n in "abcd"]
                assert ids == sorted(set(ids))  # each save answers its own row's id
                assert seen() == 3 and store.db.in_transaction  # three committed, one open
                raise KeyboardInterrupt  # the batch ends the hard way
        except KeyboardInterrupt:
            pass
        assert seen() == 4 and not store.db.in_transaction  # nothing saved was lost
        store.save("/x/e", result("e"))  # outside a batch: a transaction of its own
        assert seen() == 5 and not store.db.in_transaction
        with store.batch():
            store.save("/x/f", result("f"))
            store.close()  # closed inside a batch (the collector closes a failing store)
    assert seen() == 6


def test_filters(tmp_path):
    with ResultStore(str(tmp_path / "r.sqlite")) as store:
        store.save("/x/a", result("a", workload="llama31"))
        store.save("/x/b", result("b", workload="nemotronh"))
        assert [r.result.context.experiment for r in store.query(workload="nemotronh")] == ["b"]
        assert store.query(since="2999-01-01T00:00:00+00:00") == []
        assert len(store.query(since="2000-01-01T00:00:00+00:00")) == 2


WRITER = textwrap.dedent("""
    import sys
    from llmb.results.records import RunContext, RunResult
    from llmb.results.store import ResultStore
    path, tag, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = ResultStore(path)
    for i in range(count):
        name = f"{tag}-{i}"
        store.save("/runs/" + name, RunResult(
            log=name, context=RunContext(experiment=name, source="name"), status="success", reason=None,
            format=None, window=(35, 44), stats=None, max_iteration=None, last_iteration=None))
    print("done", flush=True)
""")


def test_concurrent_writers_lose_nothing(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    count = 150
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, path, tag, str(count)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("one", "two", "three")
    ]
    outcomes = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outcomes
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 3 * count
        assert db.execute("SELECT COUNT(DISTINCT key) FROM runs").fetchone()[0] == 3 * count
