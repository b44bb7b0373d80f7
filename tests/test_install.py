"""``llmb install`` as a user runs it: the real CLI in a subprocess, a real
HTTP server speaking Hugging Face's wire format, and a fake ``enroot`` on
PATH (enroot cannot run here) that records its arguments and writes the
image file it is asked for."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

TOKEN = "hf_test_token_5f3a9c"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
# What the server holds: repository -> file -> content. Gated repositories need the token.
TOKENIZER = {
    "tokenizer.json": b'{"version": "1.0"}',
    "tokenizer_config.json": b'{"bos_token": "<|begin_of_text|>"}',
    "special_tokens_map.json": b"{}",
}
REPOS = {
    "meta-llama/Meta-Llama-3-8B": {"config.json": b'{"hidden_size": 4096}', **TOKENIZER},
    "meta-llama/Meta-Llama-3-70B": {"config.json": b'{"hidden_size": 8192}', **TOKENIZER},
    "meta-llama/Meta-Llama-3.1-405B": {"config.json": b'{"hidden_size": 16384}'},
    "meta-llama/Llama-3.1-405B": {"config.json": b'{"hidden_size": 16384}', **TOKENIZER},
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": {
        "config.json": b'{"model_type": "llama4"}',
        "tokenizer.json": b'{"version": "1.0"}' * 1000,  # served from "the CDN": another host
        "tokenizer_config.json": b'{"tokenizer_class": "PreTrainedTokenizerFast"}',
        # no special_tokens_map.json: optional, answered 404
    },
}


class HubHandler(BaseHTTPRequestHandler):
    seen: list[dict] = []  # every request: path, Host header, Authorization header

    def log_message(self, *args):  # quiet
        pass

    def _send(self, code: int, body: bytes = b"", headers: dict | None = None) -> None:
        self.send_response(code)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802 - http.server's name
        auth = self.headers.get("Authorization")
        HubHandler.seen.append({"path": self.path, "host": self.headers.get("Host"), "auth": auth})
        if self.path.startswith("/cdn/"):
            repo, _, name = self.path[len("/cdn/") :].rpartition("/")
            self._send(200, REPOS[repo][name])
            return
        repo, sep, rest = self.path.lstrip("/").partition("/resolve/main/")
        if not sep or repo not in REPOS:
            self._send(404, b"Repository not found")
            return
        if auth != f"Bearer {TOKEN}":
            self._send(401, b"gated")
            return
        if rest not in REPOS[repo]:
            self._send(404, b"Entry not found", {"X-Repo-Commit": COMMIT})
            return
        if rest == "tokenizer.json":  # large files redirect to a CDN on another host
            port = self.server.server_address[1]
            self._send(
                302,
                headers={
                    "Location": f"http://localhost:{port}/cdn/{repo}/{rest}",
                    "X-Repo-Commit": COMMIT,
                },
            )
            return
        self._send(200, REPOS[repo][rest], {"X-Repo-Commit": COMMIT})


@pytest.fixture
def hub():
    HubHandler.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), HubHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


FAKE_ENROOT = """#!{python}
# Test double for enroot: records argv, writes the -o file (or fails for FAKE_ENROOT_FAIL).
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_ENROOT_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
output = args[args.index("-o") + 1]
fail = os.environ.get("FAKE_ENROOT_FAIL")
if fail and fail in args[-1]:
    open(output, "w").write("half an image")
    sys.stderr.write("[ERROR] fake enroot: unauthorized\\n")
    sys.exit(3)
