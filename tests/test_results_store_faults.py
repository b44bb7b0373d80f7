"""A results database that cannot be used never costs the results: they are
computed from the logs, and stderr says which file failed and why. A
database from a newer llmb is refused, and left as it was."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from experiment_dirs import make_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402
from llmb.results.store import MIGRATIONS, ResultStore, StoreError  # noqa: E402
from llmb.runs.experiment import compact_name  # noqa: E402

MB = "pretrain_llama3_8b_fp8_gpus8_tp1_pp1_cp1_vpNone_ep1_etpNone_mbs2_gbs128"
NEMO = "pretrain_llama3.1_8b_fp8_8"
RUNS = {f"{MB}_1000001", f"{NEMO}_1000002"}


@pytest.fixture
def stored(llmb_proc, tmp_path):
    """Experiments with two runs, and a database that holds them; returns (experiments, database)."""
    root = tmp_path / "experiments"
    make_run(root, MB, loggen.megatron_bridge_lines(range(1, 51)), stamp="1000001")
    make_run(root, NEMO, loggen.nemo2_lines(range(0, 50)), stamp="1000002")
    db = tmp_path / "results.sqlite"
    first = llmb_proc("results", str(root), "--db", str(db))
    assert first.code == 0 and not first.err, first.err
    return root, db


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def results_despite_the_store(llmb_proc, root: Path, db: Path, *args: str, env: dict | None = None):
    """``llmb results`` (JSON and table) shows every run, and warns once about the database; returns the warning."""
    result = llmb_proc("results", str(root), "--db", str(db), "--json", *args, env=env, timeout=120)
    assert result.code == 0, result.err
    rows = json.loads(result.out)
    assert {r["filename"] for r in rows} == RUNS and {r["status"] for r in rows} == {"success"}
    assert all(r["time_mean_ms"] for r in rows)
    warnings = [line for line in result.err.splitlines() if line.startswith("llmb: warning: ")]
    assert len(warnings) == 1, result.err
    assert (
        f"the results database {db}" in warnings[0]
        and "results are computed from the logs" in warnings[0]
    )
    table = llmb_proc("results", str(root), "--db", str(db), *args, env=env, timeout=120)
    assert table.code == 0, table.err
    # each run by its experiment's short form; no llmb job ran them, so JOB is "-" (never the number
    # their directories end with)
    rows = table.out.split("\n\n")[0].splitlines()[2:]  # the table, not the notes under it
    shown = sorted(tuple(line.split()[:3]) for line in rows)
    expected = sorted((compact_name(name.rsplit("_", 1)[0]), "-", "success") for name in RUNS)
    assert shown == expected, table.out
    return warnings[0]


def test_a_page_corrupted_database(llmb_proc, stored):
    root, db = stored
    with sqlite3.connect(db) as conn:
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        roots = [
            r[0] for r in conn.execute("SELECT rootpage FROM sqlite_master WHERE rootpage > 0")
        ]
    conn.close()
    # the tables' and indexes' pages; the header and schema (page 1) stay
    with open(db, "r+b") as handle:
        for number in roots:
            handle.seek((number - 1) * page)
            handle.write(b"\xab" * page)
    ResultStore(str(db)).close()  # it still opens
    warning = results_despite_the_store(llmb_proc, root, db)
    assert "database disk image is malformed" in warning and "move it aside" in warning
    # the write fails too
    assert "malformed" in results_despite_the_store(llmb_proc, root, db, "--rescan")
    listed = llmb_proc("results", "--from-db", "--db", str(db))
    assert (
        listed.code == 1
        and f"the results database {db}" in listed.err
        and "malformed" in listed.err
    )
    assert "internal error" not in listed.err


def test_a_file_that_is_not_a_database(llmb_proc, stored):
    root, db = stored
    db.write_bytes(b"this is no SQLite file\n" * 400)
    before = digest(db)
    assert "file is not a database" in results_despite_the_store(llmb_proc, root, db)
    assert digest(db) == before


@pytest.fixture
def read_only(stored):
    """The database made immutable (root ignores file modes), or read-only for anyone else."""
    root, db = stored
    if os.geteuid() == 0:
        made = subprocess.run(["chattr", "+i", str(db)], capture_output=True, text=True)
        if made.returncode != 0:
            pytest.skip(f"cannot make a file immutable here: {made.stderr.strip()}")
        undo = ["chattr", "-i", str(db)]
    else:
        db.chmod(0o444)
        undo = ["chmod", "644", str(db)]
    try:
        yield root, db
    finally:
        subprocess.run(undo, check=True)


def test_an_immutable_or_read_only_database(llmb_proc, read_only):
    root, db = read_only
    before = digest(db)
    new = make_run(root, MB, loggen.megatron_bridge_lines(range(1, 51)), stamp="1000003")
    result = llmb_proc("results", str(root), "--db", str(db), "--json", timeout=120)
    assert result.code == 0, result.err
    rows = {r["filename"]: r["status"] for r in json.loads(result.out)}
    assert rows == dict.fromkeys([*RUNS, new.name], "success")
    assert f"llmb: warning: the results database {db}" in result.err
    assert "readonly database" in result.err or "unable to open" in result.err, result.err
    assert digest(db) == before
    listed = llmb_proc("results", "--from-db", "--json", "--db", str(db))  # reading it still works
    # named as a scan names them: by their run directories
    assert listed.code == 0 and {r["filename"] for r in json.loads(listed.out)} == RUNS


HOLDER = textwrap.dedent("""
    import sqlite3, sys
    db = sqlite3.connect(sys.argv[1], isolation_level=None)
    if sys.argv[2] == "exclusive":
        db.execute("PRAGMA locking_mode = EXCLUSIVE")  # readers are shut out too
    db.execute("BEGIN EXCLUSIVE")
    print("locked", flush=True)
    sys.stdin.read()  # until the test closes stdin
