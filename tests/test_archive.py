"""``llmb archive``: the experiments without profiles, traces, checkpoints and
code, readable again by ``llmb results`` once unpacked."""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

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
        inner / "code" / "nemo_experiments" / "default" / "checkpoints" / "iter_0000050" / "__0_0.distcp": b"w",
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
    result = llmb_proc("archive", "--output", str(output), "--json", env={"LLMB_INSTALL": str(install)})
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
    rows = json.loads(llmb_proc("results", "--format", "json", env={"LLMB_INSTALL": str(unpacked)}).out)
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
