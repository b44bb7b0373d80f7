"""``llmb run --backend runai`` against tests/fake_runai.py, a Run:ai control
plane written from its documentation: every request's method, path, headers
and body; the token expiring mid-job; 429/500 answers; malformed JSON; the
args limit; phases, failure reasons, cancel, logs; secrets; and a 2-node CPU
proxy that the fake runs as real processes."""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shlex
import sys
import zlib
from pathlib import Path

import pytest
from fake_runai import CLUSTER_ID, FakeRunai
from llmb.cli.output import terminal_safe

SECRET = "app-secret-4f9c1e2b7d"
HF = "hf_token_9a8b7c6d5e"
NEMOTRON4 = [
    "nemotron4",
    "--size",
    "340b",
    "--gpu",
    "h100",
    "--dtype",
    "fp8",
    "--gpus",
    "256",
    "--backend",
    "runai",
]


@pytest.fixture
def fake():
    with FakeRunai(client_secret=SECRET) as server:
        yield server


def runai_env(url: str, tmp_path: Path) -> dict:
    """The variables that point llmb at the fake at ``url`` (an install and a PVC under ``tmp_path``)."""
    pvc = tmp_path / "pvc"
    return {
        "LLMB_INSTALL": str(tmp_path / "install"),
        "LLMB_NO_CACHE": "1",
        "BASE_URL": url,
        "APP_ID": "llmb-qa",
        "APP_SECRET": SECRET,
        "PROJECT_NAME": "llmb-qa",
        "RUN_CONF_MOUNTS": f"workspace:{pvc}:workspace-claim",
        "PVC_DIR": str(pvc / "llmb"),
        "HF_TOKEN": HF,
        "LLMB_RUNAI_CONFIG": str(tmp_path / "none.yaml"),
        "RUNAI_ALLOW_HTTP": "1",  # the fake serves plain http on 127.0.0.1
    }


@pytest.fixture
def env(fake, tmp_path):
    return runai_env(fake.url, tmp_path)


def workload_requests(fake, method=None):
    return [
        r
        for r in fake.requests
        if "/workloads" in r.path and (method is None or r.method == method)
    ]


def unpacked_spec(args: str) -> dict:
    """The run spec the pods receive, out of the command llmb sent."""
    script = shlex.split(args)[1]
    packed = next(line for line in script.splitlines() if line.startswith("printf %s ")).split()[2]
    return json.loads(zlib.decompress(base64.b64decode(packed)))


def assert_secret_nowhere(env, *outputs):
    for text in outputs:
        assert SECRET not in text and HF not in text
    for path in Path(env["LLMB_INSTALL"]).rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert SECRET.encode() not in data and HF.encode() not in data, path


def test_dry_run_prints_the_requests_and_sends_nothing(llmb_proc, env, fake):
    result = llmb_proc("run", *NEMOTRON4, "--dry-run", "--json", env=env)
    assert result.code == 0, result.err
    shown = json.loads(result.out)["requests"]
    assert [(r["method"], r["url"]) for r in shown] == [
        ("POST", f"{fake.url}/token"),
        ("GET", f"{fake.url}/org-unit/projects"),
        ("POST", f"{fake.url}/workloads/distributed"),
    ]
    assert shown[0]["body"] == {
        "grantType": "client_credentials",
        "clientID": "llmb-qa",
        "clientSecret": "***",
    }
    body = shown[2]["body"]
    assert body["spec"]["numWorkers"] == 31 and body["spec"]["compute"]["gpuDevicesRequest"] == 8
    assert {"name": "HF_TOKEN", "value": "***"} in body["spec"]["environmentVariables"]
    text = llmb_proc("run", *NEMOTRON4, "--dry-run", env=env)
    assert "POST " + f"{fake.url}/workloads/distributed" in text.out
    assert fake.requests == [] and not Path(env["LLMB_INSTALL"]).exists()
    assert_secret_nowhere(env, result.out, result.err, text.out, text.err)


