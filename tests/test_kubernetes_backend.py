"""``llmb ... --backend kubernetes`` against kmock's Kubernetes API emulator on 127.0.0.1
(tests/kube_emulator.py) with the official ``kubernetes`` client, the tests playing the JobSet
controller, the kubelet and Kueue: discovery (and the refusal when JobSet's CRD is absent), the
JobSet llmb writes (validated against the JobSet CRD's published schema, tests/data/jobset), every
state and the reason llmb gives for it, cancel, the log landing in the experiment directory (on the
volume, or copied from the leader pod), results reading it, and the faults: the server down or
slow, 401, 403, 409, a lost answer to the POST, a log read dropped mid-run, a pod evicted mid-run."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import kmock
import loggen
import pytest
import yaml
from kube_emulator import JOBSETS, TOKEN, KubeEmulator
from waiting import wait_for

SCHEMA_FILE = Path(__file__).parent / "data" / "jobset" / "jobset-v1alpha2-schema.json"
HF = "hf_secret_token_5d4c3b2a19"
NS = "llmb-bench"
# the condition JobSet's controller sets when a job of it fails
JOBSET_FAILED = {
    "type": "Failed",
    "status": "True",
    "reason": "FailedJobs",
    "message": "jobset failed due to one or more job failures",
}
ACCEPTANCE = ["llama31", "--size", "8b", "--gpu", "b200", "--dtype", "fp8", "--gpus", "16"]
KUBE = ["--backend", "kubernetes"]


def closed(schema):
    """The schema as the API server applies it under strict field validation: an object that lists
    its properties takes no other (unless it preserves unknown fields)."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) for k, v in schema.items()}
    if (
        isinstance(schema.get("properties"), dict)
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


VALIDATOR = jsonschema.Draft7Validator(closed(json.loads(SCHEMA_FILE.read_text())))


def assert_valid_jobset(manifest: dict) -> None:
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in VALIDATOR.iter_errors(manifest)
    ]
    assert not errors, errors
    assert (manifest["apiVersion"], manifest["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    name = manifest["metadata"]["name"]
    (rjob,) = manifest["spec"]["replicatedJobs"]
    pods = rjob["template"]["spec"]["completions"]
    # JobSet's webhook: the longest pod name, <jobset>-<rjob>-<job>-<pod>-xxxxx, is a DNS-1035 label
    longest = f"{name}-{rjob['name']}-{rjob['replicas'] - 1}-{pods - 1}-abcde"
    assert len(longest) <= 63 and longest[0].isalpha(), longest


@pytest.fixture
def emu():
    with KubeEmulator(kueue=True) as server:
        yield server


def cluster_file(install: Path, **kubernetes) -> None:
    install.mkdir(parents=True, exist_ok=True)
    section = {"volume": f"hostPath:{install}", **kubernetes}
    (install / "cluster.yaml").write_text(
        yaml.safe_dump({"env": {"NCCL_IB_HCA": "mlx5"}, "kubernetes": section})
    )


def kube_env(emu: KubeEmulator, tmp_path: Path, **kubernetes) -> dict:
    install = tmp_path / "install"
    cluster_file(install, **kubernetes)
    return {
        "LLMB_INSTALL": str(install),
        "LLMB_NO_CACHE": "1",
        "KUBECONFIG": str(emu.kubeconfig(tmp_path / "kubeconfig")),
        "LLMB_KUBE_ALLOW_HTTP": "1",  # the emulator serves plain http on 127.0.0.1
        "LLMB_KUBE_REQUEST_TIMEOUT": "10",
        "HOME": str(tmp_path),
    }


@pytest.fixture
def env(emu, tmp_path):
    return kube_env(emu, tmp_path)


def assert_secret_nowhere(env: dict, *outputs: str) -> None:
    for text in outputs:
        assert TOKEN not in text and HF not in text
    for path in Path(env["LLMB_INSTALL"]).rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert TOKEN.encode() not in data and HF.encode() not in data, path


def submit(llmb_proc, env, *extra) -> str:
    result = llmb_proc("run", *ACCEPTANCE, *KUBE, "--detach", "--json", *extra, env=env)
    assert result.code == 0, result.err
    return json.loads(result.out)["job_id"]


def status(llmb_proc, env, job) -> tuple[str, str | None]:
    result = llmb_proc("status", job, "--json", env=env)
    assert result.code in (0, 1), result.err
    found = json.loads(result.out)
    return found["state"], found["reason"]


def once(emu, times: int = 1):
    """A kmock filter that matches the next ``times`` requests of its view only (then the emulator's
    own answer again); kmock asks it of earlier requests too, which it never picks."""
    chosen: list[int] = []
    floor = max((r.id for r in list(emu.k)), default=-1)

    def pick(request) -> bool:
        if request.id > floor and request.id not in chosen and len(chosen) < times:
            chosen.append(request.id)
        return request.id in chosen

    return pick


def log_lines() -> list[str]:
    """50 iterations of Megatron-Bridge's log at a plausible B200 speed for the run (3 s a step)."""
    return list(
        loggen.megatron_bridge_lines(
            range(1, 51),
            step_ms=dict.fromkeys(range(51), 3000.0),
            tflops=dict.fromkeys(range(51), 2249.0),
            gbs=256,
        )
    )


def unpacked_spec(script: str) -> dict:
    import base64
    import zlib

    packed = next(line for line in script.splitlines() if line.startswith("printf %s ")).split()[2]
    return json.loads(zlib.decompress(base64.b64decode(packed)))


def only_jobset(emu) -> dict:
    (jobset,) = emu.jobsets(NS)
    return jobset


# ---------------------------------------------------------------- the manifest


def test_the_acceptance_dry_run_prints_a_jobset_that_validates_against_the_schema(
    llmb_proc, emu, tmp_path
):
    env = kube_env(
        emu,
        tmp_path,
        queue="team-a",
        priority_class="benchmark",
        image_pull_secret="ngc-pull",
        secret="llmb-secrets",
        rdma={"nvidia.com/hostdev": 8},
    )
    env["HF_TOKEN"] = HF
    result = llmb_proc("run", *ACCEPTANCE, *KUBE, "--dry-run", "--json", env=env)
    assert result.code == 0, result.err
    manifest = json.loads(result.out)["manifest"]
    assert_valid_jobset(manifest)
    # the printed form is the same object, as YAML kubectl takes
    text = llmb_proc("run", *ACCEPTANCE, *KUBE, "--dry-run", env=env)
    printed = yaml.safe_load(text.out[text.out.index("apiVersion:") :])
    printed["metadata"]["name"] = manifest["metadata"]["name"]  # a fresh name each submission
    assert_valid_jobset(printed)

    name = manifest["metadata"]["name"]
    (rjob,) = manifest["spec"]["replicatedJobs"]
    job = rjob["template"]["spec"]
    pod = job["template"]["spec"]
    (container,) = pod["containers"]
    # 16 GPUs: 2 pods of 8
    assert (rjob["replicas"], job["parallelism"], job["completions"], job["completionMode"]) == (
        1,
        2,
        2,
        "Indexed",
    )
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8", "nvidia.com/hostdev": "8"}
    assert container["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert (job["backoffLimit"], pod["restartPolicy"], manifest["spec"]["failurePolicy"]) == (
        0,
        "Never",
        {"maxRestarts": 0},
    )
    assert manifest["spec"]["network"]["enableDNSHostnames"] is True
    assert manifest["metadata"]["namespace"] == NS  # the context's
    assert manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert manifest["spec"]["suspend"] is True  # Kueue admits it
    assert (
        pod["imagePullSecrets"] == [{"name": "ngc-pull"}]
        and pod["priorityClassName"] == "benchmark"
    )
    assert container["image"] == "nvcr.io/nvidia/nemo:25.11.01"
    script = container["command"][2]
    assert f"--master_addr={name}-node-0-0.{name} " in script  # the leader's stable DNS name
    assert '--nnodes=2 --node_rank="${JOB_COMPLETION_INDEX}" --nproc_per_node=8' in script
    install = env["LLMB_INSTALL"]
    assert {"name": "llmb-install", "hostPath": {"path": install, "type": "Directory"}} in pod[
        "volumes"
    ]
    assert {"name": "llmb-install", "mountPath": install} in container["volumeMounts"]
    # the ranks' environment: the Slurm backend's (the reference launcher's), the cluster file's
    from llmb_backend_slurm import launch_settings

    variables = {v["name"]: v for v in container["env"]}
    reference = launch_settings.rank_env("b200", True)
    assert reference and set(reference) <= set(
        variables
    )  # each, or the run's own value (as on Slurm)
    assert variables["TOKENIZERS_PARALLELISM"]["value"] == reference["TOKENIZERS_PARALLELISM"]
    assert variables["NCCL_IB_HCA"]["value"] == "mlx5"
    assert variables["HF_TOKEN"] == {
        "name": "HF_TOKEN",
        "valueFrom": {
            "secretKeyRef": {"name": "llmb-secrets", "key": "HF_TOKEN", "optional": True}
        },
    }
    # nothing sent, nothing written, no secret shown
    assert not emu.requests() and not (Path(install) / "jobs").exists()
    assert_secret_nowhere(env, result.out, result.err, text.out, text.err)

    # another context, and a wrong one
    other = llmb_proc(
        "run", *ACCEPTANCE, *KUBE, "--dry-run", "--json", "--backend-opt", "context=other", env=env
    )
    assert json.loads(other.out)["manifest"]["metadata"]["namespace"] == "other-ns"
    flag = llmb_proc(
        "run", *ACCEPTANCE, *KUBE, "--dry-run", "--json", "--context", "other", env=env
    )
    assert json.loads(flag.out)["manifest"]["metadata"]["namespace"] == "other-ns"  # kubectl's flag
    elsewhere = llmb_proc("run", *ACCEPTANCE, "--backend", "slurm", "--context", "other", env=env)
    assert elsewhere.code == 2 and "only --backend kubernetes uses" in elsewhere.err
    both = [*KUBE, "--context", "other", "--backend-opt", "context=other"]
    twice = llmb_proc("run", *ACCEPTANCE, *both, "--dry-run", env=env)
    assert twice.code == 2 and "give one" in twice.err
    wrong = llmb_proc(
        "run", *ACCEPTANCE, *KUBE, "--detach", "--backend-opt", "context=nosuch", env=env
    )
    assert wrong.code == 2 and "has no context 'nosuch'; its contexts: emulator, other" in wrong.err
    assert "Traceback" not in wrong.err


def test_the_schema_check_is_strict_and_bad_names_are_refused_before_anything_is_sent(
    llmb_proc, emu, env
):
    manifest = json.loads(llmb_proc("run", *ACCEPTANCE, *KUBE, "--dry-run", "--json", env=env).out)[
        "manifest"
    ]
    manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
        "gpus"
    ] = 8
    assert any(
        "gpus" in e.message for e in VALIDATOR.iter_errors(manifest)
    )  # a field JobSet has not
    bad = llmb_proc("run", *ACCEPTANCE, *KUBE, "--detach", "--backend-opt", "queue=Team_A", env=env)
    assert (
        bad.code == 2
        and "--backend-opt queue 'Team_A': expected a Kubernetes name (RFC 1123" in bad.err
    )
    env_secret = {**env, "WANDB_API_KEY": "x"}
    refused = llmb_proc(
        "run", *ACCEPTANCE, *KUBE, "--detach", "--secret", "WANDB_API_KEY", env=env_secret
    )
    assert refused.code == 2 and "only by reference to a Kubernetes Secret" in refused.err
    assert not emu.requests("POST")


# ---------------------------------------------------------------- discovery


def test_llmb_refuses_when_the_jobset_crd_is_absent_though_the_emulator_would_accept_one(
    llmb_proc, tmp_path
):
    with KubeEmulator(jobset=False) as bare:
        env = kube_env(bare, tmp_path)
        result = llmb_proc("run", *ACCEPTANCE, *KUBE, "--detach", env=env)
        assert result.code == 2, result.err
        assert "serves no JobSet resource (jobsets.jobset.x-k8s.io v1alpha2)" in result.err
        assert "install the JobSet controller" in result.err and "Traceback" not in result.err
        assert not bare.requests("POST")
        assert (
            json.loads(llmb_proc("status", "--json", env=env).out) == []
        )  # nothing half-made left
        # kmock itself takes a JobSet that no CRD defines: the check is llmb's
        code, _ = bare.call(
            "POST", f"{JOBSETS}/namespaces/{NS}/jobsets", {"metadata": {"name": "x"}}
        )
        assert code == 200


def test_a_queue_needs_kueue_and_its_local_queue(llmb_proc, tmp_path):
    with KubeEmulator(kueue=False) as no_kueue:
        env = kube_env(no_kueue, tmp_path, queue="team-a")
        result = llmb_proc("run", *ACCEPTANCE, *KUBE, "--detach", env=env)
        assert (
            result.code == 2
            and "serves no Kueue LocalQueue (kueue.x-k8s.io): install Kueue" in result.err
        )
    with KubeEmulator(kueue=True) as with_kueue:
        env = kube_env(with_kueue, tmp_path, queue="team-a")
        with_kueue.call(
            "POST",
            f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{NS}/localqueues",
            {"metadata": {"name": "team-b", "namespace": NS}},
        )
        result = llmb_proc("run", *ACCEPTANCE, *KUBE, "--detach", env=env)
        assert (
            result.code == 2
            and f"no LocalQueue 'team-a' in namespace {NS}; its LocalQueues there: team-b"
            in result.err
        )
        assert not with_kueue.requests("POST", "/jobsets")


# ---------------------------------------------------------------- a run's life


def test_a_queued_run_is_admitted_followed_to_success_and_results_read_its_log(
    llmb_proc, emu, tmp_path
):
    env = kube_env(emu, tmp_path, queue="team-a")
    emu.call(
        "POST",
        f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{NS}/localqueues",
        {"metadata": {"name": "team-a", "namespace": NS}},
    )
    from conftest import _llmb_executable

    proc = subprocess.Popen(
        [_llmb_executable(), "run", *ACCEPTANCE, *KUBE, "--json"],
        env={
            **{k: v for k, v in __import__("os").environ.items() if not k.startswith("LLMB_")},
            **env,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        jobset = wait_for(lambda: emu.jobsets(NS) and emu.jobsets(NS)[0], 20, 0.05, "the JobSet")
        (sent,) = [r for r in emu.requests("POST", "/jobsets")]
        assert_valid_jobset(sent.data)  # what llmb sent, as sent
        assert sent.params.get("fieldValidation") == "Strict"
        name = jobset["metadata"]["name"]
        assert jobset["spec"]["suspend"] is True
        time.sleep(1.0)  # Kueue holds it a while: llmb says so
        emu.suspend(NS, name, False)  # admitted
        pods = emu.add_pods(NS, name, 2)
        unschedulable = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
        }
        emu.pod_status(NS, pods[1], {"phase": "Pending", "conditions": [unschedulable]})
        time.sleep(1.0)
        for index, pod in enumerate(pods):
            emu.pod_status(NS, pod, {"phase": "Running"}, node=f"gpu-node-{index}")
        log = wait_for(
            lambda: list(Path(env["LLMB_INSTALL"]).rglob("log-*.out")), 20, 0.05, "the log"
        )[0]
        with open(log, "a") as handle:  # what the pods append on the volume
            for line in log_lines():
                handle.write(line + "\n")
        time.sleep(1.0)
        for pod in pods:
            emu.pod_status(NS, pod, {"phase": "Succeeded"})
        emu.jobset_status(
            NS,
            name,
            conditions=[{"type": "Completed", "status": "True", "reason": "AllJobsCompleted"}],
        )
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    summary = json.loads(out)
    assert summary["state"] == "SUCCEEDED", err
    assert f"{summary['job_id']}: waiting for Kueue to admit it (queue team-a)" in err
    assert summary["result"]["status"] == "success" and summary["result"]["samples_in_window"] > 0
    results = llmb_proc("results", "--json", env=env)
    (row,) = [r for r in json.loads(results.out) if r.get("job_id") == summary["job_id"]]
    assert row["status"] == "success"
    assert_secret_nowhere(env, out, err, results.out)


def test_pending_running_and_each_failure_is_named(llmb_proc, emu, env):
    job = submit(llmb_proc, env)
    name = only_jobset(emu)["metadata"]["name"]
    assert status(llmb_proc, env, job) == ("QUEUED", "waiting for the JobSet's pods to be created")
    pods = emu.add_pods(NS, name, 2)
    emu.pod_status(
        NS,
        pods[0],
        {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
                }
            ],
        },
    )
    assert status(llmb_proc, env, job) == (
        "QUEUED",
        f"pod {pods[0]} is not scheduled: Unschedulable: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
    )
    for pod in pods:
        emu.pod_status(NS, pod, {"phase": "Running"}, node="gpu-node-1")
    assert status(llmb_proc, env, job) == ("RUNNING", None)
    emu.pod_status(
        NS,
        pods[1],
        {
            "phase": "Failed",
            "containerStatuses": [
                {"name": "llmb", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
            ],
        },
    )
    emu.jobset_status(NS, name, conditions=[JOBSET_FAILED])
    state, reason = status(llmb_proc, env, job)
    assert state == "FAILED"
    assert (
        f"pod {pods[1]} on node gpu-node-1: container llmb was killed for running out of memory (OOMKilled)"
        in reason
    )


@pytest.mark.parametrize("fault", ["evicted", "node lost", "image"])
def test_a_pod_evicted_its_node_lost_or_its_image_unpullable_fails_the_run_and_says_so(
    llmb_proc, emu, env, fault
):
    job = submit(llmb_proc, env)
    name = only_jobset(emu)["metadata"]["name"]
    pods = emu.add_pods(NS, name, 2, phase="Running")
    if fault == "image":
        emu.pod_status(
            NS,
            pods[0],
            {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "name": "llmb",
                        "image": "nvcr.io/nvidia/nemo:25.11.01",
                        "state": {
                            "waiting": {
                                "reason": "ImagePullBackOff",
                                "message": 'Back-off pulling image "nvcr.io/nvidia/nemo:25.11.01"',
                            }
                        },
                    }
                ],
            },
        )
        state, reason = status(llmb_proc, env, job)
        assert (
            state == "FAILED"
            and f"pod {pods[0]} cannot pull its image nvcr.io/nvidia/nemo:25.11.01 (ImagePullBackOff"
            in reason
        )
        assert "llmb deleted the JobSet" in reason and emu.jobsets(NS) == []  # its GPUs freed
        return
    assert status(llmb_proc, env, job) == ("RUNNING", None)
    if fault == "evicted":  # mid-run
        emu.pod_status(
            NS,
            pods[1],
            {
                "phase": "Failed",
                "reason": "Evicted",
                "message": "The node was low on resource: memory.",
            },
            node="gpu-node-7",
        )
        expected = (
            f"pod {pods[1]} was evicted on node gpu-node-7: The node was low on resource: memory."
        )
        ended = f"pod {pods[1]} evicted (The node was low on resource: memory.) on gpu-node-7"
    else:
        emu.pod_status(
            NS,
            pods[1],
            {
                "phase": "Failed",
                "conditions": [
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "DeletionByTaintManager",
                        "message": "Taint manager: deleting due to NoExecute taint",
                    }
                ],
            },
            node="gpu-node-3",
        )
        said = "DeletionByTaintManager: Taint manager: deleting due to NoExecute taint"
        expected = f"pod {pods[1]}: its node gpu-node-3 was lost ({said})"
        ended = f"pod {pods[1]}: its node lost ({said}) on gpu-node-3"
    state, reason = status(llmb_proc, env, job)  # the pod ended before the JobSet did
    assert state == "RUNNING" and reason.startswith(expected)
    emu.jobset_status(NS, name, conditions=[JOBSET_FAILED])
    state, reason = status(llmb_proc, env, job)
    assert (state, reason) == ("INFRA_FAILED", ended)  # the cluster's fault, not the run's