print("[INFO] Fetching image manifest list", flush=True)
open(output, "w").write("squashfs of " + args[-1])
"""


@pytest.fixture
def enroot(tmp_path):
    """A bin directory holding only the fake enroot, and the file its calls are logged to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "enroot"
    script.write_text(FAKE_ENROOT.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bin_dir, tmp_path / "enroot.log"


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def every_file(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def run_env(
    install: Path, enroot=None, hub: str | None = None, token: str | None = TOKEN, **extra
) -> dict:
    env = {
        "LLMB_INSTALL": str(install),
        "PATH": str(enroot[0]) if enroot else str(install.parent / "empty-path"),
        "HF_TOKEN": token or "",
        **extra,
    }
    if enroot:
        env["FAKE_ENROOT_LOG"] = str(enroot[1])
    if hub:
        env["HF_ENDPOINT"] = hub
    return env


def test_install_imports_images_fetches_files_and_keeps_the_token_secret(
    llmb_proc, tmp_path, enroot, hub
):
    install = tmp_path / "install"
    result = llmb_proc(
        "install",
        "llama31",
        "llama4",
        "--gpu",
        "gb200",
        "--json",
        env=run_env(install, enroot, hub),
    )
    assert result.code == 0, result.err
    report = result.json()
    assert report["workloads"] == ["llama31", "llama4"] and report["failed"] == 0

    # The images: the seeds' enroot import, one per container, to images/<sqsh_name>.
    images = install / "images"
    assert calls(enroot[1]) == [
        [
            "import",
            "-o",
            str(images / "nvidia+nemo+25.11.01.sqsh"),
            "docker://nvcr.io#nvidia/nemo:25.11.01",
        ],
        [
            "import",
            "-o",
            str(images / "nvidia+nemo+25.04.01.sqsh"),
            "docker://nvcr.io#nvidia/nemo:25.04.01",
        ],
    ]
    assert (
        images / "nvidia+nemo+25.11.01.sqsh"
    ).read_text() == "squashfs of docker://nvcr.io#nvidia/nemo:25.11.01"
    assert "Fetching image manifest list" in result.err  # enroot's progress reaches the user
    assert (install / "workloads" / "llama4" / "experiments").is_dir()

    # The Hugging Face files, in the hub cache layout the frameworks read offline.
    hub_dir = install / ".cache" / "huggingface" / "hub"
    # GB200 runs the Megatron-Bridge recipes: configs only for Llama 3.1
    for repo, files in REPOS.items():
        if repo == "meta-llama/Llama-3.1-405B":
            assert not (hub_dir / "models--meta-llama--Llama-3.1-405B").exists()
            continue
        if repo.startswith("meta-llama/Meta-Llama-3"):
            files = {"config.json": files["config.json"]}
        base = hub_dir / ("models--" + repo.replace("/", "--"))
        assert (base / "refs" / "main").read_text() == COMMIT
        for name, content in files.items():
            assert (base / "snapshots" / COMMIT / name).read_bytes() == content
    maverick = (
        hub_dir / "models--meta-llama--Llama-4-Maverick-17B-128E-Instruct" / "snapshots" / COMMIT
    )
    assert not (maverick / "special_tokens_map.json").exists()
    assert any(
        s["what"].endswith("special_tokens_map.json") and s["status"] == "absent"
        for s in report["steps"]
    )

    # The token went as a header to the hub, never to the CDN host, and nowhere else.
    to_hub = [s for s in HubHandler.seen if s["path"].startswith("/meta-llama/")]
    assert to_hub and all(s["auth"] == f"Bearer {TOKEN}" for s in to_hub)
    to_cdn = [s for s in HubHandler.seen if s["path"].startswith("/cdn/")]
    assert to_cdn and all(s["auth"] is None for s in to_cdn)
    assert TOKEN not in result.out + result.err
    for path in every_file(tmp_path):
        assert TOKEN.encode() not in path.read_bytes(), path

    # A second run finds everything there (or known absent) and does nothing.
    requests = len(HubHandler.seen)
    again = llmb_proc(
        "install",
        "llama31",
        "llama4",
        "--gpu",
        "gb200",
        "--json",
        env=run_env(install, enroot, hub),
    )
    assert again.code == 0 and {s["status"] for s in again.json()["steps"]} == {"present", "absent"}
    assert len(calls(enroot[1])) == 2 and len(HubHandler.seen) == requests


def test_missing_prerequisites_are_listed_together_before_anything_is_done(llmb_proc, tmp_path):
    install = tmp_path / "install"
    result = llmb_proc("install", "llama4", env=run_env(install, token=None))
    assert result.code == 2 and result.out == ""
    assert "nothing was done" in result.err and "Traceback" not in result.err
    assert "enroot is not on PATH" in result.err and "nvcr.io#nvidia/nemo:25.04.01" in result.err
    assert (
        "HF_TOKEN is not set" in result.err
        and "meta-llama/Llama-4-Maverick-17B-128E-Instruct" in result.err
    )
    assert not install.exists()
    # Nemotron-H needs no token: only enroot is missing.
    alone = llmb_proc("install", "nemotronh", env=run_env(install, token=None))
    assert alone.code == 2 and "enroot" in alone.err and "HF_TOKEN" not in alone.err


def test_dry_run_prints_every_step_and_masks_the_token(llmb_proc, tmp_path, hub):
    install = tmp_path / "install"
    result = llmb_proc(
        "install", "llama31", "--gpu", "b200", "--dry-run", env=run_env(install, hub=hub)
    )
    assert result.code == 0, result.err
    assert (
        "enroot import -o "
        + str(install / "images" / "nvidia+nemo+25.11.01.sqsh")
        + " docker://nvcr.io#nvidia/nemo:25.11.01"
        in result.out
    )
    for repo in (
        "meta-llama/Meta-Llama-3-8B",
        "meta-llama/Meta-Llama-3-70B",
        "meta-llama/Meta-Llama-3.1-405B",
    ):
        assert (
            f"GET {hub}/{repo}/resolve/main/config.json (Authorization: Bearer ***)" in result.out
        )
    assert "mkdir -p " + str(install / "workloads" / "llama31" / "experiments") in result.out
    assert "enroot is not on PATH" in result.err  # a warning only: nothing runs
    assert TOKEN not in result.out + result.err
    assert not install.exists() and HubHandler.seen == []


def test_a_failed_step_is_reported_and_the_rest_is_kept(llmb_proc, tmp_path, enroot, hub):
    install = tmp_path / "install"
    env = run_env(install, enroot, hub, FAKE_ENROOT_FAIL="nemo:25.11.01")
    result = llmb_proc("install", "llama31", env=env)
    assert result.code == 1
    assert "enroot import of nvcr.io#nvidia/nemo:25.11.01 exited with code 3" in result.out
    assert "fake enroot: unauthorized" in result.err
    # no half image taken as done later
    assert not (install / "images" / "nvidia+nemo+25.11.01.sqsh").exists()
    assert (install / "images" / "nvidia+nemo+25.02.01.sqsh").exists()  # the NeMo 2 variant's image
    config = (
        install
        / ".cache/huggingface/hub/models--meta-llama--Meta-Llama-3-8B/snapshots"
        / COMMIT
        / "config.json"
    )
    assert config.exists()
    retry = llmb_proc("install", "llama31", "--json", env={**env, "FAKE_ENROOT_FAIL": ""})
    assert retry.code == 0
    done = [s for s in retry.json()["steps"] if s["status"] == "done"]
    assert [s["what"] for s in done] == ["nvcr.io#nvidia/nemo:25.11.01"]


def test_a_refused_repository_fails_with_a_reason(llmb_proc, tmp_path, enroot, hub):
    install = tmp_path / "install"
    result = llmb_proc(
        "install",
        "llama4",
        "--no-images",
        "--json",
        env=run_env(install, enroot, hub, token="hf_wrong"),
    )
    assert result.code == 1
    failed = [s for s in result.json()["steps"] if s["status"] == "failed"]
    assert failed and all(
        "Hugging Face refused meta-llama/Llama-4-Maverick-17B-128E-Instruct (HTTP 401)"
        in s["error"]
        for s in failed
    )
    assert "hf_wrong" not in result.out + result.err
    assert calls(enroot[1]) == []  # --no-images


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["install", "llama4", "--gpu", "b200"],
            "llama4 has no recipes for b200; its GPU types: gb200, h100",
        ),
        (["install", "llama4", "--gpu", "tpu"], "unknown GPU type 'tpu'"),
        (["install", "nosuch"], "unknown workload 'nosuch'"),
        (
            ["install", "nemotronh", "--variant", "megatron-bridge"],
            "nemotronh has no variant 'megatron-bridge'",
        ),
    ],
)
def test_bad_requests_exit_2(llmb_proc, tmp_path, args, needle):
    result = llmb_proc(*args, env=run_env(tmp_path / "install"))
    assert result.code == 2 and needle in result.err and "Traceback" not in result.err