""")


@pytest.mark.parametrize("mode", ["writer", "exclusive"])
def test_a_database_locked_by_another_process(llmb_proc, stored, mode):
    root, db = stored
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        warning = results_despite_the_store(
            llmb_proc, root, db, "--rescan", env={"LLMB_DB_TIMEOUT": "0.5"}
        )
        assert "database is locked: another process held it for more than 0.5 s" in warning
        assert "LLMB_DB_TIMEOUT sets how long to wait" in warning
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


def test_a_bad_lock_timeout_is_a_usage_error(llmb_proc, stored):
    root, db = stored
    result = llmb_proc("results", str(root), "--db", str(db), env={"LLMB_DB_TIMEOUT": "soon"})
    assert result.code == 2
    assert result.err.startswith("llmb: error: LLMB_DB_TIMEOUT='soon' is not a number of seconds")


def test_a_database_from_a_newer_llmb_is_refused_and_left_alone(llmb_proc, stored):
    root, db = stored
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 6}")
    conn.close()
    before = digest(db)
    make_run(root, MB, loggen.megatron_bridge_lines(range(1, 51)), stamp="1000003")
    result = llmb_proc("results", str(root), "--db", str(db), "--json", timeout=120)
    assert result.code == 0, result.err
    assert len(json.loads(result.out)) == 3
    expected = (
        f"the results database {db} has schema version {len(MIGRATIONS) + 6}, from a newer llmb; this llmb "
        f"supports version {len(MIGRATIONS)} and has not changed the file: use the newer llmb, or give "
        f"another database with --db"
    )
    assert expected in result.err
    listed = llmb_proc("results", "--from-db", "--db", str(db))
    assert listed.code == 1 and expected in listed.err
    baseline = llmb_proc("compare", str(root), "--baseline", "1", "--db", str(db))
    assert baseline.code == 1 and expected in baseline.err
    assert digest(db) == before
    with pytest.raises(StoreError, match="has schema version"):
        ResultStore(str(db))
    assert digest(db) == before


def test_a_damaged_row_is_a_store_error_not_a_crash(llmb_proc, stored):
    root, db = stored
    with sqlite3.connect(db) as conn:
        conn.execute('UPDATE runs SET result = \'{"not": "a result"}\'')
    conn.close()
    warning = results_despite_the_store(llmb_proc, root, db)
    assert "is damaged" in warning and "--rescan" in warning