def test_cancel_deletes_the_jobset_with_its_pods(llmb_proc, emu, env):
    job = submit(llmb_proc, env)
    name = only_jobset(emu)["metadata"]["name"]
    emu.add_pods(NS, name, 2, phase="Running")
    cancelled = json.loads(llmb_proc("cancel", job, "--json", env=env).out)
    assert cancelled == {"job_id": job, "state": "CANCELLED", "reason": "cancelled", "ended": True}
    (delete,) = emu.requests("DELETE")
    assert delete.url.path == f"{JOBSETS}/namespaces/{NS}/jobsets/{name}"
    assert delete.data["propagationPolicy"] == "Foreground"  # the pods go with it
    # a JobSet deleted outside llmb
    other = submit(llmb_proc, env)
    other_name = next(j["metadata"]["name"] for j in emu.jobsets(NS))
    emu.call("DELETE", f"{JOBSETS}/namespaces/{NS}/jobsets/{other_name}")
    assert status(llmb_proc, env, other) == ("CANCELLED", "the JobSet was deleted outside llmb")


def test_logs_follow_copies_the_leader_pods_log_home_once_through_a_dropped_read(
    llmb_proc, emu, tmp_path
):
    # the pods see the install directory elsewhere than this machine: log: api
    env = kube_env(emu, tmp_path, install_path="/llmb")
    job = submit(llmb_proc, env)
    jobset = only_jobset(emu)
    name = jobset["metadata"]["name"]
    pod_spec = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    script = pod_spec["containers"][0]["command"][2]
    assert unpacked_spec(script)["log"].startswith("/llmb/workloads/llama31/experiments/")
    assert ">> " not in script.splitlines()[-1]  # torchrun's output: the container's log
    pods = emu.add_pods(NS, name, 2, phase="Running")
    lines = [f"[llmb] job {job}: pod 0 of 2 on {pods[0]}", *log_lines()]
    full = ("\n".join(lines) + "\n").encode()
    served = [
        full[: len(full) // 3],
        full[: len(full) // 2],
        500,
        full,
    ]  # as it grows; one read fails

    def answer():
        item = served.pop(0) if len(served) > 1 else served[0]
        if isinstance(item, int):  # the read is dropped: the server fails it, llmb reads again
            raise kmock.KubernetesError(
                status=item, reason="InternalError", message="stream closed"
            )
        return item

    emu.k[f"get /api/v1/namespaces/{NS}/pods/{pods[0]}/log"] << answer
    record = json.loads((Path(env["LLMB_INSTALL"]) / "jobs" / job / "job.json").read_text())
    log = Path(record["log"])
    assert log.is_relative_to(env["LLMB_INSTALL"])  # the experiment directory here
    from conftest import _llmb_executable

    follow = subprocess.Popen(
        [_llmb_executable(), "logs", job, "--follow"],
        env=env | {"PATH": __import__("os").environ["PATH"]},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            lambda: log.exists() and "iteration       50/      50" in log.read_text(),
            20,
            0.05,
            "the last iteration",
        )
        for pod in pods:
            emu.pod_status(NS, pod, {"phase": "Succeeded"})
        emu.jobset_status(NS, name, conditions=[{"type": "Completed", "status": "True"}])
        out, err = follow.communicate(timeout=60)
    finally:
        follow.kill()
    assert follow.returncode == 0, err
    assert "SUCCEEDED" in out + err
    text = log.read_text()
    assert text.startswith(f"[llmb] job {job}: Kubernetes JobSet {name} in namespace {NS}")
    assert text.count("iteration       50/      50") == 1 and text.count(lines[0]) == 1
    assert text.endswith(full.decode())  # all of it, once, in order
    shown = llmb_proc("logs", job, "--tail", "1", env=env)
    assert shown.code == 0 and "iteration       50/      50" in shown.out
    results = json.loads(llmb_proc("results", "--json", env=env).out)
    (row,) = [r for r in results if r.get("job_id") == job]
    assert row["status"] == "success"
    assert_secret_nowhere(env, shown.out, out, err)


# ---------------------------------------------------------------- faults


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_api_server_down_slow_or_refusing(llmb_proc, emu, env, tmp_path):
    down = tmp_path / "down.kubeconfig"
    down.write_text(
        Path(env["KUBECONFIG"]).read_text().replace(emu.url, f"http://127.0.0.1:{free_port()}")
    )
    result = llmb_proc("run", *ACCEPTANCE, *KUBE, "--detach", env={**env, "KUBECONFIG": str(down)})
    assert (
        result.code == 2
        and "cannot be reached (connection refused: is the API server up?)" in result.err
    )

    nowhere = {**env, "KUBECONFIG": str(tmp_path / "none")}
    missing = llmb_proc("run", *ACCEPTANCE, *KUBE, "--detach", env=nowhere)
    assert missing.code == 2 and f"no kubeconfig at {tmp_path / 'none'}" in missing.err
    in_pod = llmb_proc(
        "run",
        *ACCEPTANCE,
        *KUBE,
        "--detach",
        env={**nowhere, "KUBERNETES_SERVICE_HOST": "10.0.0.1"},
    )
    assert in_pod.code == 2 and "the pod's service account cannot be used" in in_pod.err
    insecure = tmp_path / "insecure.kubeconfig"
    config = json.loads(Path(env["KUBECONFIG"]).read_text())
    config["clusters"][0]["cluster"] = {
        "server": "https://127.0.0.1:6443",
        "insecure-skip-tls-verify": True,
    }
    insecure.write_text(json.dumps(config))
    skip = llmb_proc(
        "run", *ACCEPTANCE, *KUBE, "--detach", env={**env, "KUBECONFIG": str(insecure)}
    )
    assert skip.code == 2 and "says insecure-skip-tls-verify: llmb verifies" in skip.err
    plain = llmb_proc(
        "run", *ACCEPTANCE, *KUBE, "--detach", env={**env, "LLMB_KUBE_ALLOW_HTTP": "0"}
    )
    assert (
        plain.code == 2 and "is plain http" in plain.err and "LLMB_KUBE_ALLOW_HTTP=1" in plain.err
    )

    discovery = f"get {JOBSETS}"
    emu.k[discovery][once(emu)] << (lambda: __import__("asyncio").sleep(30))
    started = time.monotonic()
    slow = llmb_proc(
        "run", *ACCEPTANCE, *KUBE, "--detach", env={**env, "LLMB_KUBE_REQUEST_TIMEOUT": "1"}
    )
    assert (
        slow.code == 2
        and "gave no answer within the 1 s allowed (LLMB_KUBE_REQUEST_TIMEOUT)" in slow.err
    )
    assert time.monotonic() - started < 15

    def refuse(code, reason, message):
        def raise_it():
            raise kmock.KubernetesError(status=code, reason=reason, message=message)

        return raise_it

    emu.k[discovery][once(emu)] << refuse(
        401, "Unauthorized", f"Unauthorized (token {TOKEN} expired)"
    )
    unauthorized = llmb_proc("run", *ACCEPTANCE, *KUBE, "--detach", env=env)
    assert (
        unauthorized.code == 2
        and "refused the credentials (401 Unauthorized: Unauthorized (token *** expired))"
        in unauthorized.err
    )
    emu.k[f"post {JOBSETS}/namespaces/{NS}/jobsets"][once(emu)] << refuse(
        403,
        "Forbidden",
        'jobsets.jobset.x-k8s.io is forbidden: User "bench" cannot create resource "jobsets"',
    )
    forbidden = llmb_proc("run", *ACCEPTANCE, *KUBE, "--detach", env=env)
    assert (
        forbidden.code == 2
        and f"forbidden in namespace {NS} (403: jobsets.jobset.x-k8s.io is forbidden"
        in forbidden.err
    )
    assert json.loads(llmb_proc("status", "--json", env=env).out) == []
    for output in (result, missing, in_pod, skip, plain, slow, unauthorized, forbidden):
        assert "Traceback" not in output.err
    assert_secret_nowhere(env, unauthorized.err, forbidden.err)


def test_a_name_taken_is_409_and_a_lost_answer_is_not_sent_twice(llmb_proc, emu, env):
    post = f"post {JOBSETS}/namespaces/{NS}/jobsets"
    emu.k[post][once(emu)] << (
        lambda: (_ for _ in ()).throw(
            kmock.KubernetesError(
                status=409, reason="AlreadyExists", message="jobsets.jobset.x-k8s.io already exists"
            )
        )
    )
    taken = llmb_proc("run", *ACCEPTANCE, *KUBE, "--detach", env=env)
    assert (
        taken.code == 2
        and f"already exists in namespace {NS} (409 AlreadyExists); nothing was created"
        in taken.err
    )
    before = {j["metadata"]["name"] for j in emu.jobsets(NS)}
    # the POST arrives (kmock keeps what it is sent) but its answer is a 500: llmb finds it by name
    emu.k[post][once(emu)] << (
        lambda: (_ for _ in ()).throw(
            kmock.KubernetesError(
                status=500, reason="InternalError", message="etcdserver: request timed out"
            )
        )
    )
    job = submit(llmb_proc, env)
    new = [j for j in emu.jobsets(NS) if j["metadata"]["name"] not in before]
    assert len(new) == 1 and new[0]["metadata"]["labels"]["llmb.nvidia.com/job"] == job
    assert len(emu.requests("POST", "/jobsets")) == 2  # the 409, then one POST for this job


def test_status_while_the_api_server_is_unreachable_leaves_the_job_alone(llmb_proc, emu, env):
    job = submit(llmb_proc, env)
    name = only_jobset(emu)["metadata"]["name"]
    emu.add_pods(NS, name, 2, phase="Running")
    down = {"now": True}
    emu.k[f"get {JOBSETS}/namespaces/{NS}/jobsets/{name}"][lambda _: down["now"]] << 503
    state, reason = status(llmb_proc, env | {"LLMB_KUBE_REQUEST_TIMEOUT": "1"}, job)
    assert state == "UNKNOWN" and "503" in reason and "cannot ask Kubernetes" in reason
    assert "the job is left alone" in reason
    assert len(emu.requests("GET", f"/jobsets/{name}")) > 1  # retried within the deadline
    down["now"] = False  # the server answers again, and so does status
    assert status(llmb_proc, env, job) == ("RUNNING", None)


def test_certify_and_sweep_take_the_backend(llmb_proc, emu, env):
    certify = llmb_proc("certify", "--gpu", "b200", *KUBE, "--dry-run", env=env)
    assert certify.code == 0, certify.err
    # its suite, each task on this backend (the suite's workloads are whatever is installed)
    table = certify.out.split("#  TASK", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    assert table and all(line.split()[-3] == "kubernetes" for line in table), table
    assert re.search(r"llama31 8b b200 fp8 \d+ GPUs\s+kubernetes", certify.out)
    assert "nothing was submitted (--dry-run)" in certify.out + certify.err
    sweep = llmb_proc(
        "sweep",
        "llama31",
        "--size",
        "8b",
        "--dtype",
        "fp8",
        "--gpus",
        "8,16",
        "--gpu",
        "b200",
        *KUBE,
        "--dry-run",
        env=env,
    )
    assert sweep.code == 0, sweep.err
    assert re.search(r"llama31 8b b200 fp8 16 GPUs\s+kubernetes\s+16", sweep.out)
    assert not emu.requests()


def test_the_plugin_registers_without_importing_the_client():
    code = (
        "import sys; from llmb_backend_kubernetes import plugin; "
        "assert [b.name for b in plugin.llmb_backends()] == ['kubernetes']; "
        "assert 'kubernetes' not in sys.modules, 'imported at registration'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
