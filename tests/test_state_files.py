"""Counts and state files under attack (issue 21, item 13): a suite file asking for 100,000,000
repeats is refused at once; ``suite.json`` as a FIFO, cut short or of the wrong shape is reported as
corrupt, naming the file and what is wrong, and never waited on; llmb's state reader
(``runs/experiment.load_json_state``, under ``read_json``) reads only regular files, and at most
``MAX_STATE_FILE`` bytes of them. Each attack is performed with real files and real processes: the
commands run as separate ``llmb`` processes whose timeout (60 s, far above the fraction of a second
they take) is the hang guard, never a speed test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from llmb.runs.experiment import MAX_STATE_FILE
from llmb.runs.sweeps import MAX_REPEATS, MAX_TASK_OVERRIDES, MAX_TASKS

HANG_GUARD = 60  # seconds: each command here takes well under one


@pytest.fixture
def install(tmp_path):
    return {"LLMB_INSTALL": str(tmp_path / "install"), "LLMB_NO_CACHE": "1"}


def no_traceback(err: str) -> None:
    assert "Traceback" not in err and "internal error" not in err, err


# ------------------------------------------------------------------ counts


def test_a_suite_file_asking_for_a_hundred_million_repeats_is_refused_at_once(
    llmb_proc, install, tmp_path
):
    suite = tmp_path / "suite.yaml"
    suite.write_text("llama31_8b: {scales: [2], dtypes: [bf16], gpu: h100, repeats: 100000000}\n")
    for command in (
        ("certify", "--file", str(suite), "--proxy", "tiny", "--dry-run"),
        ("certify", "--file", str(suite), "--proxy", "tiny"),
        ("sweep", "--file", str(suite), "--dry-run"),
    ):  # the same file format, the same bound
        result = llmb_proc(*command, env=install, timeout=HANG_GUARD)
        no_traceback(result.err)
        assert result.code == 2, result.err
        assert (
            f"{suite}: llama31_8b: repeats must be a whole number from 1 to {MAX_REPEATS}, not 100000000"
            in result.err
        )
    assert not (Path(install["LLMB_INSTALL"]) / "certify").exists()  # nothing recorded


@pytest.mark.parametrize("repeats", ["0", "-3", "true", "2.5", "'7'", "9" * 5000])
def test_a_suite_files_repeats_must_be_a_whole_number_in_range(
    llmb_proc, install, tmp_path, repeats
):
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"llama31_8b: {{scales: [2], dtypes: [bf16], gpu: h100, repeats: {repeats}}}\n"
    )
    result = llmb_proc(
        "certify",
        "--file",
        str(suite),
        "--proxy",
        "tiny",
        "--dry-run",
        env=install,
        timeout=HANG_GUARD,
    )
    no_traceback(result.err)
    assert result.code == 2
    # 5,000 digits are more than Python turns into an integer: refused as a value the YAML cannot hold
    assert (
        "a value llmb cannot read" if len(repeats) > 100 else f"from 1 to {MAX_REPEATS}"
    ) in result.err


def test_the_command_lines_repeats_are_bounded_alike(llmb_proc, install):
    for command in (
        ("certify", "--gpu", "h100", "--backend", "slurm", "--repeats", "100000000", "--dry-run"),
        (
            "sweep",
            "llama31",
            "--size",
            "8b",
            "--gpu",
            "h100",
            "--gpus",
            "8",
            "--repeats",
            "100000000",
            "--dry-run",
        ),
        ("sweep", "--all-workloads", "--max-gpus", "8", "--repeats", "100000000", "--dry-run"),
    ):
        result = llmb_proc(*command, env=install, timeout=HANG_GUARD)
        no_traceback(result.err)
        assert (
            result.code == 2
            and f"--repeats must be a whole number from 1 to {MAX_REPEATS}, not 100000000"
            in result.err
        ), result.err
    ok = llmb_proc(
        "certify",
        "--gpu",
        "h100",
        "--proxy",
        "tiny",
        "--scale",
        "2",
        "--repeats",
        str(MAX_REPEATS),
        "--dry-run",
        "--json",
        env=install,
        timeout=HANG_GUARD,
    )
    assert ok.code == 0, ok.err
    assert {job["task"].rsplit("#", 1)[1] for job in ok.json()} == {
        str(n) for n in range(1, MAX_REPEATS + 1)
    }


def test_a_suite_of_more_runs_than_a_sweep_may_hold_is_refused_before_it_is_built(
    llmb_proc, install, tmp_path
):
    scales = list(range(1, 201))  # 200 GPU counts x 2 dtypes x 100 repeats = 40,000 runs
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"llama31_8b: {{scales: {scales}, dtypes: [bf16, fp8], gpu: h100, repeats: 100}}\n"
    )
    result = llmb_proc(
        "certify",
        "--file",
        str(suite),
        "--proxy",
        "tiny",
        "--dry-run",
        env=install,
        timeout=HANG_GUARD,
    )
    no_traceback(result.err)
    assert result.code == 2
    assert (
        f"llama31_8b: 40,000 runs (2 dtypes x 200 GPU counts x 100 repeats) are more than the {MAX_TASKS:,} a "
        f"sweep may hold"
    ) in result.err

    # many sections, each small, add up alike
    many = "".join(
        f"llama31_{n}: {{size: 8b, scales: [2], gpu: h100, repeats: 100}}\n" for n in range(150)
    )
    suite.write_text(many)
    result = llmb_proc(
        "certify",
        "--file",
        str(suite),
        "--proxy",
        "tiny",
        "--dry-run",
        env=install,
        timeout=HANG_GUARD,
    )
    no_traceback(result.err)
    assert result.code == 2 and f"more than the {MAX_TASKS:,} a sweep may hold" in result.err, (
        result.err
    )


def test_a_section_with_more_task_overrides_than_it_could_select_is_refused(
    llmb_proc, install, tmp_path
):
    entries = ", ".join("{scale: 2, steps: 3}" for _ in range(MAX_TASK_OVERRIDES + 1))
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"llama31_8b: {{scales: [2], dtypes: [bf16], gpu: h100, tasks: [{entries}]}}\n"
    )
    result = llmb_proc(
        "certify",
        "--file",
        str(suite),
        "--proxy",
        "tiny",
        "--dry-run",
        env=install,
        timeout=HANG_GUARD,
    )
    no_traceback(result.err)
    assert result.code == 2
    assert (
        f"tasks has {MAX_TASK_OVERRIDES + 1} entries, more than the {MAX_TASK_OVERRIDES}"
        in result.err
    )


# ------------------------------------------------------------------ suite.json


def _suite_dir(install, suite_id: str) -> Path:
    return Path(install["LLMB_INSTALL"]) / "certify" / suite_id


def _record(install, monkeypatch, attempts=()) -> Path:
    """A real suite record, written by llmb's own code; its path."""
    from llmb.certify.suite import Attempt, new_suite, save_suite
    from llmb.runs.sweeps import expand

    monkeypatch.setenv("LLMB_INSTALL", install["LLMB_INSTALL"])
    suite = new_suite(
        "h100",
        2,
        True,
        "published",
        expand("llama31", ["8b"], ["bf16"], [2], 1, gpu="h100", options={"proxy": "tiny"}),
        ["a note"],
    )
    suite.attempts = [Attempt(sweep, ["llama31"], "2026-01-01T00:00:00Z") for sweep in attempts]
    save_suite(suite)
    return _suite_dir(install, suite.id) / "suite.json"


