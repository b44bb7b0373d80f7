"""``llmb run --backend slurm`` on a real Slurm (the private two-node cluster
of tests/private_slurm.py), bare mode, gloo: a 2 x 2-rank run end to end,
secrets, cancel, a raising rank, a time limit, a node going down under a job,
a refused submission, jobs Slurm has forgotten, an unanswering controller,
and 64 jobs tracked with a constant number of Slurm calls."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
from pathlib import Path

import pytest
from fault_plugin import ENV as FAULTS  # loads tests/fault_plugin.py in the ranks
from private_slurm import counting_shims
from waiting import wait_for

pytest.importorskip(
    "torch", reason="the torch engine needs torch (./dev.sh installs torch==2.13.0)"
)
pytestmark = pytest.mark.slurm

PROXY = ["llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--proxy", "tiny", "--bare"]


@pytest.fixture
def env(slurm, tmp_path):
    return {
        "LLMB_INSTALL": str(tmp_path / "install"),
        "LLMB_NO_CACHE": "1",
        "LLMB_BACKEND": "slurm",
        **slurm.env(),
    }


def run_json(llmb_proc, *args, env, timeout=600):
    result = llmb_proc(*args, "--json", env=env, timeout=timeout)
    assert result.out.strip(), result.err[-3000:]
    return result, json.loads(result.out)


def status(llmb_proc, job_id, env):
    return json.loads(llmb_proc("status", job_id, "--json", env=env).out)


def running_with_progress(llmb_proc, job_id, env):
    return wait_for(
        lambda: (
            (s := status(llmb_proc, job_id, env))["state"] == "RUNNING"
            and (s["progress"] or "").startswith("iteration")
            and s
        ),
        timeout=180,
        interval=0.5,
        what=f"{job_id} to train",
    )


def job_record(env, job_id) -> dict:
    return json.loads((Path(env["LLMB_INSTALL"]) / "jobs" / job_id / "job.json").read_text())


def slurm_id(env, job_id) -> str:
    return job_record(env, job_id)["details"]["attempts"][-1]["slurm_id"]


def worker_pids(run_json_path: str) -> list[int]:
    """Processes running ``llmb.worker`` for this job (the ranks, on this host's emulated nodes)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (
                argv[0].rsplit(b"/", 1)[-1].startswith(b"python")
                and b"llmb.worker" in argv
                and run_json_path.encode() in argv
            ):  # not srun, whose command line names them too
                found.append(int(entry.name))
    return found


def test_a_two_node_proxy_run_completes_and_its_result_is_shown(llmb_proc, env):
    # The seeds' GPUS_PER_NODE makes the 4 ranks 2 nodes x 2; SBATCH_GPUS_PER_NODE asks for gres. The
    # install's path holds a % (sbatch reads --output as a filename pattern: %j would be the job id).
    env = {**env, "LLMB_INSTALL": env["LLMB_INSTALL"] + "-at-100%j"}
    two_per_node = {**env, "GPUS_PER_NODE": "2", "SBATCH_GPUS_PER_NODE": "2"}
    result, summary = run_json(
        llmb_proc,
        "run",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        "4",
        "--proxy",
        "tiny",
        "--backend",
        "slurm",
        "--bare",
        env=two_per_node,
    )
    assert result.code == 0 and summary["state"] == "SUCCEEDED", result.err[-3000:]
    row = summary["result"]
    assert (row["status"], row["window"], row["samples_in_window"], row["gpus"]) == (
        "success",
        "35-44",
        10,
        4,
    )
    assert row["proxy"] is True and row["tokens_per_s"] > 0
    log = Path(summary["log"]).read_text()
    # the allocation's first host
    assert "Slurm job" in log and "on node[1-2], MASTER_ADDR=127.0.0.1 (node1)" in log
    assert "4 rank(s) on cpu" in log
    run_dir = Path(summary["experiment_dir"])
    script = next(run_dir.glob("sbatch_*.sh")).read_text()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --ntasks-per-node=2" in script
    assert "#SBATCH --gpus-per-node=2" in script  # gres, accepted by the real Slurm
    assert (
        "-at-100%%j/" in script and "/sbatch_%x.out\n" in script
    )  # what sbatch expands to the file
    inner = run_dir / run_dir.name.rsplit("_", 1)[0]
    assert (inner / f"sbatch_{inner.name}.out").exists() and (
        inner / f"log-{inner.name}.out"
    ).exists()
    recipe = json.loads((run_dir / "recipe.json").read_text())
    # decided on the nodes
    assert (recipe["device"], recipe["compute_dtype"], recipe["nodes"]) == ("cpu", "float32", 2)
    ended = json.loads(
        (Path(env["LLMB_INSTALL"]) / "jobs" / summary["job_id"] / "exit.json").read_text()
    )
    assert (ended["slurm_state"], ended["nodes"]) == ("COMPLETED", "node[1-2]")
    shown = llmb_proc("results", str(run_dir), "--json", env=env)
    assert json.loads(shown.out)[0]["time_mean_ms"] == row["time_mean_ms"]