def test_submission_sends_exactly_the_documented_requests(llmb_proc, env, fake):
    result = llmb_proc("run", *NEMOTRON4, "--detach", "--json", env=env)
    assert result.code == 0, result.err
    job = json.loads(result.out)["job_id"]
    token, projects, create = fake.requests
    assert (token.method, token.path) == ("POST", "/api/v1/token")
    assert token.body == {
        "grantType": "client_credentials",
        "clientID": "llmb-qa",
        "clientSecret": SECRET,
    }
    assert (
        token.headers["content-type"] == "application/json" and "authorization" not in token.headers
    )
    assert (projects.method, projects.path, projects.body) == (
        "GET",
        "/api/v1/org-unit/projects",
        None,
    )
    bearer = projects.headers["authorization"]
    assert bearer.startswith("Bearer ") and create.headers["authorization"] == bearer

    assert (create.method, create.path) == ("POST", "/api/v1/workloads/distributed")
    body = create.body
    assert (
        body["projectId"],
        body["clusterId"],
        body["useGivenNameAsPrefix"],
        body["masterSpecSameAsWorker"],
    ) == (
        "2",
        CLUSTER_ID,
        False,
        True,
    )  # the exact name: llmb can find the workload by it if the answer is lost
    assert re.fullmatch(rf"llmb-nemotron4-{job.split('-')[-1]}-[a-z0-9]{{6}}", body["name"])
    spec = body["spec"]
    pvc = str(Path(env["PVC_DIR"]).parent)
    assert {k: v for k, v in spec.items() if k not in ("args", "environmentVariables")} == {
        "command": "bash",
        "image": "nvcr.io/nvidia/nemo:25.09.00",  # Nemotron-4's H100 container
        "compute": {"gpuDevicesRequest": 8, "largeShmRequest": True},
        "storage": {
            "pvc": [
                {
                    "name": "workspace",
                    "path": pvc,
                    "existingPvc": True,
                    "claimName": "workspace-claim",
                }
            ]
        },
        "distributedFramework": "PyTorch",
        "numWorkers": 31,
        "minReplicas": 31,
        "maxReplicas": 31,
        "backoffLimit": 0,
        "restartPolicy": "Never",
    }
    variables = {v["name"]: v["value"] for v in spec["environmentVariables"]}
    # the secret goes only to Run:ai
    assert variables["HF_TOKEN"] == HF and variables["LLMB_JOB_ID"] == job
    run = unpacked_spec(spec["args"])
    assert (run["engine"], run["ranks"], run["nodes"], run["ranks_per_node"]) == (
        "nemo2",
        256,
        32,
        8,
    )
    # the pods' paths
    assert run["log"].startswith(env["PVC_DIR"] + "/workloads/nemotron4/experiments/")
    assert (
        run["framework_config"]["parallelism"]["tp"],
        run["framework_config"]["parallelism"]["pp"],
    ) == (8, 8)
    assert "--nproc_per_node=8" in spec["args"] and len(spec["args"]) < 10_000

    record = json.loads((Path(env["LLMB_INSTALL"]) / "jobs" / job / "job.json").read_text())
    assert record["details"]["runai"]["workload_id"] == next(iter(fake.workloads))
    assert_secret_nowhere(env, result.out, result.err)


def test_one_node_is_a_training(llmb_proc, env, fake):
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
        "8",
        "--backend",
        "runai",
        "--detach",
        env=env,
    )
    assert result.code == 0, result.err
    (create,) = workload_requests(fake, "POST")
    assert create.path == "/api/v1/workloads/trainings"
    assert "masterSpecSameAsWorker" not in create.body and "numWorkers" not in create.body["spec"]
    assert create.body["spec"]["image"] == "nvcr.io/nvidia/nemo:25.11.01"


