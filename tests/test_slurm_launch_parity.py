"""The Slurm backend launches ranks the way NVIDIA's Megatron-Bridge
scripts/performance launcher measured the published numbers: each rank under
numactl on its GPU's socket (B300 cores pinned only on opt-in), --segment on 4-GPU-node
systems, srun --mpi=pmix in containers, --mem=0 --exclusive, GPUs as gres where
the cluster schedules them, the launcher's rank environment; and the dedicated
sbatch options. The whole script of one row per GPU type is pinned in
tests/golden/sbatch/ (LLMB_UPDATE_GOLDEN=1 rewrites them).

Real things throughout: bash runs the per-rank wrapper with the installed
numactl, the private Slurm runs ranks whose memory policy is read back from
/proc. Faked only what this machine cannot have: a Slurm new enough for
--segment (the goldens), typed GPU gres (an sinfo printing its documented
format), a multi-socket machine (a NUMA node that does not exist here is the
skip path)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from llmb.errors import UsageError
from llmb.lifecycle.submit import submit_run
from llmb.recipes.gpus import catalogue
from llmb.recipes.records import RecipeRequest
from llmb.runs.runspec import RunOptions, SubmitOptions
from llmb_backend_slurm import binding, cluster_gpus, launch_settings
from llmb_backend_slurm.backend import SlurmBackend, worker_started
from llmb_backend_slurm.commands import QueryFailed, SlurmCommands
from llmb_backend_slurm.launch_settings import Binding
from llmb_backend_slurm.script import render
from private_slurm import wrapper
from waiting import wait_for

GOLDEN = Path(__file__).parent / "golden" / "sbatch"
REFERENCE = "NVIDIA's Megatron-Bridge scripts/performance"


# ---------------------------------------------------------------- the reference's rules


def test_segment_is_the_node_count_up_to_18_then_its_largest_divisor_up_to_18():
    rule = launch_settings.segment
    assert [rule(n, 4, None) for n in (1, 2, 16, 18)] == [1, 2, 16, 18]
    assert [rule(n, 4, None) for n in (20, 32, 36, 64, 19, 128)] == [10, 16, 18, 16, 1, 16]
    assert rule(16, 8, None) is None  # 8-GPU nodes: none
    assert rule(16, 8, 4) == 4 and rule(16, 4, 0) is None  # given: taken as is; 0: none
    with pytest.raises(
        UsageError, match=r"--segment 3: a segment is a whole divisor of the run's 16 node"
    ):
        rule(16, 4, 3)


def test_numa_divisor_is_the_gpus_per_socket_of_the_gpu_types_node():
    for name, gpu in catalogue().items():
        assert (
            launch_settings.binding(name, "nemotron4", gpu.gpus_per_node).divisor
            == gpu.gpus_per_node // 2
        ), name
    assert launch_settings.binding("gb200", "llama31", 4) == Binding(2)
    assert launch_settings.binding("h100", "llama31", 8) == Binding(4)
    # a cluster of 4-GPU H100 nodes
    assert launch_settings.binding("h100", "llama31", 4) == Binding(2)
    # B300: two cores per rank, from SLURM_LOCALID * 16, only under Megatron-Bridge's launcher with
    # ENABLE_PCT_BINDING=true; never for Llama pre-training, never under NeMo 2's (tests/test_launch_env_sources.py).
    assert launch_settings.binding("b300", "qwen3", 8, "megatron_bridge", "true") == Binding(
        4, 16, 2
    )
    assert launch_settings.binding("b300", "qwen3", 8, "megatron_bridge", None) == Binding(4)
    assert launch_settings.binding("b300", "llama31", 8, "megatron_bridge", "true") == Binding(4)
    assert launch_settings.binding("b300", "nemotron4", 8, "nemo2", "true") == Binding(4)


def test_rank_environment_is_the_launchers():
    assert launch_settings.rank_env("h100", False) == {
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "False",
        "HF_HUB_OFFLINE": "0",
    }
    gb200 = launch_settings.rank_env("gb200", True)
    assert gb200["NCCL_NET_GDR_LEVEL"] == "PHB" and gb200["NCCL_NET_GDR_C2C"] == "1"
    assert gb200["TRANSFORMERS_OFFLINE"] == "0"  # HF_TOKEN passed: transformers may go online
    assert "NCCL_NET_GDR_LEVEL" not in launch_settings.rank_env("gb300", False)


# ---------------------------------------------------------------- sinfo's GRES and features


def test_sinfo_gres_and_features_name_the_gpu_type():
    read = cluster_gpus.read
    assert read([("gpu:h100:8(S:0-1),nvme:1", "(null)")]) == cluster_gpus.NodeGpus(
        True, {"h100": "sinfo GRES gpu:h100:8"}
    )
    assert read([("gpu:8", "(null)")]) == cluster_gpus.NodeGpus(True, {})
    assert read([("(null)", "(null)")]) == cluster_gpus.NodeGpus(False, {})
    assert read([("gpu:nvidia_b200:8", "")]).types == {"b200": "sinfo GRES gpu:nvidia_b200:8"}
    assert read([("(null)", "gpu,gb200,ib")]).types == {"gb200": "sinfo node feature gb200"}
    assert read([("gpu:gh200:1", "gh200,h200x")]).types == {}  # whole words only: gh200 is not h200
    mixed = read([("gpu:h100:8", ""), ("gpu:b200:8", "")])
    cluster_gpus.check_type("b200", mixed, "this cluster")
    with pytest.raises(
        UsageError,
        match=r"--gpu b300, but the nodes of partition p have b200 \(sinfo GRES gpu:b200:8\); "
        r"h100 \(sinfo GRES gpu:h100:8\)",
    ):
        cluster_gpus.check_type("b300", mixed, "partition p")


# ---------------------------------------------------------------- the per-rank wrapper, run by bash


@pytest.fixture(scope="session")
def numactl() -> str:
    found = shutil.which("numactl")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(
                "CI must check the NUMA binding, but numactl is not installed (dev.sh installs it)"
            )
        pytest.skip("numactl is not installed here (apt-get install numactl)")
    return found


def path_without(directory: Path, *commands: str) -> str:
    """A PATH holding every command of this one (links in ``directory``) except ``commands``."""
    directory.mkdir(parents=True, exist_ok=True)
    for folder in os.environ["PATH"].split(os.pathsep):
        if os.path.isdir(folder):
            for name in os.listdir(folder):
                link = directory / name
                if name not in commands and not link.exists() and not link.is_symlink():
                    link.symlink_to(os.path.join(folder, name))
    return str(directory)


def run_rank(
    bound: Binding, local_id: int, *worker: str, path: str | None = None
) -> subprocess.CompletedProcess:
    env = {
        "PATH": path or os.environ["PATH"],
        "SLURM_LOCALID": str(local_id),
        "SLURM_PROCID": str(local_id + 10),
        "SLURMD_NODENAME": "node7",
    }
    return subprocess.run(
        ["bash", "-c", binding.RANK_WRAPPER, *binding.wrapper_argv(bound), *worker],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_a_rank_runs_under_numactl_on_its_socket_and_says_so(numactl):
    result = run_rank(Binding(4), 3, "cat", "/proc/self/numa_maps")
    lines = result.stdout.splitlines()
    assert (
        result.returncode == 0
        and lines[0] == "[llmb] rank 13 on node7: numactl --cpunodebind=0 --membind=0"
    )
    # the worker's memory policy: bound to node 0
    assert all(" bind:0 " in line for line in lines[1:3])


def test_a_numa_node_this_machine_lacks_runs_the_rank_unbound_with_a_warning(numactl):
    assert not os.path.isdir("/sys/devices/system/node/node1"), (
        "this test needs a one-socket machine"
    )
    result = run_rank(Binding(2), 2, "cat", "/proc/self/numa_maps")
    lines = result.stdout.splitlines()
    assert result.returncode == 0
    assert lines[0] == (
        "[llmb] warning: rank 12 on node7 runs without NUMA binding: NUMA node 1 does not exist "
        "(SLURM_LOCALID 2 / 2 GPUs per socket)"
    )
    assert " default " in lines[1]  # ran, unbound


def test_without_numactl_the_rank_runs_unbound_with_a_warning(tmp_path):
    result = run_rank(Binding(4), 0, "echo", "ran", path=path_without(tmp_path / "bin", "numactl"))
    assert result.returncode == 0 and result.stdout.splitlines() == [
        "[llmb] warning: rank 10 on node7 runs without NUMA binding: numactl is not installed",
        "ran",
    ]


def test_b300_pins_cores_and_drops_only_the_pinning_where_a_cpu_is_missing(numactl):
    result = run_rank(Binding(4, 1, 2), 0, "grep", "Cpus_allowed_list", "/proc/self/status")
    assert result.stdout.splitlines() == [
        "[llmb] rank 10 on node7: numactl --cpunodebind=0 --membind=0 --physcpubind=0,1",
        "Cpus_allowed_list:\t0-1",
    ]
    result = run_rank(Binding(4, 16, 2), 2, "echo", "ran")  # CPU 32 does not exist here
    assert result.stdout.splitlines() == [
        "[llmb] warning: rank 12 on node7: CPU 32 does not exist, so no cores are pinned",
        "[llmb] rank 12 on node7: numactl --cpunodebind=0 --membind=0",
        "ran",
    ]


def test_the_workers_arguments_arrive_exactly_and_nothing_in_them_runs(numactl, tmp_path):
    canary = tmp_path / "canary"
    hostile = [
        "two words",
        f"$(touch {canary})",
        f"`touch {canary}`",
        "a; touch x",
        "*",
        'it\'s "q"',
        "line1\nline2",
    ]
    result = run_rank(
        Binding(4),
        0,
        "python3",
        "-c",
        "import json, sys; print(json.dumps(sys.argv[1:]))",
        *hostile,
    )
    assert json.loads(result.stdout.splitlines()[-1]) == hostile and not canary.exists()


def test_a_worker_that_cannot_start_is_a_launch_failure_not_a_started_worker(numactl, tmp_path):
    result = run_rank(Binding(4), 0, "/nonexistent/bin/python3", "-m", "llmb.worker")
    assert result.returncode == 127
    log = tmp_path / "log.out"
    log.write_text(result.stdout + result.stderr)
    assert (
        "cannot start the worker: /nonexistent/bin/python3" in log.read_text()
        and not worker_started(str(log))
    )
    log.write_text("[llmb] rank 0 on node1: numactl --cpunodebind=0 --membind=0\n")
    assert not worker_started(str(log))  # the binding line is llmb's, not the worker's
    log.write_text(
        "[llmb] rank 0 on node1: numactl --cpunodebind=0 --membind=0\nthe worker's first line\n"
    )
    assert worker_started(str(log))


# ---------------------------------------------------------------- the script: settings from SubmitOptions


class NewerSlurm(SlurmCommands):
    """A Slurm with --segment (topology/block) and PMIx whose nodes hold ``gres``: what this
    machine's Slurm 22.05 cannot show. Every other command is real."""

    def __init__(self, gres: str = "gpu:8", features: str = "(null)", sinfo_fails: bool = False):
        super().__init__()
        self.rows, self.sinfo_fails, self.asked = [(gres, features)], sinfo_fails, []

    def sbatch_has(self, option: str) -> bool:
        return True

    def srun_has_mpi(self, plugin: str) -> bool:
        return True

    def node_gpus(self, partition, nodelist):
        self.asked.append((partition, nodelist))
        if self.sinfo_fails:
            raise QueryFailed("sinfo failed: Unable to contact slurm controller (connect failure)")
        return self.rows