def test_gpu_type_comes_from_the_seed_variable(llmb_proc, tmp_path, enroot):
    result = llmb_proc(
        "install", "--dry-run", "--json", env=run_env(tmp_path / "install", enroot, GPU_TYPE="b200")
    )
    report = result.json()
    # the repository's plugins with a B200 recipe, then any other installed one with its own (./dev.sh
    # installs the example Qwen3 plugin: nemo:26.06.01); plugins/gptoss and plugins/deepseekv3 (its
    # deepseekv3 and kimik2), where installed, have B200 recipes too
    optional = {"qwen3", "gptoss", "deepseekv3", "kimik2"}
    assert report["gpu"] == "b200"
    assert [w for w in report["workloads"] if w not in optional] == ["llama31", "nemotron4"]
    images = [s["what"] for s in report["steps"] if s["kind"] == "image"]
    # Nemotron-4's recipe runs nemo:25.07.01 on B200 (nemo:25.09.00 on H100 and GB300)
    assert {"nvcr.io#nvidia/nemo:25.11.01", "nvcr.io#nvidia/nemo:25.07.01"} <= set(images)
    assert "nvcr.io#nvidia/nemo:25.09.00" not in images


def test_install_help_imports_no_framework(llmb_proc, tmp_path):
    for name in ("torch", "megatron", "nemo"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(
            "import os, sys\nsys.stderr.write('TRIPWIRE')\nos._exit(97)\n"
        )
    for args in (["install", "--help"], ["install", "--dry-run"]):
        result = llmb_proc(
            *args,
            env={
                "PYTHONPATH": str(tmp_path),
                "LLMB_INSTALL": str(tmp_path / "i"),
                "PATH": os.environ.get("PATH", ""),
            },
        )
        assert result.code == 0 and "TRIPWIRE" not in result.err, result.err


def test_the_worker_library_lets_a_bare_python_find_every_plugin(llmb_proc, tmp_path):
    """What a container job imports: llmb and its plugins from <install>/python, nothing else."""
    install = tmp_path / "install"
    result = llmb_proc("install", "--no-images", "--no-huggingface", "--json", env=run_env(install))
    assert result.code == 0, result.err
    (library,) = [s for s in result.json()["steps"] if s["kind"] == "library"]
    assert library["status"] == "done" and library["target"] == str(install / "python")
    probe = (
        "from llmb.plugins.host import PluginHost; h = PluginHost(); "
        "print(sorted(h.workloads()), sorted(h.backends()), h.workload('llama31').architecture('8b').hidden)"
    )
    # -S: no site-packages, so only the library (and the standard library) can be imported.
    shown = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(install / "python"), "LLMB_NO_CACHE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert shown.returncode == 0, shown.stderr
    # (the example plugin examples/llmb-plugin-qwen3, where installed, is copied like any other, as are
    # plugins/gptoss and plugins/deepseekv3's workloads)
    line = shown.stdout.split("\n")[0]
    for name in ("deepseekv3", "gptoss", "kimik2"):
        line = line.replace(f"'{name}', ", "")
    assert line.replace("'nemotronh', 'qwen3'", "'nemotronh'") == (
        "['llama31', 'llama4', 'nemotron4', 'nemotronh'] ['kubernetes', 'local', 'runai', 'slurm'] 4096"
    )
    again = llmb_proc("install", "--no-images", "--no-huggingface", "--json", env=run_env(install))
    assert [s["status"] for s in again.json()["steps"] if s["kind"] == "library"] == ["present"]


def test_the_hugging_face_token_never_follows_a_change_of_scheme():
    """Same host and port, http instead of https: another origin, so the token is dropped."""
    import email.message
    import io
    import urllib.request

    from llmb.install.hf import _KeepTokenOnOrigin

    request = urllib.request.Request(
        "https://hub.example:8443/org/m/resolve/main/config.json",
        headers={"Authorization": "Bearer hf_secret"},
    )
    headers = email.message.Message()
    headers["X-Repo-Commit"] = "a" * 40
    for target, keeps in (
        ("http://hub.example:8443/cdn/config.json", False),
        ("https://cdn.example/config.json", False),
        ("https://hub.example:8443/other/config.json", True),
    ):
        handler = _KeepTokenOnOrigin()
        new = handler.redirect_request(request, io.BytesIO(), 302, "Found", headers, target)
        assert new.has_header("Authorization") is keeps, target
        assert handler.commit == "a" * 40


def test_install_writes_the_cluster_file_template_once_and_keeps_an_edited_file(
    llmb_proc, tmp_path
):
    from llmb.install.cluster_config import TEMPLATE

    install = tmp_path / "install"
    cluster = install / "cluster.yaml"
    planned = llmb_proc(
        "install", "--no-images", "--no-huggingface", "--dry-run", "--json", env=run_env(install)
    )
    (step,) = [s for s in planned.json()["steps"] if s["kind"] == "config"]
    assert (step["status"], step["target"]) == ("planned", str(cluster)) and not cluster.exists()
    assert "an existing file is kept" in step["action"]

    first = llmb_proc("install", "--no-images", "--no-huggingface", env=run_env(install))
    assert first.code == 0, first.err
    assert (
        f"done     config       cluster file -> {cluster}" in first.out
        and f"edit {cluster}" in first.out
    )
    assert cluster.read_text() == Path(TEMPLATE).read_text()
    shown = llmb_proc("config", "show", "--json", env=run_env(install))
    assert shown.json()["exists"] is True  # the template as written sets nothing and is valid
    assert {s["source"] for s in shown.json()["settings"]} == {"default"}

    cluster.write_text("account: edited\n")
    again = llmb_proc("install", "--no-images", "--no-huggingface", "--json", env=run_env(install))
    assert again.code == 0
    assert [s["status"] for s in again.json()["steps"] if s["kind"] == "config"] == ["present"]
    assert cluster.read_text() == "account: edited\n"
    account = next(
        s
        for s in llmb_proc("config", "show", "--json", env=run_env(install)).json()["settings"]
        if s["name"] == "account"
    )
    assert (account["value"], account["source"]) == ("edited", "file")


# ------------------------------------------------------------------ hostile servers (issue 21, item 6)


class HostileHub(BaseHTTPRequestHandler):
    """``/trickle/...``: headers, then a byte every 0.2 s; ``/huge/...``: declares 2 GiB;
    ``/endless/...``: no length, bytes until the client stops reading."""

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802 - http.server's name
        mode = self.path.split("/")[1]
        self.send_response(200)
        self.send_header("X-Repo-Commit", COMMIT)
        if mode == "huge":
            self.send_header("Content-Length", str(2 << 30))
        self.end_headers()
        try:
            if mode == "trickle":
                for _ in range(600):
                    self.wfile.write(b"{")
                    self.wfile.flush()
                    time.sleep(0.2)
            elif mode in ("endless", "huge"):
                block = b"x" * (1 << 16)
                for _ in range(1 << 15):  # 2 GiB at most
                    self.wfile.write(block)
        except OSError:
            pass  # the client gave up: that is the point


@pytest.fixture
def hostile():
    server = ThreadingHTTPServer(("127.0.0.1", 0), HostileHub)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _download(monkeypatch, endpoint: str, home: Path, **limits):
    from llmb.install import hf

    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    return hf.download("org/model", "tokenizer.json", str(home), None, **limits)


def test_a_server_that_answers_a_byte_at_a_time_is_cut_off_at_the_deadline(
    monkeypatch, tmp_path, hostile
):
    from llmb.install.hf import DownloadError

    started = time.monotonic()
    with pytest.raises(
        DownloadError, match=r"no complete answer from http://127\.0\.0\.1:\d+/trickle within 2 s"
    ):
        _download(monkeypatch, f"{hostile}/trickle", tmp_path, deadline_s=2)
    # a hang guard, not a speed claim: the server trickles for 120 s, so an exchange that ended
    # before it was cut off by llmb's 2 s deadline (the message above says so)
    assert time.monotonic() - started < 120
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # no partial file left behind


@pytest.mark.parametrize("mode", ["huge", "endless"])
def test_an_answer_past_the_size_cap_is_refused_and_nothing_is_kept(
    monkeypatch, tmp_path, hostile, mode
):
    from llmb.install.hf import DownloadError

    with pytest.raises(
        DownloadError, match=r"larger than 1 MiB, and a config or tokenizer file is a few MB"
    ):
        _download(monkeypatch, f"{hostile}/{mode}", tmp_path, max_bytes=1 << 20)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_install_refuses_gigabyte_answers_for_every_file_and_says_so(llmb_proc, tmp_path, hostile):
    """The attack as a user meets it: every config and tokenizer file answered with 2 GiB (declared)."""
    install = tmp_path / "install"
    result = llmb_proc(
        "install",
        "llama31",
        "--gpu",
        "h100",
        "--no-images",
        "--json",
        env=run_env(install, hub=f"{hostile}/huge"),
        timeout=300,
    )
    steps = [s for s in result.json()["steps"] if s["kind"] == "huggingface"]
    assert (
        result.code != 0 and steps and all(s["status"] == "failed" for s in steps if s["required"])
    )
    assert all("larger than 64 MiB" in s["error"] for s in steps if s["status"] == "failed")
    assert sum(p.stat().st_size for p in every_file(install)) < 10 << 20


def test_a_password_in_the_mirrors_url_is_never_shown(llmb_proc, tmp_path):
    install = tmp_path / "install"
    endpoint = "http://mirror-user:pw-5150-secret@127.0.0.1:9"  # port 9: nothing listens
    for args in (("--dry-run",), ()):
        result = llmb_proc(
            "install",
            "llama31",
            "--gpu",
            "h100",
            "--no-images",
            "--json",
            *args,
            env=run_env(install, hub=endpoint),
            timeout=300,
        )
        assert (
            "pw-5150-secret" not in result.out + result.err
            and "mirror-user:***@127.0.0.1:9" in result.out
        )
    assert not any(b"pw-5150-secret" in p.read_bytes() for p in every_file(install))


def test_a_step_already_done_names_its_folder_once(llmb_proc, tmp_path):
    """A folder that is there is its own target: the dry run names it once, not ``X -> X`` (issue 43)."""
    env = {"LLMB_INSTALL": str(tmp_path)}
    made = llmb_proc("install", "llama31", "--no-images", "--no-huggingface", env=env)
    assert made.code == 0, made.err
    again = llmb_proc("install", "llama31", "--no-images", "--no-huggingface", "--dry-run", env=env)
    folder = str(tmp_path / "workloads" / "llama31" / "experiments")
    present = [
        line.split() for line in again.out.splitlines() if line.split()[:2] == ["present", "folder"]
    ]
    assert ["present", "folder", folder] in present, again.out
    assert all("->" not in words for words in present), again.out
