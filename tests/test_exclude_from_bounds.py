"""``--exclude-from PREFLIGHT.json`` held to bounds (issue 32, item 7), with real ``llmb`` processes:
a file naming tens of thousands of nodes is refused at once (the merge was quadratic), JSON nested
200,000 deep is a usage error (exit 2) in run, sweep and certify, not an internal one (70); a run
records only what identifies the file and what it chose (an 8 MB job id once went into every
record); a preflight of another GPU type, another Slurm cluster or long ago is warned of."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llmb.runs import exclusion

RUN = ["run", "llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "2"]
PROXY = ["--proxy", "tiny"]


def preflight_file(path: Path, **fields) -> Path:
    path.write_text(
        json.dumps({"job_id": "slurm-1", "verdict": "flagged", "exclude": ["node3"], **fields})
    )
    return path


@pytest.fixture
def slurm_env(tmp_path):
    """An install, and a Slurm configuration that names a cluster but reaches none (Slurm's commands
    fail at once; a dry run goes on)."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("# no SlurmctldHost: Slurm's commands fail at once\nClusterName=alpha\n")
    return {"LLMB_INSTALL": str(tmp_path / "install"), "SLURM_CONF": str(conf)}


def dry_slurm_run(llmb_proc, path: Path, env: dict, *extra: str):
    return llmb_proc(
        *RUN, *PROXY, "--backend", "slurm", "--bare", "--exclude-from", str(path), "--dry-run",
        *extra, env=env, timeout=120,
    )  # fmt: skip


class Counted(str):
    """A node name that counts its comparisons."""

    compared = 0

    def __eq__(self, other):
        Counted.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_merging_names_is_linear():
    """4,000 new names into an exclude list of 4,000: a list's membership test compared each with every
    name before it (8 million comparisons); a set compares a name only with its equals."""
    given = ",".join(f"old{i}" for i in range(4000))
    nodes = [Counted(f"new{i}") for i in range(4000)] + [Counted("new7"), Counted("old9")]
    Counted.compared = 0
    merged = exclusion.merged(given, nodes)
    assert Counted.compared < 10 * len(nodes)
    names = merged.split(",")
    assert len(names) == 8000 and names[:2] == ["old0", "old1"] and names[-1] == "new3999"


def test_many_names_are_refused_at_once_and_the_bound_itself_runs(llmb_proc, tmp_path, slurm_env):
    over = preflight_file(
        tmp_path / "over.json", exclude=[f"n{i:06d}" for i in range(40_000)], verdict="flagged"
    )
    # a hang guard only: refusing takes a fraction of it; the quadratic merge took minutes here
    refused = dry_slurm_run(llmb_proc, over, slurm_env)
    assert refused.code == 2, refused.err[-2000:]
    assert "40,000 names under 'exclude', more than the 10,000 nodes llmb keeps a job off" in (
        refused.err
    )
    at = preflight_file(tmp_path / "at.json", exclude=[f"n{i:06d}" for i in range(10_000)])
    ran = dry_slurm_run(llmb_proc, at, slurm_env)
    assert ran.code == 0, ran.err[-2000:]
    [line] = [line for line in ran.out.splitlines() if line.startswith("#SBATCH --exclude=")]
    assert line.count(",") == 9_999 and line.endswith("n009999")


@pytest.mark.parametrize(
    "command",
    [
        [*RUN, *PROXY, "--dry-run"],
        ["sweep", "--file", "SWEEP", *PROXY, "--dry-run"],
        ["certify", "--gpu", "h100", *PROXY, "--scale", "2", "--dry-run"],
    ],
    ids=["run", "sweep", "certify"],
)
def test_deeply_nested_json_is_a_usage_error(llmb_proc, tmp_path, command):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("llama31_8b: {gpu: h100, dtypes: [bf16], scales: [1]}\n")
    args = [str(sweep) if part == "SWEEP" else part for part in command]
    result = llmb_proc(
        *args, "--exclude-from", str(deep), env={"LLMB_INSTALL": str(tmp_path / "i")}, timeout=120
    )
    assert result.code == 2, result.err[-2000:]
    assert f"--exclude-from {deep}: its JSON nests too deeply to read" in result.err
    assert "internal error" not in result.err and "Traceback" not in result.err


