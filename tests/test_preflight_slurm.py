"""``llmb preflight`` on a real Slurm: three emulated nodes (tests/private_slurm.py), one of them
made genuinely slower, flagged alone, twice; then ``llmb run --exclude-from`` keeps off it.

The slowdown is real CPU starvation, not a flag. Each node's slurmd runs under ``taskset``
(node1 and node2 on core 1, node3 on core 0), so every rank it starts has that core. On node3
the ranks start through a wrapper (the bare mode's ``LLMB_SLURM_PYTHON``) that keeps three busy
processes beside the rank, on its core and in its session: the kernel's per-session fair share
(autogroup) would otherwise give a rank half a core against any number of busy processes
elsewhere. node3's rank gets about a quarter of core 0, node1's and node2's about half of
core 1 each (``--no-numa-binding``: numactl would widen the ranks' cores again): its GEMM and
memory figures fall to about half of its peers', past preflight's documented 25% margin, and
every pair with node3 is slow while node1-node2 is not. The test asserts which node is
flagged, never a speed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the preflight measures through torch")
pytestmark = pytest.mark.slurm

SLOW = "node3"
BUSY = 3


@pytest.fixture(scope="module")
def three_nodes(tmp_path_factory):
    from conftest import _private_slurm
    from private_slurm import node_names

    if (os.cpu_count() or 1) < 2:
        pytest.skip("the slowdown confines one node to a core of its own: needs 2 cores")
    yield from _private_slurm(
        tmp_path_factory,
        accounting=False,
        name="slurm3",
        nodes=node_names(3),
        wrappers={
            "node1": ["taskset", "-c", "1"],
            "node2": ["taskset", "-c", "1"],
            SLOW: ["taskset", "-c", "0"],
        },
    )


@pytest.fixture(scope="module")
def slow_python(tmp_path_factory) -> Path:
    """The ranks' Python: on node3, beside BUSY busy processes on the rank's core, in its session."""
    path = tmp_path_factory.mktemp("slow") / "python"
    path.write_text(f"""#!/bin/bash
if [ "$SLURMD_NODENAME" != {SLOW} ]; then exec {sys.executable} "$@"; fi
busy=()
for _ in $(seq {BUSY}); do {sys.executable} -c 'while True: pass' & busy+=($!); done
trap 'kill "${{busy[@]}}" 2>/dev/null' EXIT INT TERM
{sys.executable} "$@"
""")
    path.chmod(0o755)
    return path


@pytest.fixture
def env(three_nodes, tmp_path):
    return {"LLMB_INSTALL": str(tmp_path / "install"), "LLMB_NO_CACHE": "1", **three_nodes.env()}


def preflight(llmb_proc, env, python):
    result = llmb_proc(
        "preflight",
        "--gpu",
        "h100",
        "--nodes",
        "3",
        "--gpus-per-node",
        "1",
        "--backend",
        "slurm",
        "--bare",
        "--no-numa-binding",
        "--gemm-size",
        "640",
        "--repeats",
        "9",
        "--json",
        env={**env, "LLMB_SLURM_PYTHON": str(python)},
        timeout=600,
    )
    assert result.out.strip(), result.err[-3000:]
    return result, json.loads(result.out)


def test_the_slowed_node_alone_is_flagged_and_the_next_run_keeps_off_it(
    llmb_proc, env, slow_python
):
    reports = []
    for _ in range(2):
        result, report = preflight(llmb_proc, env, slow_python)
        assert result.code == 1, result.err[-3000:]  # a flagged node: exit 1
        assert report["nodes"] == ["node1", "node2", "node3"], report
        assert report["exclude"] == [SLOW], json.dumps(report["rows"], indent=1)
        assert report["device"] == "cpu" and report["backend"] == "gloo"
        reports.append(report)
    measured = json.loads((Path(reports[-1]["path"]).parent / "measurements.json").read_text())
    cores = {r["node"]: r["cpus"] for r in measured["ranks"]}
    assert cores == {"node1": [1], "node2": [1], SLOW: [0]}  # the confinement reached the ranks
    slow = next(r for r in reports[-1]["rows"] if r["node"] == SLOW)
    assert any(reason.startswith(("gemm", "memory", "inter")) for reason in slow["reasons"]), slow
    assert reports[-1]["world_allreduce_gb_s"] > 0

    # The next job skips it: the exclusion reaches sbatch, the job runs on the other two, the run records the file.
    path = reports[-1]["path"]
    env2 = {**env, "GPUS_PER_NODE": "1"}
    result = llmb_proc(
        "run",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        "2",
        "--proxy",
        "tiny",
        "--steps",
        "3",
        "--no-window-check",
        "--backend",
        "slurm",
        "--bare",
        "--exclude-from",
        path,
        "--json",
        env=env2,
        timeout=600,
    )
    assert result.out.strip(), result.err[-3000:]
    summary = json.loads(result.out)
    assert summary["state"] == "SUCCEEDED", result.err[-3000:]
    run_dir = Path(summary["experiment_dir"])
    script = next(run_dir.glob("sbatch_*.sh")).read_text()
    assert "#SBATCH --exclude=node3" in script
    assert "on node[1-2]" in Path(summary["log"]).read_text()
    recipe = json.loads((run_dir / "recipe.json").read_text())
    assert recipe["preflight"]["path"] == path and recipe["preflight"]["exclude"] == [SLOW]
    provenance = json.loads((run_dir / "provenance.json").read_text())
    assert provenance["preflight"]["job_id"] == reports[-1]["job_id"]