@pytest.fixture
def planned(host, install_root, monkeypatch):
    """(spec, job) of a dry run of a row on the slurm backend, in a fresh $LLMB_INSTALL."""
    for name in (
        "HF_TOKEN",
        "SBATCH_GPUS_PER_NODE",
        "SLURM_CONF",
        "LLMB_SLURM_PYTHON",
        "ENABLE_PCT_BINDING",
    ):
        monkeypatch.delenv(name, raising=False)
    # what llmb install fills: container mode needs it
    (install_root / "python").mkdir(parents=True)

    def plan(workload, size, gpu, dtype, gpus, **run):
        submitted = submit_run(
            host,
            RecipeRequest(workload, size, gpu, dtype, gpus, any_scale=True),
            RunOptions(**run),
            "slurm",
            dry_run=True,
        )
        return submitted.spec, submitted.job

    return plan


def script_of(spec, job, submit=None, commands=None) -> tuple[str, dict]:
    backend = SlurmBackend(commands or NewerSlurm(f"gpu:{spec.gpu}:{spec.ranks_per_node}"))
    described = backend.describe(spec, job, submit or SubmitOptions())
    return described["script"], described


def normalised(text: str, install: Path, job_id: str) -> str:
    text = text.replace(str(install), "$LLMB_INSTALL").replace(job_id, "slurm-JOBID")
    return re.sub(r"_\d{9,}/", "_TIMESTAMP/", text)


