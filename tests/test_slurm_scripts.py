"""The Slurm backend's pure parts: ADDITIONAL_SLURM_PARAMS, state mapping and
the batch script (its text is also run by bash here, on hostile values)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from llmb.errors import UsageError
from llmb.runs.jobs import STATES
from llmb_backend_slurm import params
from llmb_backend_slurm.script import BatchScript, Container, directive, render
from llmb_backend_slurm.states import INFRASTRUCTURE, LLMB_STATE, llmb_state

# Every job state Slurm 22.05 documents (squeue's JOB STATE CODES).
SLURM_22_05_STATES = (
    "BOOT_FAIL CANCELLED COMPLETED CONFIGURING COMPLETING DEADLINE FAILED NODE_FAIL OUT_OF_MEMORY PENDING "
    "PREEMPTED RUNNING RESV_DEL_HOLD REQUEUE_FED REQUEUE_HOLD REQUEUED RESIZING REVOKED SIGNALING SPECIAL_EXIT "
    "STAGE_OUT STOPPED SUSPENDED TIMEOUT"
).split()


def test_additional_params_take_the_seeds_form():
    assert params.parse("nodelist=node001,node002;constraint=gpu&memory;exclusive") == [
        ("nodelist", "node001,node002"),
        ("constraint", "gpu&memory"),
        ("exclusive", None),
    ]
    assert params.parse(" reservation=my_reservation ; ") == [("reservation", "my_reservation")]
    assert params.parse(None) == [] and params.parse("  ") == []
    with pytest.raises(UsageError, match="--nodes; llmb sets it from the recipe"):
        params.parse("nodes=4")
    with pytest.raises(UsageError, match="expected key=value or a flag name"):
        params.parse("constraint gpu")


def test_every_slurm_state_maps_to_an_llmb_state():
    assert set(SLURM_22_05_STATES) == set(LLMB_STATE)
    assert set(LLMB_STATE.values()) <= set(STATES)
    assert llmb_state("CANCELLED by 0") == "CANCELLED" and llmb_state("WHATEVER") == "UNKNOWN"
    assert {s for s in INFRASTRUCTURE} == {"NODE_FAIL", "BOOT_FAIL", "PREEMPTED"}


def test_directives_quote_what_sbatch_would_split():
    assert directive("constraint", "gpu&memory") == "#SBATCH --constraint=gpu&memory"
    assert directive("comment", "two words") == '#SBATCH --comment="two words"'
    assert directive("exclusive") == "#SBATCH --exclusive"
    with pytest.raises(ValueError, match="line break"):
        directive("comment", "a\n#SBATCH --nodes=99")


def script(tmp_path, **kw) -> BatchScript:
    base = dict(
        job_id="slurm-abc123",
        attempt=1,
        experiment="pretrain_x",
        nodes=2,
        tasks_per_node=4,
        output=str(tmp_path / "sbatch_pretrain_x.out"),
        log=str(tmp_path / "log-pretrain_x.out"),
        job_dir=str(tmp_path / "job"),
        worker=("python3", "-m", "llmb.worker", str(tmp_path / "run.json")),
    )
    base.update(kw)
    return BatchScript(**base)


def test_the_script_has_the_layout_the_account_and_no_tracing(tmp_path):
    text = render(
        script(
            tmp_path,
            account="acct",
            partition="batch",
            time_limit="30",
            gpus_per_node="8",
            additional=(("nodelist", "node001,node002"), ("exclusive", None)),
            exclude=("node3",),
        )
    )
    for line in (
        "#SBATCH --job-name=pretrain_x",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=4",
        f"#SBATCH --output={tmp_path}/sbatch_%x.out",  # sbatch_<job name>.out, a filename pattern
        "#SBATCH --account=acct",
        "#SBATCH --partition=batch",
        "#SBATCH --time=30",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --nodelist=node001,node002",
        "#SBATCH --exclude=node3",
        "#SBATCH --no-requeue",
        "#SBATCH --exclusive",
    ):
        assert line in text.splitlines(), line
    assert "set -x" not in text and "set -o xtrace" not in text
    # MASTER_ADDR from the allocation
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in text
    assert "localhost" not in text


def test_container_mode_names_variables_for_pyxis_but_never_their_values(tmp_path):
    text = render(
        script(
            tmp_path,
            env={"NCCL_DEBUG": "INFO"},
            container=Container(
                "nvcr.io#nvidia/nemo:26.04.01",
                ("/lustre/llmb:/lustre/llmb",),
                ("HF_TOKEN", "PYTHONPATH"),
            ),
        )
    )
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    assert "--container-image=nvcr.io#nvidia/nemo:26.04.01" in srun
    assert "--container-mounts=/lustre/llmb:/lustre/llmb" in srun
    assert (
        "--container-env=HF_TOKEN,LLMB_JOB_ID,MASTER_ADDR,MASTER_PORT,NCCL_DEBUG,PYTHONPATH,PYTHONUNBUFFERED"
        in srun
    )
    assert "--no-container-mount-home" in srun and "--container-writable" in srun


HOSTILE = {
    "SPACES": "two words",
    "QUOTES": 'it\'s "quoted"',
    "DOLLAR": "$HOME and $(touch {canary}) and `touch {canary}`",
    "SEMI": "a; touch {canary}",
    "NEWLINE": "line1\nline2",
    "GLOB": "*",
}


def test_every_value_reaches_the_job_exactly_and_nothing_runs(tmp_path):
    """Run the script's export block in bash: each value arrives byte for byte, none executes."""
    canary = tmp_path / "canary"
    env = {k: v.format(canary=canary) for k, v in HOSTILE.items()}
    text = render(script(tmp_path, env=env))
    # the run's variables
    exports = text[text.index("export LLMB_JOB_ID=") : text.index('\necho "[llmb] job')]
    (tmp_path / "dump.py").write_text(
        "import json, os, sys\nprint(json.dumps({k: os.environ[k] for k in sys.argv[1:]}))\n"
    )
    dump = f"python3 {tmp_path}/dump.py {' '.join(sorted(env))}"
    result = subprocess.run(
        ["bash", "-c", exports + "\n" + dump],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == env
    assert not canary.exists()


def test_a_node_lost_under_a_step_is_an_infrastructure_failure_even_when_slurm_says_failed(
    tmp_path,
):
    """The batch script may exit before slurmctld records NODE_FAIL; srun's words at the log's end decide."""
    from llmb_backend_slurm.backend import node_failure, worker_started

    log = tmp_path / "log.out"
    # past the tail read
    training = "Step Time : 0.75s GPU utilization: 0.01MODEL_TFLOP/s/GPU\n" * 5000
    log.write_text(
        training
        + "slurmstepd-node1: error: *** STEP 1.0 ON node1 CANCELLED AT 2026-11-21T23:01:03 DUE TO "
        "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\nsrun: error: Node failure on node1\n"
        "srun: Job step aborted: Waiting up to 7 seconds for job step to finish.\n"
    )
    assert worker_started(str(log)) and node_failure(str(log)) == "node failure (reported by srun)"
    log.write_text(
        training
        + "Traceback (most recent call last):\nRuntimeError: Node failure on node1 (the model's own words)\n"
    )
    assert node_failure(str(log)) is None  # only srun's and slurmstepd's lines count
    assert node_failure(str(tmp_path / "missing.out")) is None