def test_secrets_reach_the_ranks_but_no_file_and_cancel_stops_the_job(llmb_proc, env, tmp_path):
    marker, other = f"hf_{secrets.token_hex(16)}", f"sk_{secrets.token_hex(16)}"
    with_secrets = {**env, "HF_TOKEN": marker, "LLMB_TEST_SECRET": other}
    _, started = run_json(
        llmb_proc,
        "run",
        *PROXY,
        "--gpus",
        "2",
        "--steps",
        "400",
        "--secret",
        "LLMB_TEST_SECRET",
        "--detach",
        env=with_secrets,
    )
    job = started["job_id"]
    running_with_progress(llmb_proc, job, env)
    run_file = str(Path(env["LLMB_INSTALL"]) / "jobs" / job / "run.json")
    pids = worker_pids(run_file)
    assert len(pids) == 2
    for pid in pids:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert (
            f"HF_TOKEN={marker}".encode() in environ
            and f"LLMB_TEST_SECRET={other}".encode() in environ
        )

    cancelled = json.loads(llmb_proc("cancel", job, "--json", env=env).out)
    assert cancelled == {"job_id": job, "state": "CANCELLED", "reason": "cancelled", "ended": True}
    wait_for(lambda: not worker_pids(run_file), timeout=30, what="the ranks to stop")
    assert status(llmb_proc, job, env)["state"] == "CANCELLED"

    written = [p for p in Path(env["LLMB_INSTALL"]).rglob("*") if p.is_file()]
    assert len(written) > 5
    for path in written:
        data = path.read_bytes()
        assert marker.encode() not in data and other.encode() not in data, path


def test_a_rank_that_raises_fails_the_job_with_the_reason_from_its_log(llmb_proc, env):
    result, summary = run_json(
        llmb_proc,
        "run",
        *PROXY,
        "--gpus",
        "2",
        "--steps",
        "3",
        "--no-window-check",
        "--env",
        "LLMB_FAIL_AT_STEP=2:1",
        env={**env, **FAULTS},
    )
    assert result.code == 1
    assert summary["state"] == "FAILED"
    assert (
        summary["reason"]
        == "python exception: RuntimeError: injected failure at step 2 on rank 1 (LLMB_FAIL_AT_STEP)"
    )


def test_a_job_past_its_time_limit_ends_timeout(llmb_proc, env):
    _, started = run_json(
        llmb_proc,
        "run",
        *PROXY,
        "--gpus",
        "2",
        "--steps",
        "100000",
        "--time-limit",
        "1",
        "--detach",
        env=env,
    )
    final = wait_for(
        lambda: (
            (s := status(llmb_proc, started["job_id"], env))["state"] not in ("QUEUED", "RUNNING")
            and s
        ),
        timeout=240,
        interval=2,
        what="the time limit",
    )
    assert (final["state"], final["reason"]) == ("TIMEOUT", "time limit reached (1)")