@pytest.mark.parametrize(
    "exclude, said",
    [
        (["node1 --wrap=x"], "'node1 --wrap=x' under 'exclude' is no node name"),
        (["n" * 5000], "'" + "n" * 40 + "...' under 'exclude' is no node name"),
    ],
)
def test_a_name_that_is_no_node_is_refused_briefly(llmb_proc, tmp_path, slurm_env, exclude, said):
    result = dry_slurm_run(
        llmb_proc, preflight_file(tmp_path / "p.json", exclude=exclude), slurm_env
    )
    assert result.code == 2 and said in result.err, result.err[-2000:]
    assert len(result.err) < 2000


def test_a_run_records_only_what_identifies_the_file(llmb_proc, tmp_path):
    """A real local run with a preflight file whose job id is 8 MB and which carries much else: its
    records hold the path, digest, verdict and nodes, and no job id that is no job id."""
    pytest.importorskip("torch")
    path = preflight_file(
        tmp_path / "preflight.json",
        job_id="j" * (8 << 20),
        exclude=["node3", "node3", "node4"],
        rows=[{"node": f"node{i}", "junk": "x" * 1000} for i in range(100)],
        gpu="h100",
    )
    result = llmb_proc(
        *RUN, *PROXY, "--steps", "1", "--no-window-check", "--exclude-from", str(path), "--json",
        env={"LLMB_INSTALL": str(tmp_path / "install")}, timeout=300,
    )  # fmt: skip
    assert result.code == 0, result.err[-3000:]
    assert "its job_id 'jjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjj...' is no job id llmb writes" in (
        result.err
    )
    run_dir = Path(json.loads(result.out)["experiment_dir"])
    recipe = run_dir / "recipe.json"
    provenance = run_dir / "provenance.json"
    for record in (recipe, provenance):
        assert record.stat().st_size < 256 << 10, record
    recorded = json.loads(recipe.read_text())["preflight"]
    assert recorded == {
        "path": str(path),
        "sha256": recorded["sha256"],
        "job_id": None,
        "verdict": "flagged",
        "exclude": ["node3", "node4"],
    }
    assert json.loads(provenance.read_text())["preflight"] == recorded


def test_a_preflight_of_another_gpu_cluster_or_time_is_warned_of(llmb_proc, tmp_path, slurm_env):
    """Each of the three, one line each, once per command (a sweep reads the file per task)."""
    old = preflight_file(
        tmp_path / "old.json",
        gpu="b200",
        cluster="beta",
        written_at="2019-03-01T10:00:00.000000+00:00",
    )
    prefix = f"llmb: warning: --exclude-from {old}: that preflight"
    after = "; its flagged nodes may not be this run's slow ones."
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("llama31_8b: {gpu: h100, dtypes: [bf16], scales: [1, 2]}\n")
    sweep_args = [
        "sweep",
        "--file",
        str(sweep),
        *PROXY,
        "--backend",
        "slurm",
        "--bare",
        "--dry-run",
    ]
    cluster = f"{prefix} ran on the Slurm cluster beta, this run is submitted to alpha{after}"
    for result in (
        dry_slurm_run(llmb_proc, old, slurm_env),
        llmb_proc(*sweep_args, "--exclude-from", str(old), env=slurm_env, timeout=120),
    ):
        assert result.code == 0, result.err[-3000:]
        assert result.err.count(f"{prefix} measured b200 GPUs, this run asks for h100{after}") == 1
        assert result.err.count(cluster) == 1
        [age] = [line for line in result.err.splitlines() if "days old" in line]
        assert (
            age.startswith(f"{prefix} is ") and "days old (written 2019-03-01); nodes change" in age
        )
    # one of this GPU type and cluster, written now: nothing to say
    from llmb.runs.jobs import now

    fresh = preflight_file(tmp_path / "fresh.json", gpu="h100", cluster="alpha", written_at=now())
    result = dry_slurm_run(llmb_proc, fresh, slurm_env)
    assert result.code == 0 and "its flagged nodes may not be" not in result.err, result.err[-3000:]
    assert "#SBATCH --exclude=node3" in result.out
