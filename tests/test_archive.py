"""``llmb archive``: the experiments without profiles, traces, checkpoints and
code, readable again by ``llmb results`` once unpacked; as .tar.gz or as
.tar.zst (listed and unpacked by the real ``tar --zstd``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from experiment_dirs import make_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402

MB = "pretrain_llama3_8b_fp8_gpus8_tp1_pp1_cp1_vpNone_ep1_etpNone_mbs2_gbs128"


def experiments(install: Path) -> Path:
    root = install / "workloads" / "llama31" / "experiments"
    run = make_run(root, MB, loggen.megatron_bridge_lines(range(1, 51)))
    inner = run / MB
    (inner / f"sbatch_{MB}.out").write_text("batch output\n")
    for path, content in {
        inner / "nsys_profile" / "profile_0.nsys-rep": b"nsys",
        inner / "torch_profile" / "rank0_trace.json": b"{}",
        inner / "rank1_trace.json": b"{}",
        inner
        / "code"
        / "nemo_experiments"
        / "default"
        / "checkpoints"
        / "iter_0000050"
        / "__0_0.distcp": b"w",
        run / "checkpoints" / "weights.distcp": b"w",
        run / "old.tar.gz": b"tar",
    }.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return root


def test_the_archive_leaves_out_profiles_traces_checkpoints_and_code(llmb_proc, tmp_path):
    install = tmp_path / "install"
    experiments(install)
    output = tmp_path / "out" / "experiments.tar.gz"
    output.parent.mkdir()  # llmb archive writes into an existing directory only
    result = llmb_proc(
        "archive", "--output", str(output), "--json", env={"LLMB_INSTALL": str(install)}
    )
    assert result.code == 0, result.err
    report = json.loads(result.out)
    with tarfile.open(output) as tar:
        names = sorted(tar.getnames())
    base = f"workloads/llama31/experiments/{MB}/{MB}_1766132151"
    assert names == [f"{base}/{MB}/log-{MB}.out", f"{base}/{MB}/sbatch_{MB}.out"]
    assert (report["files"], report["excluded_files"], report["excluded_dirs"]) == (2, 2, 4)
    assert not list(output.parent.glob(".llmb-archive-*"))  # no temporary left behind

    unpacked = tmp_path / "unpacked"
    with tarfile.open(output) as tar:
        # tarfile's extraction filters exist from Python 3.11.4 (and in security backports) only
        tar.extractall(unpacked, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    rows = json.loads(
        llmb_proc("results", "--format", "json", env={"LLMB_INSTALL": str(unpacked)}).out
    )
    assert [(r["status"], r["max_iteration"]) for r in rows] == [("success", 50)]


def test_named_directories_and_mistakes(llmb_proc, tmp_path):
    root = experiments(tmp_path / "install")
    output = tmp_path / "one.tar.gz"
    assert llmb_proc("archive", str(root), "-o", str(output)).code == 0
    with tarfile.open(output) as tar:
        assert all(name.startswith("experiments/") for name in tar.getnames())
    wrong = llmb_proc("archive", str(root), "-o", str(tmp_path / "x.zip"))
    assert wrong.code == 2 and "name it *.tar.gz" in wrong.err
    empty = llmb_proc("archive", env={"LLMB_INSTALL": str(tmp_path / "nothing")})
    assert empty.code == 2 and "there are no experiments under" in empty.err
    missing = llmb_proc("archive", str(tmp_path / "nosuch"))
    assert missing.code == 2 and "no such directory" in missing.err


def _tar_zstd(*args: str) -> subprocess.CompletedProcess:
    if shutil.which("zstd") is None:
        if os.environ.get("CI"):
            pytest.fail(
                "CI must check .tar.zst archives, but zstd is not installed (./dev.sh test installs it)"
            )
        pytest.skip("tar --zstd needs the zstd program (apt-get install zstd)")
    done = subprocess.run(["tar", "--zstd", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def test_a_zstd_archive_keeps_logs_recipes_and_provenance_and_leaves_out_profiles(
    llmb_proc, tmp_path
):
    install = tmp_path / "install"
    root = experiments(install)
    run = root / MB / f"{MB}_1766132151"
    for path, content in {
        run / "provenance.json": b'{"llmb": "0.1.0"}',
        run / MB / "rank0.pt.trace.json": b"{}",  # the production frameworks' torch profiler
        run / MB / "pytorch_profile" / "trace.json": b"{}",
    }.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    output = tmp_path / "experiments.tar.zst"
    result = llmb_proc(
        "archive", "--output", str(output), "--json", env={"LLMB_INSTALL": str(install)}
    )
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert report["format"] == "zst"  # from the name
    assert output.read_bytes()[:4] == b"\x28\xb5\x2f\xfd"  # a Zstandard frame, not gzip renamed
    base = f"workloads/llama31/experiments/{MB}/{MB}_1766132151"
    listed = sorted(_tar_zstd("-tf", str(output)).stdout.split())
    assert listed == [
        f"{base}/{MB}/log-{MB}.out",
        f"{base}/{MB}/sbatch_{MB}.out",
        f"{base}/provenance.json",
    ]
    assert (report["files"], report["excluded_files"], report["excluded_dirs"]) == (3, 3, 5)

    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    _tar_zstd("-xf", str(output), "-C", str(unpacked))
    rows = json.loads(
        llmb_proc("results", "--format", "json", env={"LLMB_INSTALL": str(unpacked)}).out
    )
    assert [(r["status"], r["max_iteration"]) for r in rows] == [("success", 50)]


def test_format_and_name_mistakes(llmb_proc, tmp_path):
    root = experiments(tmp_path / "install")
    gz = tmp_path / "by-flag.tar.gz"
    result = llmb_proc("archive", str(root), "--format", "zst", "-o", str(gz))
    assert result.code == 2 and "names a .tar.gz archive but --format is zst" in result.err
    assert not gz.exists()
    zst = tmp_path / "by-flag.tzst"
    assert llmb_proc("archive", str(root), "--format", "zst", "-o", str(zst)).code == 0
    assert zst.read_bytes()[:4] == b"\x28\xb5\x2f\xfd"
    both = llmb_proc("archive", str(root), "--suite", "last")
    assert both.code == 2 and "give DIRS or --suite ID, not both" in both.err
    none = llmb_proc(
        "archive", "--suite", "cert-000000", env={"LLMB_INSTALL": str(tmp_path / "install")}
    )
    assert none.code == 2 and "no certification suite 'cert-000000'" in none.err


@pytest.mark.parametrize("linked", ["experiments", "workload"])
def test_a_symlinked_experiments_directory_is_not_followed_out_of_the_install(
    llmb_proc, tmp_path, linked
):
    """The attack of issue 21, item 9: a workload's experiments directory (or the workload's own
    directory) is a link to a folder of secrets; the archive must not carry them."""
    install = tmp_path / "install"
    experiments(install)
    private = tmp_path / "home" / ".ssh"
    private.mkdir(parents=True)
    (private / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY----- fake\n")
    (private / "shadow").write_text("root:$6$fake:19000:0:99999:7:::\n")
    if linked == "experiments":
        link = install / "workloads" / "nemotronh" / "experiments"
        link.parent.mkdir(parents=True)
        link.symlink_to(private)
    else:
        (tmp_path / "elsewhere" / "experiments").mkdir(parents=True)
        (tmp_path / "elsewhere" / "experiments" / "shadow").write_text(
            "root:$6$fake:19000:0:99999:7:::\n"
        )
        link = install / "workloads" / "llama4"
        link.symlink_to(tmp_path / "elsewhere")
    output = tmp_path / "experiments.tar.gz"
    result = llmb_proc("archive", "-o", str(output), env={"LLMB_INSTALL": str(install)})
    assert result.code == 0, result.err
    with tarfile.open(output) as tar:
        names = tar.getnames()
        contents = b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())
    assert not [n for n in names if n.endswith(("id_rsa", "shadow"))] and b"fake" not in contents
    assert any(n.endswith(f"log-{MB}.out") for n in names)  # the real experiments are packed
    assert "llmb: warning: left out workloads/" in result.err and "symbolic link" in result.err
    # Named on the command line, a linked directory is the user's choice and is packed.
    named = llmb_proc(
        "archive",
        str(link),
        "-o",
        str(tmp_path / "named.tar.gz"),
        env={"LLMB_INSTALL": str(install)},
    )
    assert named.code == 0, named.err
    with tarfile.open(tmp_path / "named.tar.gz") as tar:
        assert any(n.endswith("shadow") for n in tar.getnames())


def _visible(received: str) -> list[str]:
    """The lines a terminal shows for ``received``: each line's text after its last carriage return,
    where an erase-to-end (ESC [K) there clears what is after the cursor."""
    shown = []
    for line in received.replace("\r\n", "\n").split("\n"):
        text = line.rsplit("\r", 1)[-1].replace("\x1b[K", "")
        if text or line.endswith("\r"):
            shown.append(text)
    return [line for line in shown if line]


def _archive_on_a_terminal(install: Path, output: Path, umask: int) -> bytes:
    """``llmb archive --output OUTPUT`` with stdout and stderr on one pseudo-terminal (as a user runs
    it) under ``umask``: what the terminal received."""
    import pty
    import select

    from conftest import _llmb_executable

    leader, follower = pty.openpty()
    env = {**os.environ, "LLMB_INSTALL": str(install), "COLUMNS": "200"}
    proc = subprocess.Popen(
        [_llmb_executable(), "archive", "--output", str(output)],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env=env,
        preexec_fn=lambda: os.umask(umask),
    )
    os.close(follower)
    received = b""
    try:
        while select.select([leader], [], [], 120)[0]:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            received += chunk
        assert proc.wait(timeout=120) == 0, received
    finally:
        os.close(leader)
    return received


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640)])
def test_a_small_archive_on_a_terminal_reads_well_and_can_be_handed_on(tmp_path, umask, mode):
    """Issue 34: no empty first line, sizes in a unit that shows them ("31.2 kB", not "0.0 MB"), and
    the archive gets the permissions the user's umask gives new files (it is meant for a ticket),
    not mkstemp's owner-only 0600."""
    install = tmp_path / "install"
    experiments(install)
    output = tmp_path / "experiments.tar.gz"
    shown = _visible(_archive_on_a_terminal(install, output, umask).decode())
    # what the terminal shows (a progress line, where the machine was slow enough for one, is erased)
    assert shown and shown[0].startswith(str(output)), shown
    assert " kB packed into " in shown[0] and " 0.0 MB" not in shown[0], shown
    assert os.stat(output).st_mode & 0o777 == mode


def test_byte_size_keeps_small_sizes_visible():
    from llmb.figures import byte_size

    assert [byte_size(n) for n in (0, 812, 1_536, 31_200, 248_000_000, 3.2e9)] == [
        "0 B",
        "812 B",
        "1.5 kB",
        "31.2 kB",
        "248.0 MB",
        "3.2 GB",
    ]