def test_a_node_going_down_under_a_job_leads_to_a_retry_that_completes_elsewhere(
    llmb_proc, env, slurm
):
    _, started = run_json(
        llmb_proc,
        "run",
        *PROXY,
        "--gpus",
        "2",
        "--gpus-per-node",
        "2",
        "--retries",
        "1",
        "--detach",
        env=env,
    )
    job = started["job_id"]
    running_with_progress(llmb_proc, job, env)
    first = slurm_id(env, job)
    node = subprocess.run(
        ["squeue", "-h", "-j", first, "-o", "%N"],
        capture_output=True,
        text=True,
        env={**os.environ, **slurm.env()},
    ).stdout.strip()
    assert node in ("node1", "node2")
    try:
        slurm.scontrol("update", f"nodename={node}", "state=down", "reason=llmb-test")
        final = wait_for(
            lambda: (
                (s := status(llmb_proc, job, env))["state"]
                in ("SUCCEEDED", "FAILED", "INFRA_FAILED")
                and s
            ),
            timeout=300,
            interval=1,
            what="the retry to finish",
        )
    finally:
        slurm.resume(node)
    assert final["state"] == "SUCCEEDED", final
    record = job_record(env, job)
    assert record["attempts"] == 2
    first_attempt, second_attempt = record["details"]["attempts"]
    assert second_attempt["exclude"] == [node]
    ended = json.loads((Path(env["LLMB_INSTALL"]) / "jobs" / job / "exit.json").read_text())
    assert ended["nodes"] not in ("", node)  # completed on the other node
    # the failed attempt's files are kept
    assert first_attempt["run_dir"] != second_attempt["run_dir"]
    assert (
        "NODE_FAIL" in Path(first_attempt["log"]).read_text()
        and Path(first_attempt["log"]).exists()
    )


def test_a_launch_that_never_starts_is_retried_then_reported_as_infrastructure(llmb_proc, env):
    # srun cannot start the worker
    broken = {**env, "LLMB_SLURM_PYTHON": "/nonexistent/bin/python3"}
    result, summary = run_json(
        llmb_proc, "run", *PROXY, "--gpus", "1", "--retries", "1", env=broken
    )
    assert result.code == 1
    assert summary["state"] == "INFRA_FAILED" and summary["attempts"] == 2
    assert (
        summary["reason"].startswith("the launch never started the worker on node")
        and "(after 1 retry)" in summary["reason"]
    )


def test_container_mode_needs_the_worker_library_and_says_when_pyxis_is_missing(llmb_proc, env):
    # Full size: the production engine (Megatron-Bridge) in NeMo's container; 2 nodes x 4 tasks fit this cluster.
    args = [
        "run",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        "8",
        "--gpus-per-node",
        "4",
        "--backend",
        "slurm",
    ]
    first = llmb_proc(*args, "--detach", env=env)
    assert first.code == 2 and "run llmb install first, or use --bare" in first.err
    assert llmb_proc("install", "--no-images", "--no-huggingface", env=env).code == 0
    result, summary = run_json(llmb_proc, *args, env=env)
    script = next(Path(summary["experiment_dir"]).glob("sbatch_*.sh")).read_text()
    install = env["LLMB_INSTALL"]
    srun = next(line for line in script.splitlines() if line.startswith("srun "))
    assert (
        "--container-image=nvcr.io#nvidia/nemo:25.11.01" in srun
        and f"--container-mounts={install}:{install}" in srun
    )
    assert "python3 -m llmb.worker" in srun and f"export PYTHONPATH={install}/python" in script
    run = json.loads((Path(install) / "jobs" / summary["job_id"] / "run.json").read_text())
    assert (
        run["engine"] == "megatron_bridge"
        and run["framework_config"]["training"]["train_iters"] == 50
    )
    # This cluster has no pyxis: srun refuses --container-image, and llmb says the launch never started.
    assert result.code == 1 and summary["state"] == "INFRA_FAILED"
    assert summary["reason"].startswith("the launch never started the worker")
    assert "unrecognized option '--container-image" in Path(summary["log"]).read_text()