# One row per GPU type, 2+ nodes. No seed has a B300 row: the B200 row of Nemotron-4 340B runs on B300 nodes.
GOLDEN_ROWS = {
    "h100": ("llama31", "8b", "h100", "fp8", 16, None),
    "b200": ("llama31", "8b", "b200", "fp8", 16, None),
    "gb200": ("llama31", "8b", "gb200", "fp8", 8, None),
    "gb300": ("llama31", "70b", "gb300", "fp8", 64, None),
    "b300": ("nemotron4", "340b", "b200", "bf16", 128, "b300"),
}

# What each golden row's launcher sets or removes for that row (None: not set).
_CUDNN_NORM = ("NVTE_NORM_FWD_USE_CUDNN", "NVTE_NORM_BWD_USE_CUDNN")
GOLDEN_ROW_ENV = {
    "h100": {
        **dict.fromkeys(_CUDNN_NORM, "1"),
        "NCCL_CTA_POLICY": "1",
    },  # 8B FP8-CS: kept, and the CTA policy
    "b200": {**dict.fromkeys(_CUDNN_NORM), "NCCL_CTA_POLICY": None},  # removed by PerfEnvPlugin
    "gb200": dict.fromkeys(_CUDNN_NORM),
    "gb300": {
        **dict.fromkeys(_CUDNN_NORM, "1"),
        "PYTORCH_CUDA_ALLOC_CONF": None,
    },  # 70B FP8-CS: kept
    "b300": {
        **dict.fromkeys(_CUDNN_NORM, "1"),
        "NCCL_IB_QPS_PER_CONNECTION": None,
    },  # NeMo 2's 340B script
}