def test_a_suite_record_that_is_a_fifo_is_refused_not_waited_on(llmb_proc, install, monkeypatch):
    path = _record(install, monkeypatch)
    suite_id = path.parent.name
    path.unlink()
    os.mkfifo(path)  # nothing ever writes it: reading it would hang the command
    for args in (
        ("status", "--suite", suite_id),
        ("status",),
        ("--rerun", "llama31", "--suite", suite_id),
        ("status", "--suite", suite_id, "--json"),
    ):
        result = llmb_proc("certify", *args, env=install, timeout=HANG_GUARD)
        no_traceback(result.err)
        assert result.code == 1, result.err
        assert (
            f"certification suite '{suite_id}' is corrupt: {path} is a FIFO (named pipe), not a regular file; "
            f"move {path.parent} away to drop it."
        ) in result.err
        assert "no certification suite" not in result.err


def test_a_suite_record_cut_short_is_corrupt_not_unknown(llmb_proc, install, monkeypatch):
    path = _record(install, monkeypatch)
    suite_id = path.parent.name
    intact = llmb_proc(
        "certify", "status", "--suite", suite_id, "--json", env=install, timeout=HANG_GUARD
    )
    # read: no run yet, so no pass
    assert intact.code == 1 and intact.json()["suite"] == suite_id, intact.err
    text = path.read_bytes()
    for cut in (text[: len(text) // 2], text[:1], b"", b"\x00\xff\xfe garbage"):
        path.write_bytes(cut)
        result = llmb_proc(
            "certify", "status", "--suite", suite_id, env=install, timeout=HANG_GUARD
        )
        no_traceback(result.err)
        problem = "is empty" if not cut else "is not valid JSON (corrupt or cut short)"
        assert result.code == 1
        assert f"certification suite '{suite_id}' is corrupt: {path} {problem}" in result.err, (
            result.err
        )
        assert "no certification suite" not in result.err and "known suites" not in result.err


WRONG_SHAPES = {
    "a list": (lambda r: [r], "holds a list, not an object"),
    "no tasks": (
        lambda r: {k: v for k, v in r.items() if k != "tasks"},
        "the record lacks the field 'tasks'",
    ),
    "no id": (
        lambda r: {k: v for k, v in r.items() if k != "id"},
        "the record lacks the field 'id'",
    ),
    "tasks a number": (
        lambda r: {**r, "tasks": 5},
        "the record's field 'tasks' is an integer, not a list",
    ),
    "a task a string": (
        lambda r: {**r, "tasks": ["llama31"]},
        "the record's tasks[1] is a string, not an object",
    ),
    "a task without its workload": (
        lambda r: {**r, "tasks": [{k: v for k, v in r["tasks"][0].items() if k != "workload"}]},
        "the record's tasks[1] lacks the field 'workload'",
    ),
    "GPUs a string": (
        lambda r: {**r, "tasks": [{**r["tasks"][0], "gpus": "two"}]},
        "the record's tasks[1]'s field 'gpus' is a string ('two'), not an integer",
    ),
    "options a list": (
        lambda r: {**r, "tasks": [{**r["tasks"][0], "options": [1]}]},
        "the record's tasks[1]'s field 'options' is a list ([1]), not an object",
    ),
    "scale true": (
        lambda r: {**r, "scale": True},
        "the record's field 'scale' is true or false (True), not an integer or null",
    ),
    "notes of numbers": (
        lambda r: {**r, "notes": [1, 2]},
        "the record's field 'notes' is a list ([1, 2]), not a list of strings",
    ),
    "an attempt without its sweep": (
        lambda r: {**r, "attempts": [{"workloads": [], "started_at": "x"}]},
        "the record's attempts[1] lacks the field 'sweep'",
    ),
    "attempts an object": (
        lambda r: {**r, "attempts": {"sweep": "s"}},
        "the record's field 'attempts' is an object, not a list",
    ),
}


@pytest.mark.parametrize("shape", WRONG_SHAPES)
def test_a_suite_record_of_the_wrong_shape_is_corrupt_not_a_traceback(
    llmb_proc, install, monkeypatch, shape
):
    path = _record(install, monkeypatch)
    suite_id = path.parent.name
    change, problem = WRONG_SHAPES[shape]
    path.write_text(json.dumps(change(json.loads(path.read_text()))))
    result = llmb_proc("certify", "status", "--suite", suite_id, env=install, timeout=HANG_GUARD)
    no_traceback(result.err)
    assert result.code == 1
    assert (
        f"certification suite '{suite_id}' is corrupt: {path} " in result.err
        and problem in result.err
    ), result.err


def test_a_corrupt_sweep_record_of_a_suites_attempt_is_named(
    llmb_proc, install, monkeypatch, tmp_path
):
    path = _record(install, monkeypatch, attempts=["sweep-0a0a0a"])
    sweep = Path(install["LLMB_INSTALL"]) / "sweeps" / "sweep-0a0a0a" / "sweep.json"
    sweep.parent.mkdir(parents=True)
    sweep.write_text(
        '{"id": "sweep-0a0a0a", "created_at": "x", "backend": "local", "tasks": [{"workl'
    )
    result = llmb_proc(
        "certify", "status", "--suite", path.parent.name, env=install, timeout=HANG_GUARD
    )
    no_traceback(result.err)
    assert result.code == 1
    assert (
        f"sweep 'sweep-0a0a0a' is corrupt: {sweep} is not valid JSON (corrupt or cut short)"
        in result.err
    )

    sweep.unlink()
    os.mkfifo(sweep)
    result = llmb_proc(
        "report",
        "--sweep",
        "sweep-0a0a0a",
        "--out",
        str(tmp_path / "report"),
        env=install,
        timeout=HANG_GUARD,
    )
    no_traceback(result.err)
    assert (
        result.code == 1 and f"{sweep} is a FIFO (named pipe), not a regular file" in result.err
    ), result.err

    sweep.unlink()  # gone: the attempt's jobs are unknown, the suite is judged without them
    result = llmb_proc(
        "certify", "status", "--suite", path.parent.name, env=install, timeout=HANG_GUARD
    )
    no_traceback(result.err)
    assert result.code == 1 and "no job was submitted" in result.out, result.out + result.err


def test_a_job_record_that_is_a_fifo_does_not_hang_status(llmb_proc, install):
    record = Path(install["LLMB_INSTALL"]) / "jobs" / "local-0b0b0b" / "job.json"
    record.parent.mkdir(parents=True)
    os.mkfifo(record)
    result = llmb_proc("status", "--json", env=install, timeout=HANG_GUARD)
    no_traceback(result.err)
    [row] = result.json()
    assert row["state"] == "UNKNOWN"
    assert "job.json is a FIFO (named pipe), not a regular file" in row["reason"], row


def test_a_fifo_in_the_yaml_cache_does_not_hang_every_command(llmb_proc, install, tmp_path):
    cache = tmp_path / "cache"
    env = {**install, "LLMB_CACHE_DIR": str(cache)}
    del env["LLMB_NO_CACHE"]
    first = llmb_proc("list", env=env, timeout=HANG_GUARD)
    assert first.code == 0, first.err
    entries = sorted(cache.iterdir())
    assert entries
    for entry in entries:
        entry.unlink()
        os.mkfifo(entry)
    again = llmb_proc("list", env=env, timeout=HANG_GUARD)
    assert again.code == 0 and again.out == first.out, again.err
    assert all(entry.is_file() for entry in entries)  # each entry parsed afresh and written anew


# ------------------------------------------------------------------ the state reader itself

_PROBE = textwrap.dedent("""
    import json, sys
    from llmb.runs.experiment import StateFileError, load_json_state, read_json
    out = {}
    for path in sys.argv[1:]:
        try:
            out[path] = ["ok", load_json_state(path)]
        except StateFileError as exc:
            out[path] = ["error", exc.problem, exc.short]
        out[path].append(read_json(path))
    print(json.dumps(out))
""")


def test_the_state_reader_reads_only_regular_files_bounded_and_tells_missing_from_corrupt(tmp_path):
    cases = {
        "missing.json": (None, None),
        "good.json": ('{"a": 1}', ("ok", {"a": 1})),
        "fifo.json": ("fifo", "is a FIFO (named pipe), not a regular file"),
        "dir.json": ("dir", "is a directory, not a regular file"),
        "zero.json": (
            "link:/dev/zero",
            "is a symbolic link to /dev/zero, which is a character device, not a regular file",
        ),
        "dangling.json": (
            "link:nowhere.json",
            "is a symbolic link to nowhere.json, which does not exist",
        ),
        "huge.json": (
            "huge",
            f"is larger than {MAX_STATE_FILE >> 20} MiB, more than any record llmb writes",
        ),
        "cut.json": ('{"a": [1, 2', "is not valid JSON (corrupt or cut short)"),
        "empty.json": ("", "is empty"),
        "latin1.json": (b'{"a": "\xe9"}', "is not valid JSON (corrupt or cut short)"),
        "list.json": ("[1, 2]", "holds a list, not an object"),
        "deep.json": ("[" * 200_000 + "]" * 200_000, "nests deeper than any record llmb writes"),
    }
    for name, (content, _) in cases.items():
        path = tmp_path / name
        if content is None:
            continue
        if content == "fifo":
            os.mkfifo(path)
        elif content == "dir":
            path.mkdir()
        elif isinstance(content, str) and content.startswith("link:"):
            path.symlink_to(content[5:])
        elif content == "huge":
            with open(path, "wb") as handle:  # sparse: 1 MiB over the bound, no disk used
                handle.truncate(MAX_STATE_FILE + (1 << 20))
        else:
            path.write_bytes(content if isinstance(content, bytes) else content.encode())
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, *(str(tmp_path / n) for n in cases)],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
    )
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)
    for name, (_, expected) in cases.items():
        got = found[str(tmp_path / name)]
        if expected is None:  # missing: no error, nothing read
            assert got == ["ok", None, None], (name, got)
        elif isinstance(expected, tuple):
            assert got == [*expected, expected[1]], (name, got)
        else:
            assert got == ["error", expected, f"{name} {expected}", None], (name, got)