def test_phases_map_to_states_and_a_failure_says_why(llmb_proc, env, fake):
    fake.script_phases(
        ["Creating", "Unknown", "Running", "Failed"], {"Failed": "pod llmb-master-0 exited with 1"}
    )
    job = json.loads(llmb_proc("run", *NEMOTRON4, "--detach", "--json", env=env).out)["job_id"]
    seen = [json.loads(llmb_proc("status", job, "--json", env=env).out) for _ in range(3)]
    assert [(s["state"], s["reason"]) for s in seen] == [
        ("QUEUED", "Run:ai: Creating"),
        ("QUEUED", "pods starting (Run:ai reports Unknown)"),
        ("RUNNING", None),
    ]
    fake.add_event(
        next(iter(fake.workloads)),
        "Warning",
        "BackoffLimitExceeded",
        "Job has reached the backoff limit",
    )
    failed = json.loads(llmb_proc("status", job, "--json", env=env).out)
    assert failed["state"] == "FAILED"
    assert failed["reason"] == (
        "Run:ai: pod llmb-master-0 exited with 1; BackoffLimitExceeded: Job has reached the "
        "backoff limit"
    )
    gets = [r for r in workload_requests(fake, "GET") if "/distributed/" in r.path]
    assert all(
        r.path == f"/api/v1/workloads/distributed/{next(iter(fake.workloads))}" for r in gets
    )
    before = len(fake.requests)
    assert json.loads(llmb_proc("status", job, "--json", env=env).out)["state"] == "FAILED"
    assert len(fake.requests) == before  # an ended job is not asked about again


def test_cancel_suspends_and_waits_until_stopped(llmb_proc, env, fake):
    fake.script_phases(["Running"])
    job = json.loads(llmb_proc("run", *NEMOTRON4, "--detach", "--json", env=env).out)["job_id"]
    cancelled = json.loads(llmb_proc("cancel", job, "--json", env=env).out)
    assert cancelled == {"job_id": job, "state": "CANCELLED", "reason": "cancelled", "ended": True}
    wid = next(iter(fake.workloads))
    assert [(r.method, r.path) for r in workload_requests(fake) if r.method != "GET"][-1] == (
        "POST",
        f"/api/v1/workloads/distributed/{wid}/suspend",
    )


def test_cancel_can_delete_instead(llmb_proc, env, fake):
    fake.script_phases(["Running"])
    deleting = {**env, "RUNAI_CANCEL": "delete"}
    job = json.loads(llmb_proc("run", *NEMOTRON4, "--detach", "--json", env=deleting).out)["job_id"]
    assert json.loads(llmb_proc("cancel", job, "--json", env=deleting).out)["state"] == "CANCELLED"
    assert [r.method for r in workload_requests(fake) if r.method != "GET"][-1] == "DELETE"


def test_server_errors_are_retried_with_backoff_and_bounded(llmb_proc, env, fake):
    fake.fail_next(500, times=2, path_prefix="/workloads/distributed")
    fake.fail_next(429, times=1, path_prefix="/org-unit/projects", retry_after=0.2)
    assert llmb_proc("run", *NEMOTRON4, "--detach", env=env).code == 0
    assert [r.path for r in fake.requests].count("/api/v1/workloads/distributed") == 3
    assert [r.path for r in fake.requests].count("/api/v1/org-unit/projects") == 2
    fake.requests.clear()
    fake.fail_next(503, times=50, path_prefix="/org-unit/projects")
    result = llmb_proc("run", *NEMOTRON4, "--detach", env=env, timeout=120)
    assert result.code == 2 and "Run:ai 503" in result.err and "still after 5 retries" in result.err
    assert [r.path for r in fake.requests].count(
        "/api/v1/org-unit/projects"
    ) == 6 and not workload_requests(fake)
    assert "Traceback" not in result.err
    assert_secret_nowhere(env, result.out, result.err)


def test_malformed_json_is_reported_as_such(llmb_proc, env, fake):
    fake.malformed_next(path_prefix="/org-unit/projects")
    result = llmb_proc("run", *NEMOTRON4, "--detach", env=env)
    assert (
        result.code == 2
        and "GET /org-unit/projects: Run:ai answered 200 with a body that is not JSON" in result.err
    )