def test_a_refused_submission_exits_2_with_slurms_reason(llmb_proc, env):
    result = llmb_proc("run", *PROXY, "--gpus", "2", "--partition", "nosuch", "--detach", env=env)
    assert result.code == 2 and "Traceback" not in result.err
    assert "Slurm refused the job: invalid partition specified: nosuch" in result.err
    # no half-made job left behind
    assert json.loads(llmb_proc("status", "--json", env=env).out) == []


def show_job(slurm, sid: str) -> dict[str, str]:
    """``scontrol show job``'s fields of one job."""
    shown = subprocess.run(
        ["scontrol", "show", "job", "--oneliner", sid],
        capture_output=True,
        text=True,
        env={**os.environ, **slurm.env()},
        check=True,
    ).stdout
    return dict(re.findall(r"(\S+?)=(\S*)", shown))


def test_abbreviated_sbatch_options_are_refused_and_what_passes_is_the_option_named_whole(
    llmb_proc, env, slurm, tmp_path
):
    for item, said in (
        ("outpu=/tmp/elsewhere.out", "is sbatch's --output"),
        ("job-nam=other", "is sbatch's --job-name"),
        ("ntasks-per-no=8", "is sbatch's --ntasks-per-node"),
        ("tasks-per-node=8", "is sbatch's --ntasks-per-node"),
        # issue 41: any other abbreviation, and the options that break llmb's bookkeeping
        (
            "partit=other",
            "abbreviates sbatch's --partition: give an option's whole name (partition)",
        ),
        ("a=1", "abbreviates several sbatch options (--account, --acctg-freq, --array)"),
        ("array=0-1", "is sbatch's --array"),
        ("oversubscribe", "is sbatch's --oversubscribe"),
    ):
        refused = llmb_proc(
            "run", *PROXY, "--gpus", "1", "--detach", env={**env, "ADDITIONAL_SLURM_PARAMS": item}
        )
        assert refused.code == 2 and "Traceback" not in refused.err, refused.err
        assert f"item {item.split('=')[0]!r} {said}" in refused.err
    # nothing submitted, no job left
    assert json.loads(llmb_proc("status", "--json", env=env).out) == []
    # Why: the real sbatch obeys such spellings.
    obeyed = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--hold",
            f"--outpu={tmp_path}/x.out",
            "--tasks-per-node=3",
            "--wrap=true",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **slurm.env()},
    )
    assert obeyed.returncode == 0, obeyed.stderr
    fields = show_job(slurm, obeyed.stdout.strip())
    subprocess.run(
        ["scancel", obeyed.stdout.strip()], env={**os.environ, **slurm.env()}, check=True
    )
    assert fields["StdOut"] == f"{tmp_path}/x.out" and fields["NtasksPerN:B:S:C"].startswith("3:")

    # Other options named whole pass, and are those options: llmb's own settings stand.
    _, started = run_json(
        llmb_proc,
        "run",
        *PROXY,
        "--gpus",
        "1",
        "--detach",
        env={**env, "ADDITIONAL_SLURM_PARAMS": "hold;partition=other;mail-type=NONE"},
    )
    job = started["job_id"]
    fields = show_job(slurm, slurm_id(env, job))
    script = next(Path(started["experiment_dir"]).glob("sbatch_*.sh")).read_text().splitlines()
    assert {"#SBATCH --hold", "#SBATCH --partition=other", "#SBATCH --mail-type=NONE"} <= set(
        script
    )
    assert (fields["JobState"], fields["Reason"], fields["Partition"]) == (
        "PENDING",
        "JobHeldUser",
        "other",
    )
    assert (
        fields["JobName"] == job_record(env, job)["experiment"]
        and fields["NumNodes"].split("-")[0] == "1"
    )
    # the output is a filename pattern: the real Slurm expands it to the file llmb reads (%x, the job name)
    output = next(line for line in script if line.startswith("#SBATCH --output="))
    pattern = output.split("=", 1)[1]
    assert pattern.endswith("/sbatch_%x.out"), pattern
    assert pattern.replace("%x", fields["JobName"]).replace("%%", "%") == fields["StdOut"]
    assert fields["Comment"] == f"llmb:{job}:1"
    assert json.loads(llmb_proc("cancel", job, "--json", env=env).out)["state"] == "CANCELLED"


