"""``llmb install`` against a Hugging Face endpoint that stalls (issue 32, item 11).

Before, each of an install's 13 files waited out its own deadline (300 s), about an hour
in all. Now the first file that times out stops the install asking that endpoint, in one
line that says which endpoint, after which file, how many files were not fetched and how
to retry; and all the downloads of an install share one overall deadline. The endpoint
is a real server on 127.0.0.1 that accepts connections and then never answers, or
trickles; what is asserted is what it was asked and what the user is told, never a wall
clock (the subprocess timeout only guards against a hang).
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
from test_install import TOKEN, every_file, run_env

COMMIT = "89abcdef0123456789abcdef0123456789abcdef"
HANG_GUARD_S = 240  # a loaded 2-core machine; the runs below take seconds


class StallingMirror:
    """A Hugging Face endpoint on 127.0.0.1 that records each request's path. ``answer``: how many
    requests it answers properly (a small JSON file with X-Repo-Commit) before it stalls;
    ``stall``: ``silent`` (reads the request, never writes) or ``trickle`` (a 200 with a large
    Content-Length, then a byte a second); ``delay_s``: a wait before each proper answer."""

    def __init__(self, stall: str = "silent", answer: int = 0, delay_s: float = 0.0):
        self.stall, self.answer, self.delay_s = stall, answer, delay_s
        self.paths: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            path = head.split(b"\r\n", 1)[0].split(b" ")[1].decode()
            with self._lock:
                self.paths.append(path)
                number = len(self.paths)
            if number <= self.answer:
                self._stop.wait(self.delay_s)
                body = b'{"from": "the mirror"}'
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nX-Repo-Commit: " + COMMIT.encode() + b"\r\n"
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n"
                    b"Connection: close\r\n\r\n" + body
                )
                return
            if self.stall == "trickle":
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nX-Repo-Commit: " + COMMIT.encode() + b"\r\n"
                    b"Content-Length: 1000000\r\n\r\n"
                )
                while not self._stop.wait(1.0):
                    conn.sendall(b"{")
            else:
                self._stop.wait()  # connection accepted, request read, never an answer
        except OSError:
            pass  # the client gave up: that is the point

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        for conn in self._conns:
            conn.close()


@pytest.fixture
def mirror():
    made: list[StallingMirror] = []

    def make(**kwargs) -> StallingMirror:
        made.append(StallingMirror(**kwargs))
        return made[-1]

    yield make
    for server in made:
        server.close()


def _install(llmb_proc, install, endpoint: str, **variables):
    result = llmb_proc(
        "install",
        "llama31",
        "--gpu",
        "h100",
        "--no-images",
        "--json",
        env=run_env(install, hub=endpoint, **variables),
        timeout=HANG_GUARD_S,
    )
    steps = [s for s in result.json()["steps"] if s["kind"] == "huggingface"]
    return result, steps


def _stop_lines(result) -> list[str]:
    return [line for line in result.err.splitlines() if "stopped asking" in line]


@pytest.mark.parametrize("stall", ["silent", "trickle"])
def test_the_first_timed_out_file_stops_the_install_asking_that_endpoint(
    llmb_proc, tmp_path, mirror, stall
):
    server = mirror(stall=stall)
    install = tmp_path / "install"
    result, steps = _install(llmb_proc, install, server.url, LLMB_HF_FILE_TIMEOUT="2")

    # Llama 3.1 on H100: four configs and three tokenizers of three files each
    assert len(steps) == 13
    first = steps[0]
    where = f"{first['repo']}/{first['filename']}"
    # one request, not one per file
    assert server.paths == [f"/{where.rsplit('/', 1)[0]}/resolve/main/{first['filename']}"]
    assert result.code == 1 and result.json()["failed"] == 1
    assert first["status"] == "failed"
    assert [s["status"] for s in steps[1:]] == ["skipped"] * 12
    assert all(s["error"] == f"not asked for: {server.url} timed out on {where}" for s in steps[1:])
    error = first["error"]
    assert f"{where}: " in error and "\n" not in error
    assert (
        f"llmb install stopped asking {server.url} after {where}: "
        f"12 more Hugging Face files not fetched, 0 fetched" in error
    )
    for advice in (
        "rerun llmb install",
        "HF_ENDPOINT",
        "LLMB_HF_FILE_TIMEOUT",
        "LLMB_HF_TIMEOUT",
        "--no-huggingface",
    ):
        assert advice in error, advice
    # said once, on one line, as the install runs
    assert _stop_lines(result) == [f"  failed: {error}"]
    assert TOKEN not in result.out + result.err
    assert not [p for p in every_file(install) if p.name.endswith(".part")]


def test_what_was_fetched_before_the_stall_is_kept_and_a_rerun_fetches_the_rest(
    llmb_proc, tmp_path, mirror
):
    install = tmp_path / "install"
    stalled = mirror(stall="silent", answer=1)
    result, steps = _install(llmb_proc, install, stalled.url, LLMB_HF_FILE_TIMEOUT="2")
    assert len(stalled.paths) == 2 and result.code == 1
    assert [s["status"] for s in steps[:2]] == ["done", "failed"]
    assert {s["status"] for s in steps[2:]} == {"skipped"}
    assert "11 more Hugging Face files not fetched, 1 fetched" in steps[1]["error"]
    kept = steps[0]["target"]
    assert open(kept, "rb").read() == b'{"from": "the mirror"}'

    healthy = mirror(answer=100)
    again, steps = _install(llmb_proc, install, healthy.url, LLMB_HF_FILE_TIMEOUT="2")
    assert again.code == 0, again.err
    assert steps[0]["status"] == "present" and steps[0]["target"] == kept
    assert {s["status"] for s in steps[1:]} == {"done"}
    assert len(healthy.paths) == 12  # the kept file is not asked for again


def test_one_deadline_covers_all_the_downloads_of_an_install(llmb_proc, tmp_path, mirror):
    # Every answer takes a second, well inside the per-file deadline (300 s): only the
    # overall one, 2.5 s, stops the install; each request takes at least a second.
    server = mirror(answer=100, delay_s=1.0)
    install = tmp_path / "install"
    result, steps = _install(llmb_proc, install, server.url, LLMB_HF_TIMEOUT="2.5")
    assert result.code == 1
    assert 1 <= len(server.paths) <= 3
    statuses = [s["status"] for s in steps]
    failed = statuses.index("failed")
    assert statuses[:failed] == ["done"] * failed and set(statuses[failed + 1 :]) == {"skipped"}
    error = steps[failed]["error"]
    assert "the LLMB_HF_TIMEOUT=2.5 s for all Hugging Face downloads ran out" in error
    assert f"{13 - failed - 1} more Hugging Face files not fetched, {failed} fetched" in error
    for step in steps[:failed]:
        assert open(step["target"], "rb").read() == b'{"from": "the mirror"}'


@pytest.mark.parametrize("variable", ["LLMB_HF_TIMEOUT", "LLMB_HF_FILE_TIMEOUT"])
@pytest.mark.parametrize("value", ["soon", "0", "-5", "nan", "1e9"])
def test_a_timeout_that_is_not_a_number_of_seconds_stops_the_install_before_it_starts(
    llmb_proc, tmp_path, mirror, variable, value
):
    server = mirror()
    install = tmp_path / "install"
    result = llmb_proc(
        "install",
        "llama31",
        "--gpu",
        "h100",
        "--no-images",
        env=run_env(install, hub=server.url, **{variable: value}),
        timeout=HANG_GUARD_S,
    )
    assert result.code == 2 and "nothing was done" in result.err
    assert f"{variable}={value!r} is not a number of seconds" in result.err
    assert server.paths == [] and not install.exists()


def test_the_per_file_deadline_is_cut_to_what_is_left_of_the_overall_one(monkeypatch):
    from llmb.install import installer

    monkeypatch.setenv("LLMB_HF_FILE_TIMEOUT", "300")
    monkeypatch.setenv("LLMB_HF_TIMEOUT", "900")
    clocks = installer._Downloads()
    assert clocks.deadline() == 300 and not clocks.ran_out()
    clocks.ends = time.monotonic() + 10
    assert 0 < clocks.deadline() <= 10 and not clocks.ran_out()
    clocks.ends = time.monotonic() - 1
    assert clocks.deadline() < 0 and clocks.ran_out()