def test_wrong_credentials_and_older_clusters(llmb_proc, env, tmp_path):
    with FakeRunai(client_secret=SECRET, app_token_only=True) as old:
        older = {**env, "BASE_URL": old.url}
        assert llmb_proc("run", *NEMOTRON4, "--detach", env=older).code == 0
        grants = [r.body["grantType"] for r in old.requests if r.path == "/api/v1/token"]
        assert grants == ["client_credentials", "app_token"]  # auto: the older form after a refusal
        assert old.requests[-1].body and "appSecret" not in json.dumps(old.requests[-1].body)
        wrong = llmb_proc("run", *NEMOTRON4, "--detach", env={**older, "APP_SECRET": "not-it"})
        assert wrong.code == 2 and "refused the credentials of application 'llmb-qa'" in wrong.err
        assert "not-it" not in wrong.err


def test_the_token_is_renewed_when_it_expires_mid_job(llmb_proc, env, fake):
    fake.script_phases(["Pending", "Running", "Running", "Running", "Running", "Completed"])
    fake.expire_tokens_at_get(2)  # the first Running: polls follow it
    result = llmb_proc("run", *NEMOTRON4, "--json", env=env, timeout=120)
    assert json.loads(result.out)["state"] == "SUCCEEDED", result.err
    tokens = [i for i, r in enumerate(fake.requests) if r.path == "/api/v1/token"]
    assert len(tokens) == 2  # the first, and one more after the 401
    renewed = fake.requests[tokens[1] - 1], fake.requests[tokens[1] + 1]
    assert renewed[0].path == renewed[1].path  # the refused request, sent again with the new token
    assert renewed[0].headers["authorization"] != renewed[1].headers["authorization"]


def test_the_args_limit_is_checked_before_sending(llmb_proc, env, fake):
    padding = secrets.token_urlsafe(9_000)  # random: it stays long after compression
    result = llmb_proc("run", *NEMOTRON4, "--env", f"LLMB_PADDING={padding}", "--detach", env=env)
    assert result.code == 2 and "Run:ai accepts at most 10,000 in args" in result.err
    assert not workload_requests(fake, "POST")


def test_a_wrong_project_lists_the_visible_ones_and_missing_settings_are_listed(
    llmb_proc, env, fake
):
    wrong = llmb_proc("run", *NEMOTRON4, "--detach", env={**env, "PROJECT_NAME": "nosuch"})
    assert wrong.code == 2
    assert f"the projects it can see: llmb-qa (cluster {CLUSTER_ID}), other-team" in wrong.err
    bare = {k: v for k, v in env.items() if k not in ("APP_SECRET", "PVC_DIR", "RUN_CONF_MOUNTS")}
    missing = llmb_proc("run", *NEMOTRON4, "--detach", env=bare)
    assert (
        missing.code == 2
        and "APP_SECRET, PVC_DIR (or --backend-opt pvc_dir=...), RUN_CONF_MOUNTS" in missing.err
    )
    flagged = llmb_proc(
        "run", *NEMOTRON4, "--backend-opt", f"app_secret={SECRET}", "--detach", env=env
    )
    assert flagged.code == 2 and "shell history" in flagged.err and SECRET not in flagged.err
    assert json.loads(llmb_proc("status", "--json", env=env).out) == []  # nothing half-made left


def test_the_config_file_and_flags_set_what_the_variables_do(llmb_proc, env, fake, tmp_path):
    config = tmp_path / "runai.yaml"
    config.write_text(
        f"base_url: {fake.url}\napp_id: llmb-qa\napp_secret: {SECRET}\nproject: other-team\n"
    )
    from_file = {
        k: v
        for k, v in env.items()
        if k not in ("BASE_URL", "APP_ID", "APP_SECRET", "PROJECT_NAME")
    }
    from_file["LLMB_RUNAI_CONFIG"] = str(config)
    assert llmb_proc("run", *NEMOTRON4, "--detach", env=from_file).code == 0
    assert workload_requests(fake, "POST")[-1].body["projectId"] == "5"
    assert (
        llmb_proc(
            "run", *NEMOTRON4, "--backend-opt", "project=llmb-qa", "--detach", env=from_file
        ).code
        == 0
    )
    # the flag wins over the file
    assert workload_requests(fake, "POST")[-1].body["projectId"] == "2"