def test_a_job_slurm_has_forgotten_is_decided_by_its_exit_marker(llmb_proc, env, slurm):
    _, started = run_json(
        llmb_proc,
        "run",
        *PROXY,
        "--gpus",
        "1",
        "--steps",
        "2",
        "--no-window-check",
        "--detach",
        env=env,
    )
    job, sid = started["job_id"], slurm_id(env, started["job_id"])
    marker = Path(env["LLMB_INSTALL"]) / "jobs" / job / "attempt-1.exit"
    wait_for(marker.exists, what="the job to end")
    wait_for(
        lambda: (
            not subprocess.run(
                ["squeue", "-h", "-t", "all", "-j", sid],
                capture_output=True,
                text=True,
                env={**os.environ, **slurm.env()},
            ).stdout.strip()
        ),
        timeout=120,
        interval=1,
        what="Slurm to forget the job (MinJobAge)",
    )
    final = status(llmb_proc, job, env)  # no squeue row, no accounting: the marker decides
    # 2 steps, no window
    assert final["state"] == "SUCCEEDED" and final["result"]["status"] == "too_short"
    ended = json.loads((Path(env["LLMB_INSTALL"]) / "jobs" / job / "exit.json").read_text())
    assert ended["slurm_state"] == "COMPLETED"


def test_an_unanswering_controller_leaves_the_job_alone(llmb_proc, env, slurm, tmp_path):
    _, started = run_json(
        llmb_proc, "run", *PROXY, "--gpus", "1", "--steps", "400", "--detach", env=env
    )
    job = started["job_id"]
    running_with_progress(llmb_proc, job, env)
    broken = tmp_path / "broken.conf"
    broken.write_text(
        "\n".join(
            "SlurmctldPort=1" if line.startswith("SlurmctldPort=") else line
            for line in Path(slurm.env()["SLURM_CONF"]).read_text().splitlines()
        )
    )
    lost = status(llmb_proc, job, {**env, "SLURM_CONF": str(broken), "LLMB_SLURM_TIMEOUT": "3"})
    assert (
        lost["state"] == "UNKNOWN"
        and "did not answer within 3 s; the job is left alone" in lost["reason"]
    )
    assert status(llmb_proc, job, env)["state"] == "RUNNING"
    assert json.loads(llmb_proc("cancel", job, "--json", env=env).out)["state"] == "CANCELLED"


# Jobs held in the queue to count the Slurm calls of: enough that a call a job would show (each costs a
# submission, 2 s of this machine's CPU: 64 took CI two minutes).
MANY_JOBS = 24


def test_many_jobs_are_tracked_with_a_constant_number_of_slurm_calls(llmb_proc, env, tmp_path):
    calls = counting_shims(tmp_path / "shims")
    counted = {
        **env,
        "PATH": f"{calls.parent}:{os.environ['PATH']}",
        "ADDITIONAL_SLURM_PARAMS": "hold",
    }
    ids = []
    for _ in range(MANY_JOBS):  # held: queued, never started, so they cost this machine nothing
        ids.append(
            run_json(llmb_proc, "run", *PROXY, "--gpus", "1", "--detach", env=counted)[1]["job_id"]
        )
    assert calls.read_text().split().count("sbatch") == MANY_JOBS

    def poll_calls(*args) -> list[str]:
        calls.write_text("")
        shown = json.loads(llmb_proc("status", *args, "--json", env=counted).out)
        return shown, calls.read_text().split()

    one, one_calls = poll_calls(ids[0])
    assert one["state"] == "QUEUED" and "JobHeldUser" in one["reason"]
    listed, all_calls = poll_calls("--all")
    assert len(listed) == MANY_JOBS and {j["state"] for j in listed} == {"QUEUED"}
    assert one_calls == all_calls == ["squeue"]  # one batched query, for 1 job or all of them
    subprocess.run(["scancel", *(slurm_id(env, i) for i in ids)], check=True, env=counted)
    ended, end_calls = poll_calls("--all")
    assert {j["state"] for j in ended} == {"CANCELLED"} and end_calls == ["squeue"]
    _, after = poll_calls("--all")
    assert after == []  # ended jobs cost no Slurm call any more


