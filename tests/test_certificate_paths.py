"""A certificate path that OpenSSL must not be handed fails the command at once (issue 41, item 8).

OpenSSL opens ``SSL_CERT_FILE`` when llmb makes its first ``https`` connection, before any of
llmb's deadlines runs: a FIFO there held ``llmb install`` for ever. Every certificate path of the
environment (``SSL_CERT_FILE``, ``SSL_CERT_DIR`` and the hashed files in it, ``REQUESTS_CA_BUNDLE``,
``CURL_CA_BUNDLE``) now follows llmb's rule for files others put there (``llmb.files``: a regular
file of bounded size) before OpenSSL sees it; another one is a user error in one line (exit 2) that
says what the path is and what is valid, before anything is done or sent.

Each attack is performed for real: a FIFO made with ``mkfifo``, ``/dev/zero``, a sparse file of
17 MiB, through the installed ``llmb`` (``llmb install`` against an ``https`` endpoint on 127.0.0.1,
``llmb run --backend runai`` against an ``https`` Run:ai), each with a hang guard; the endpoint
counts the connections it is offered (none may come)."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from test_runai_backend import NEMOTRON4, runai_env

HANG_GUARD_S = 60  # the subprocess is killed past this: the command hung
FAST_S = 20  # generous on a loaded 2-core machine; the commands take about two seconds


class SilentEndpoint:
    """A TCP server on 127.0.0.1 that accepts connections and never says a byte (a TLS handshake
    with it never ends); ``connections`` counts what it was offered."""

    def __init__(self):
        self.connections = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._held: list[socket.socket] = []
        self.url = f"https://127.0.0.1:{self._sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            self._held.append(conn)

    def close(self) -> None:
        self._sock.close()
        for conn in self._held:
            conn.close()


@pytest.fixture
def endpoint():
    server = SilentEndpoint()
    yield server
    server.close()


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as out:
        out.truncate(size)
    return path


def _hashed_dir(directory: Path, make) -> Path:
    """A certificate directory as ``openssl rehash`` lays it out, whose one hashed entry is ``make``'s."""
    directory.mkdir()
    (directory / "README").write_text("not a certificate: OpenSSL never opens this name\n")
    make(directory / "5ad8a5d6.0")
    return directory


# (id, variable, how to make what it names under tmp_path, what the message says it is)
BAD_PATHS = [
    ("file-fifo", "SSL_CERT_FILE", lambda d: _fifo(d / "ca.pem"), "is a FIFO (named pipe)"),
    ("file-device", "SSL_CERT_FILE", lambda d: Path("/dev/zero"), "is a character device"),
    ("file-directory", "SSL_CERT_FILE", lambda d: d, "is a directory"),
    ("file-huge", "SSL_CERT_FILE", lambda d: _sparse(d / "ca.pem", 17 << 20), "far more than"),
    ("requests-fifo", "REQUESTS_CA_BUNDLE", lambda d: _fifo(d / "ca.pem"), "is a FIFO"),
    ("curl-fifo", "CURL_CA_BUNDLE", lambda d: _fifo(d / "ca.pem"), "is a FIFO"),
    (
        "dir-fifo",
        "SSL_CERT_DIR",
        lambda d: _fifo(d / "certs"),
        "is a FIFO (named pipe), not a directory",
    ),
    (
        "dir-entry-fifo",
        "SSL_CERT_DIR",
        lambda d: _hashed_dir(d / "certs", _fifo),
        "whose certificate file 5ad8a5d6.0 is a FIFO (named pipe)",
    ),
]
VALID = {
    "SSL_CERT_FILE": "it must name a PEM file of certificate authorities, a regular file of at most 16 MiB",
    "REQUESTS_CA_BUNDLE": "a regular file of at most 16 MiB",
    "CURL_CA_BUNDLE": "a regular file of at most 16 MiB",
    "SSL_CERT_DIR": "it must name directories of certificate files named by their hash",
}


def _timed(llmb_proc, *args, env):
    """(result, seconds) of the real ``llmb``; a hang past HANG_GUARD_S fails the test."""
    start = time.monotonic()
    try:
        result = llmb_proc(*args, env=env, timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"llmb {args[0]} hung past {HANG_GUARD_S} s on a bad certificate path")
    return result, time.monotonic() - start


def _assert_refused(result, seconds, variable, path, what, endpoint):
    lines = [line for line in result.err.splitlines() if line.startswith("llmb: error:")]
    assert result.code == 2, result.err[-3000:]
    assert seconds < FAST_S, f"took {seconds:.1f} s"
    assert len(lines) == 1, result.err[-3000:]
    [line] = lines
    assert line.startswith(f"llmb: error: {variable}={path}") and what in line, line
    assert VALID[variable] in line and "openssl-env manual page" in line, line
    assert "Traceback" not in result.err
    assert endpoint.connections == 0  # refused before anything was sent


@pytest.mark.parametrize(
    ("variable", "make", "what"),
    [case[1:] for case in BAD_PATHS],
    ids=[case[0] for case in BAD_PATHS],
)
def test_llmb_install_refuses_a_bad_certificate_path_at_once(
    llmb_proc, tmp_path, endpoint, variable, make, what
):
    path = make(tmp_path)
    install = tmp_path / "install"
    env = {
        "LLMB_INSTALL": str(install),
        "HF_TOKEN": "hf_x",
        "HF_ENDPOINT": endpoint.url,
        "LLMB_HF_FILE_TIMEOUT": "5",  # the code before this change: a download that times out
        variable: str(path),
    }
    args = ("install", "llama31", "--gpu", "h100", "--no-images")
    result, seconds = _timed(llmb_proc, *args, env=env)
    _assert_refused(result, seconds, variable, path, what, endpoint)
    # nothing was done: no step ran (the first is a folder, the third the cluster file)
    assert "[1/" not in result.err and not (install / "cluster.yaml").exists()


def test_run_ai_refuses_a_fifo_as_ssl_cert_file_before_connecting(llmb_proc, tmp_path, endpoint):
    fifo = _fifo(tmp_path / "ca.pem")
    env = {
        **runai_env(endpoint.url + "/api/v1", tmp_path),
        "RUNAI_ALLOW_HTTP": "0",
        "RUNAI_REQUEST_TIMEOUT": "5",
        "SSL_CERT_FILE": str(fifo),
    }
    result, seconds = _timed(llmb_proc, "run", *NEMOTRON4, "--detach", "--json", env=env)
    _assert_refused(result, seconds, "SSL_CERT_FILE", fifo, "is a FIFO (named pipe)", endpoint)
    assert "app-secret" not in result.out + result.err


def test_certificate_paths_that_are_regular_files_or_missing_pass(tmp_path):
    from llmb import http_safety

    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    certs = _hashed_dir(tmp_path / "certs", lambda p: p.write_text("-----BEGIN CERTIFICATE-----\n"))
    (certs / "0123abcd.0").symlink_to(tmp_path / "gone.pem")  # dangling: OpenSSL skips it
    env = {
        "SSL_CERT_FILE": str(bundle),
        "REQUESTS_CA_BUNDLE": str(tmp_path / "missing.pem"),  # OpenSSL skips a missing path
        "CURL_CA_BUNDLE": "",
        "SSL_CERT_DIR": f"{certs}:{tmp_path / 'no-such-dir'}",
    }
    assert http_safety.certificate_path_problems(env) == []
    http_safety.check_certificate_paths(env)