def test_a_two_node_proxy_runs_for_real_and_its_log_is_read_from_the_pvc(llmb_proc, tmp_path):
    pytest.importorskip("torch", reason="the pods run the torch engine")
    pvc = tmp_path / "pvc"
    install = pvc / "llmb"  # this machine sees the PVC where the pods do
    with FakeRunai(client_secret=SECRET, execute=True) as fake:
        env = {
            "LLMB_INSTALL": str(install),
            "LLMB_NO_CACHE": "1",
            "BASE_URL": fake.url,
            "APP_ID": "llmb-qa",
            "APP_SECRET": SECRET,
            "PROJECT_NAME": "llmb-qa",
            "RUN_CONF_MOUNTS": f"workspace:{pvc}:claim",
            "PVC_DIR": str(install),
            "RUNAI_PYTHON": sys.executable,
            "LLMB_RUNAI_CONFIG": str(tmp_path / "none"),
            "RUNAI_ALLOW_HTTP": "1",
        }
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
            "--gpus-per-node",
            "1",
            "--proxy",
            "tiny",
            "--backend",
            "runai",
            "--json",
            "--env",
            "OMP_NUM_THREADS=1",  # both "nodes" share this machine's cores
            env=env,
            timeout=600,
        )
        summary = json.loads(result.out) if result.out.strip() else {}
        assert summary.get("state") == "SUCCEEDED", (
            result.err[-2000:],
            fake.pod_logs(next(iter(fake.workloads))),
        )
        assert (
            summary["result"]["status"] == "success"
            and summary["result"]["samples_in_window"] == 10
        )
        log = Path(summary["log"]).read_text()
        assert "pod 0 of 2" in log and "pod 1 of 2" in log and "2 rank(s) on cpu" in log
        assert "training finished" in log
        # The log's last lines are whatever pod ended last: where pod 1's torchrun outlives the rendezvous
        # pod 0 hosted, its shutdown error follows pod 0's "training finished" (seen under load in CI).
        shown = llmb_proc("logs", summary["job_id"], "--tail", "3", env=env)
        last = terminal_safe("".join(log.splitlines(keepends=True)[-3:]))
        assert shown.code == 0 and shown.out == last
        assert_secret_nowhere(env, result.out, result.err)


def test_logs_say_where_the_log_is_when_the_pvc_is_not_mounted_here(llmb_proc, env, fake):
    job = json.loads(llmb_proc("run", *NEMOTRON4, "--detach", "--json", env=env).out)["job_id"]
    shown = llmb_proc("logs", job, env=env)
    assert (
        shown.code == 2 and f"is at {env['PVC_DIR']}/workloads/nemotron4/experiments/" in shown.err
    )
    assert "not reachable from here" in shown.err and not os.path.exists(env["PVC_DIR"])


def test_a_cluster_is_found_by_name(llmb_proc, env, fake):
    from fake_runai import OTHER_CLUSTER_ID

    # the same name twice
    fake.projects.append({"id": "9", "name": "llmb-qa", "clusterId": OTHER_CLUSTER_ID})
    ambiguous = llmb_proc("run", *NEMOTRON4, "--detach", env=env)
    assert ambiguous.code == 2 and "exists on several clusters" in ambiguous.err
    assert llmb_proc("run", *NEMOTRON4, "--detach", env={**env, "RUNAI_CLUSTER": "lab"}).code == 0
    assert [r.path for r in fake.requests if r.method == "GET"][-2:] == [
        "/api/v1/clusters",
        "/api/v1/org-unit/projects",
    ]
    assert workload_requests(fake, "POST")[-1].body["projectId"] == "9"
    unknown = llmb_proc("run", *NEMOTRON4, "--detach", env={**env, "RUNAI_CLUSTER": "nosuch"})
    assert (
        unknown.code == 2
        and "the clusters it can see: dgx-cloud" in unknown.err
        and ", lab (" in unknown.err
    )