@pytest.fixture
def acct_env(slurm_accounting, tmp_path):
    return {
        "LLMB_INSTALL": str(tmp_path / "install"),
        "LLMB_NO_CACHE": "1",
        "LLMB_BACKEND": "slurm",
        **slurm_accounting.env(),
    }


def test_finished_jobs_come_from_sacct_once_squeue_forgets_them(
    llmb_proc, acct_env, slurm_accounting, tmp_path
):
    _, started = run_json(
        llmb_proc,
        "run",
        *PROXY,
        "--gpus",
        "2",
        "--steps",
        "3",
        "--no-window-check",
        "--account",
        "bench",
        "--env",
        "LLMB_FAIL_AT_STEP=2:1",
        "--detach",
        env={**acct_env, **FAULTS},
    )
    job, sid = started["job_id"], slurm_id(acct_env, started["job_id"])
    directory = Path(acct_env["LLMB_INSTALL"]) / "jobs" / job
    wait_for((directory / "attempt-1.exit").exists, what="the job to end")
    for marker in directory.glob("attempt-*"):
        marker.unlink()  # the markers cannot decide: accounting must
    wait_for(
        lambda: (
            not subprocess.run(
                ["squeue", "-h", "-t", "all", "-j", sid],
                capture_output=True,
                text=True,
                env={**os.environ, **slurm_accounting.env()},
            ).stdout.strip()
        ),
        timeout=120,
        interval=1,
        what="Slurm to forget the job (MinJobAge)",
    )
    calls = counting_shims(tmp_path / "shims")
    final = status(llmb_proc, job, {**acct_env, "PATH": f"{calls.parent}:{os.environ['PATH']}"})
    assert calls.read_text().split() == ["squeue", "sacct"]
    assert final["state"] == "FAILED"
    assert (
        final["reason"]
        == "python exception: RuntimeError: injected failure at step 2 on rank 1 (LLMB_FAIL_AT_STEP)"
    )
    ended = json.loads((directory / "exit.json").read_text())
    assert (ended["slurm_state"], ended["nodes"]) == ("FAILED", "node1")


def test_a_flag_wins_over_the_sbatch_variable_sbatch_itself_would_prefer(llmb_proc, acct_env):
    """sbatch lets SBATCH_ACCOUNT override the script's #SBATCH --account; llmb
    renders the flag and keeps the variable away from sbatch, so the flag wins."""
    result = llmb_proc(
        "run",
        *PROXY,
        "--gpus",
        "1",
        "--steps",
        "3",
        "--no-window-check",
        "--account",
        "bench",
        "--detach",
        "--json",
        env={**acct_env, "SBATCH_ACCOUNT": "nosuch"},
    )
    assert result.code == 0, result.err
    job = json.loads(result.out)["job_id"]
    llmb_proc("cancel", job, env=acct_env)


def test_an_unknown_account_is_refused_with_slurms_reason(llmb_proc, acct_env):
    result = llmb_proc(
        "run", *PROXY, "--gpus", "1", "--account", "nosuch", "--detach", env=acct_env
    )
    assert result.code == 2 and "Traceback" not in result.err
    assert (
        "Slurm refused the job: Batch job submission failed: Invalid account or account/partition combination"
        in result.err
    )