@pytest.mark.parametrize("name", sorted(GOLDEN_ROWS))
def test_golden_sbatch_scripts(name, planned, install_root, host):
    """The whole script of one row per GPU type. After a deliberate change, regenerate with
    LLMB_UPDATE_GOLDEN=1 and review the diff."""
    workload, size, gpu, dtype, gpus, on = GOLDEN_ROWS[name]
    planned(workload, size, gpu, dtype, gpus)  # the fixture's environment and install
    submitted = submit_run(
        host,
        RecipeRequest(workload, size, gpu, dtype, gpus, any_scale=True),
        RunOptions(),
        "slurm",
        dry_run=True,
    )
    spec, job = replace(submitted.spec, gpu=on or submitted.spec.gpu), submitted.job
    # with what the backend is given: the options and the time limit derived from the run
    text = normalised(script_of(spec, job, submitted.submit)[0], install_root, job.id)
    golden = GOLDEN / f"{name}.sh"
    if os.environ.get("LLMB_UPDATE_GOLDEN"):
        GOLDEN.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.read_text() == text, f"{name} (LLMB_UPDATE_GOLDEN=1 to accept)"


def test_the_goldens_launch_as_the_reference_does():
    """What the golden files hold, by GPU type (a regenerated golden that lost one fails here)."""
    for name, (_, _, _, _, gpus, _) in GOLDEN_ROWS.items():
        text = (GOLDEN / f"{name}.sh").read_text()
        per_node = catalogue()[name].gpus_per_node
        srun = next(line for line in text.splitlines() if line.startswith("srun "))
        for line in (
            "#SBATCH --exclusive",
            "#SBATCH --mem=0",
            f"#SBATCH --gres=gpu:{per_node}",
            f"#SBATCH --nodes={gpus // per_node}",
            f"#SBATCH --ntasks-per-node={per_node}",
        ):
            assert line in text.splitlines(), (name, line)
        for part in (
            "--mpi=pmix",
            "--no-container-mount-home",
            "--container-writable",
            f'bash -c "$bind_rank" llmb-bind {per_node // 2} ',
        ):
            assert part in srun, (name, part)
        segment = launch_settings.segment(gpus // per_node, per_node, None)
        assert ("#SBATCH --segment=" in text) == (per_node == 4), name
        assert not segment or f"#SBATCH --segment={segment}" in text, name
        # B300: no core pinning by default (ENABLE_PCT_BINDING unset; Nemotron-4 runs NeMo 2's launcher)
        assert f"llmb-bind {per_node // 2} 0 0 " in srun, name
        assert ("NCCL_NET_GDR_C2C" in srun and "export NCCL_NET_GDR_LEVEL=PHB" in text) == (
            name == "gb200"
        ), name
        assert "export TOKENIZERS_PARALLELISM=False" in text and "TOKENIZERS_PARALLELISM" in srun
        # the per-row environment (launch.yaml row_env; sources: tests/test_launch_env_sources.py)
        exported = {
            line.removeprefix("export ").split("=", 1)[0]: line.split("=", 1)[1]
            for line in text.splitlines()
            if line.startswith("export ")
        }
        for variable, value in GOLDEN_ROW_ENV[name].items():
            assert exported.get(variable) == value, (name, variable)
            assert value is None or variable in srun, (name, variable)
        # a time limit derived from the run (llmb.recipes.time_limit): never the partition's, at least 30 min
        limit = next(line for line in text.splitlines() if line.startswith("#SBATCH --time="))
        hours, minutes, _ = limit.removeprefix("#SBATCH --time=").split(":")
        assert 30 <= 60 * int(hours) + int(minutes) <= 120, (name, limit)


def test_dedicated_options_become_sbatch_lines_and_retries_add_to_the_exclusions(planned):
    spec, job = planned("llama31", "8b", "h100", "bf16", 8, proxy="tiny")
    submit = SubmitOptions(
        bare=True,
        nodelist="node[1-2]",
        exclude="node9",
        reservation="bench week",
        qos="high",
        constraint="gpu&ib",
        additional="exclude=node8;mail-type=END",
    )
    backend = SlurmBackend(NewerSlurm("gpu:h100:8"))
    settings = backend.settings(spec, submit)
    assert settings["exclude"] == ["node9", "node8"] and settings["additional"] == [
        ["mail-type", "END"]
    ]
    settings["exclude"] = sorted({*settings["exclude"], "node3"})  # what a retry does
    lines = render(backend._script(replace(job, details={"slurm": settings}), spec, 2)).splitlines()
    for line in (
        "#SBATCH --nodelist=node[1-2]",
        "#SBATCH --exclude=node3,node8,node9",
        '#SBATCH --reservation="bench week"',
        "#SBATCH --qos=high",
        "#SBATCH --constraint=gpu&ib",
        "#SBATCH --mail-type=END",
    ):
        assert line in lines, line
    assert backend.slurm.asked == [(None, "node[1-2]")]  # sinfo looked at the nodes asked for
    srun = next(line for line in lines if line.startswith("srun "))
    assert "--mpi" not in srun and "--container" not in srun  # bare mode: no container, no PMIx


@pytest.mark.parametrize(
    ("submit", "message"),
    [
        (
            SubmitOptions(nodelist="node1\n#SBATCH --nodes=99"),
            r"--nodelist 'node1\\n#SBATCH --nodes=99': .*line break",
        ),
        (SubmitOptions(qos='a"b'), "double quote"),
        (
            SubmitOptions(qos="high", additional="qos=low"),
            r"--qos is given twice: 'high' .* 'low' in ADDITIONAL_SLURM_PARAMS",
        ),
        (SubmitOptions(additional="reservation=a;reservation=b"), "gives --reservation twice"),
        (SubmitOptions(gres="gpu:eight"), r"--gres 'gpu:eight': expected gpu:N or gpu:TYPE:N"),
        (SubmitOptions(segment=3), "--segment 3: a segment is a whole divisor"),
        (
            SubmitOptions(additional="segment=x"),
            "ADDITIONAL_SLURM_PARAMS item segment 'x': expected a whole number from 1",
        ),
        (SubmitOptions(cluster_env=(("HF_TOKEN", "x"),)), "sets HF_TOKEN, a secret"),
        (SubmitOptions(cluster_env=(("A B", "x"),)), "is not a valid environment variable name"),
    ],
)
def test_bad_dedicated_options_are_refused_naming_what_is_valid(planned, submit, message):
    spec, job = planned("llama31", "8b", "gb200", "fp8", 8)
    with pytest.raises(UsageError, match=message):
        script_of(spec, job, submit)


def test_gres_is_detected_overridden_or_left_out(planned):
    spec, job = planned("llama31", "8b", "gb200", "fp8", 8)

    def gres(submit=None, commands=None):
        found = [
            line
            for line in script_of(spec, job, submit, commands)[0].splitlines()
            if "--gres" in line
        ]
        return found[0] if found else None

    assert gres() == "#SBATCH --gres=gpu:4"  # the run's GPUs per node
    assert gres(commands=NewerSlurm("(null)", "gb200")) is None  # a cluster without GPU gres
    assert gres(SubmitOptions(gres="gpu:gb200:4")) == "#SBATCH --gres=gpu:gb200:4"
    assert gres(SubmitOptions(additional="gres=gpu:2")) == "#SBATCH --gres=gpu:2"
    assert gres(SubmitOptions(gres="none")) is None
    text, described = script_of(spec, job, commands=NewerSlurm(sinfo_fails=True))
    assert "--gres" not in text and "Unable to contact slurm controller" in described["warnings"][0]


def test_the_runs_own_variables_win_over_the_cluster_files_which_win_over_the_launchers(planned):
    spec, job = planned(
        "llama31",
        "8b",
        "gb200",
        "fp8",
        8,
        proxy="tiny",
        env=(("TOKENIZERS_PARALLELISM", "True"), ("NCCL_DEBUG", "INFO")),
    )
    submit = SubmitOptions(
        bare=True,
        cluster_env=(
            ("NCCL_NET_GDR_LEVEL", "SYS"),
            ("NCCL_DEBUG", "WARN"),
            ("NCCL_IB_HCA", "mlx5_0,mlx5_1"),
        ),
    )
    text = script_of(spec, job, submit)[0]
    for line in (
        "export TOKENIZERS_PARALLELISM=True",
        "export NCCL_DEBUG=INFO",
        "export NCCL_NET_GDR_LEVEL=SYS",
        "export NCCL_NET_GDR_C2C=1",
        "export NCCL_IB_HCA=mlx5_0,mlx5_1",
        "export TRANSFORMERS_OFFLINE=1",
        "export HF_HUB_OFFLINE=0",
    ):
        assert line in text.splitlines(), line
    container = script_of(spec, job, SubmitOptions(cluster_env=(("NCCL_IB_HCA", "mlx5_0"),)))[0]
    srun = next(line for line in container.splitlines() if line.startswith("srun "))
    assert all(
        name in srun
        for name in ("NCCL_IB_HCA", "NCCL_NET_GDR_C2C", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def test_numa_binding_off_launches_the_worker_directly(planned):
    spec, job = planned("llama31", "8b", "b200", "fp8", 8)
    text = script_of(spec, job, SubmitOptions(numa_binding=False))[0]
    assert "bind_rank" not in text and "numactl" not in text
    assert re.search(r"--container-env=\S+ python3 -m llmb\.worker ", text)


# ---------------------------------------------------------------- what this cluster has (sinfo, sbatch, srun)


def test_nodes_of_another_gpu_type_refuse_the_run_before_submission(llmb_proc, tmp_path):
    sinfo = wrapper(tmp_path / "shims", "sinfo", 'echo "gpu:h100:8(S:0-1)|(null)"')
    env = {
        "PATH": f"{sinfo.parent}:{os.environ['PATH']}",
        "LLMB_BACKEND": "slurm",
        "LLMB_NO_CACHE": "1",
        "LLMB_INSTALL": str(tmp_path / "install"),
    }
    result = llmb_proc(
        "run",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "b200",
        "--dtype",
        "fp8",
        "--gpus",
        "8",
        "--proxy",
        "tiny",
        "--bare",
        "--partition",
        "batch",
        "--detach",
        env=env,
    )
    assert result.code == 2 and "Traceback" not in result.err
    assert (
        "--gpu b200, but the nodes of partition batch have h100 (sinfo GRES gpu:h100:8): the run's recipe, its "
        "node count and binding follow --gpu, so use --gpu h100"
    ) in result.err
    # nothing submitted, nothing left
    assert json.loads(llmb_proc("status", "--json", env=env).out) == []


def test_a_failing_sinfo_warns_and_the_dry_run_goes_on(llmb_proc, tmp_path):
    sinfo = wrapper(
        tmp_path / "shims",
        "sinfo",
        'echo "sinfo: error: Unable to contact slurm controller" >&2; exit 1',
    )
    env = {
        "PATH": f"{sinfo.parent}:{os.environ['PATH']}",
        "LLMB_NO_CACHE": "1",
        "LLMB_INSTALL": str(tmp_path / "i"),
    }
    result = llmb_proc(
        "run",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "fp8",
        "--gpus",
        "16",
        "--backend",
        "slurm",
        "--dry-run",
        env=env,
    )
    assert result.code == 0 and "#SBATCH --nodes=2" in result.out and "--gres" not in result.out
    assert (
        "the nodes' GPUs could not be read (sinfo failed: Unable to contact slurm controller)"
        in result.err
    )


@pytest.fixture
def env(slurm, tmp_path):
    return {
        "LLMB_INSTALL": str(tmp_path / "install"),
        "LLMB_NO_CACHE": "1",
        "LLMB_BACKEND": "slurm",
        **slurm.env(),
    }


@pytest.mark.slurm
def test_slurm_22_05_gets_no_segment_but_pmix_and_detected_gres(llmb_proc, env):
    """This cluster's own answers: sbatch 22.05 has no --segment (left out, with the reason), srun
    lists PMIx, sinfo shows gpu gres (untyped: the GPU type is not checked)."""
    Path(env["LLMB_INSTALL"], "python").mkdir(parents=True)
    result = llmb_proc(
        "run",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "gb200",
        "--dtype",
        "fp8",
        "--gpus",
        "8",
        "--dry-run",
        env=env,
    )
    assert result.code == 0, result.err
    assert "sbatch here has no --segment option" in result.err and "--segment=2" in result.err
    assert "#SBATCH --segment" not in result.out and "#SBATCH --gres=gpu:4" in result.out
    srun = next(line for line in result.out.splitlines() if line.startswith("srun "))
    assert (
        "--mpi=pmix" in srun
        and 'bash -c "$bind_rank" llmb-bind 2 0 0 python3 -m llmb.worker' in srun
    )


def rank_lines(log: str) -> dict[int, str]:
    return {
        int(m.group(1)): line
        for line in log.splitlines()
        if (m := re.match(r"\[llmb\] (?:warning: )?rank (\d+) on node[12]\b", line))
    }


def worker_ranks(run_file: str) -> dict[int, int]:
    """SLURM_PROCID -> pid of the processes running ``llmb.worker`` for this job."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = dict(
                v.split(b"=", 1) for v in (entry / "environ").read_bytes().split(b"\0") if b"=" in v
            )
        except OSError:
            continue
        if (
            argv[0].rsplit(b"/", 1)[-1].startswith(b"python")
            and b"llmb.worker" in argv
            and run_file.encode() in argv
        ):
            found[int(environ[b"SLURM_PROCID"])] = int(entry.name)
    return found


@pytest.mark.slurm
def test_each_rank_runs_under_the_binding_it_prints_on_a_real_slurm(llmb_proc, env, numactl):
    """GB200: 2 GPUs per socket, so local ranks 0-1 bind to NUMA node 0 and ranks 2-3 to node 1,
    which this one-socket machine lacks: they say so and run unbound. /proc says which is which."""
    result = llmb_proc(
        "run",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "gb200",
        "--dtype",
        "fp8",
        "--gpus",
        "4",
        "--proxy",
        "tiny",
        "--bare",
        "--steps",
        "400",
        "--detach",
        "--json",
        env=env,
        timeout=300,
    )
    job = json.loads(result.out)
    run_file = str(Path(env["LLMB_INSTALL"]) / "jobs" / job["job_id"] / "run.json")
    try:
        pids = wait_for(
            lambda: len(found := worker_ranks(run_file)) == 4 and found, timeout=240, what="4 ranks"
        )
        policies = {}
        for rank, pid in pids.items():
            maps = Path(f"/proc/{pid}/numa_maps").read_text()
            policies[rank] = (
                "bind:0" if " bind:0 " in maps else "default" if " default " in maps else maps[:200]
            )
        assert policies == {0: "bind:0", 1: "bind:0", 2: "default", 3: "default"}
    finally:
        llmb_proc("cancel", job["job_id"], env=env, timeout=120)
    log = Path(job["log"]).read_text()
    lines = rank_lines(log)
    assert re.fullmatch(
        r"\[llmb\] rank 0 on node[12]: numactl --cpunodebind=0 --membind=0", lines[0]
    )
    assert re.fullmatch(
        r"\[llmb\] rank 1 on node[12]: numactl --cpunodebind=0 --membind=0", lines[1]
    )
    for rank in (2, 3):
        assert re.fullmatch(
            rf"\[llmb\] warning: rank {rank} on node[12] runs without NUMA binding: NUMA node 1 does "
            rf"not exist \(SLURM_LOCALID {rank} / 2 GPUs per socket\)",
            lines[rank],
        )
    assert "[llmb] warning: sbatch here has no --segment option" in log  # said in the job's log too
    script = next(Path(job["experiment_dir"]).glob("sbatch_*.sh")).read_text()
    assert (
        "#SBATCH --gres=gpu:4" in script
        and "#SBATCH --mem=0" in script
        and "--segment" not in script
    )


@pytest.mark.slurm
def test_without_numactl_and_with_a_failing_sinfo_a_real_run_still_completes(
    llmb_proc, env, tmp_path
):
    path = path_without(tmp_path / "bin", "numactl", "sinfo")
    wrapper(
        Path(path), "sinfo", 'echo "sinfo: error: Unable to contact slurm controller" >&2; exit 1'
    )
    without = {**env, "PATH": path}
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
        "--bare",
        "--steps",
        "3",
        "--no-window-check",
        "--json",
        env=without,
        timeout=600,
    )
    summary = json.loads(result.out)
    assert summary["state"] == "SUCCEEDED", result.err[-3000:]
    log = Path(summary["log"]).read_text()
    lines = rank_lines(log)
    for rank in (0, 1):
        assert re.fullmatch(
            rf"\[llmb\] warning: rank {rank} on node[12] runs without NUMA binding: numactl is not "
            rf"installed",
            lines[rank],
        )
    assert (
        "[llmb] warning: the nodes' GPUs could not be read (sinfo failed: Unable to contact slurm controller)"
        in log
    )
