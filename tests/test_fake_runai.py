"""Tests of the Run:ai test double itself, spoken to with plain ``urllib`` (no llmb code)."""

from __future__ import annotations

import base64
import copy
import json
import socket
import sys
import time
import urllib.error
import urllib.request
import uuid

import pytest
from fake_runai import CLUSTER_ID, OTHER_CLUSTER_ID, PHASES, FakeRunai
from waiting import wait_for


def call(
    fake: FakeRunai,
    method: str,
    path: str,
    body=None,
    token: str | None = None,
    raw: bytes | None = None,
):
    """(status, headers, parsed JSON or the text when it is not JSON)."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(fake.url + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, headers, text = resp.status, resp.headers, resp.read().decode()
    except urllib.error.HTTPError as error:
        status, headers, text = error.code, error.headers, error.read().decode()
    try:
        return status, headers, json.loads(text)
    except ValueError:
        return status, headers, text


def get_token(fake: FakeRunai, **fields) -> str:
    body = {
        "grantType": "client_credentials",
        "clientID": fake.client_id,
        "clientSecret": fake.client_secret,
        **fields,
    }
    status, _, answer = call(fake, "POST", "/token", body)
    assert status == 200, answer
    return answer["accessToken"]


def workload(kind: str = "distributed", **top) -> dict:
    """A valid creation body of the shape llmb sends."""
    spec = {
        "command": "python3",
        "args": "-c 'print(1)'",
        "image": "nvcr.io/nvidia/nemo:25.04",
        "compute": {"gpuDevicesRequest": 8, "largeShmRequest": True},
        "storage": {
            "pvc": [
                {
                    "name": "results",
                    "path": "/results",
                    "existingPvc": True,
                    "claimName": "llmb-pvc",
                }
            ]
        },
        "environmentVariables": [{"name": "LLMB_RUN", "value": "1"}],
        "backoffLimit": 0,
        "restartPolicy": "Never",
    }
    body = {
        "name": "bench",
        "projectId": "2",
        "clusterId": CLUSTER_ID,
        "useGivenNameAsPrefix": True,
        "spec": spec,
    }
    if kind == "distributed":
        spec.update(distributedFramework="PyTorch", numWorkers=1, minReplicas=2, maxReplicas=2)
        body["masterSpecSameAsWorker"] = True
    body.update(top)
    return body


def create(fake, token, kind="distributed", body=None):
    status, _, answer = call(fake, "POST", f"/workloads/{kind}", body or workload(kind), token)
    assert status == 202, answer
    return answer


def phase(fake, token, kind, workload_id) -> str:
    status, _, answer = call(fake, "GET", f"/workloads/{kind}/{workload_id}", token=token)
    assert status == 200, answer
    return answer["actualPhase"]


@pytest.fixture
def fake():
    with FakeRunai() as f:
        yield f


@pytest.fixture
def token(fake):
    return get_token(fake)


# ----- tokens and authentication -----


def test_client_credentials_token_is_usable(fake):
    status, _, answer = call(
        fake,
        "POST",
        "/token",
        {"grantType": "client_credentials", "clientID": "llmb-qa", "clientSecret": "s3cret"},
    )
    assert status == 200
    assert answer["expiresIn"] == 3600 and answer["idToken"] and answer["refreshToken"]
    assert call(fake, "GET", "/org-unit/projects", token=answer["accessToken"])[0] == 200


def test_app_token_grant(fake):
    status, _, answer = call(
        fake,
        "POST",
        "/token",
        {"grantType": "app_token", "appID": "llmb-qa", "appSecret": "s3cret"},
    )
    assert status == 200
    assert call(fake, "GET", "/org-unit/projects", token=answer["accessToken"])[0] == 200


@pytest.mark.parametrize(
    "body",
    [
        {"grantType": "client_credentials", "clientID": "llmb-qa", "clientSecret": "wrong"},
        {"grantType": "client_credentials", "clientID": "someone", "clientSecret": "s3cret"},
        {"grantType": "app_token", "appID": "llmb-qa", "appSecret": "wrong"},
    ],
)
def test_wrong_credentials_are_401(fake, body):
    status, _, answer = call(fake, "POST", "/token", body)
    assert status == 401 and answer["code"] == 401 and answer["message"]


@pytest.mark.parametrize(
    "body",
    [
        {"grantType": "client_credentials", "clientID": "llmb-qa"},
        {"grantType": "password", "username": "u", "password": "p"},
        {"clientID": "llmb-qa", "clientSecret": "s3cret"},
    ],
)
def test_malformed_token_requests_are_400(fake, body):
    status, _, answer = call(fake, "POST", "/token", body)
    assert status == 400 and answer["code"] == 400


def test_older_cluster_knows_only_app_tokens():
    with FakeRunai(app_token_only=True) as old:
        status, _, answer = call(
            old,
            "POST",
            "/token",
            {"grantType": "client_credentials", "clientID": "llmb-qa", "clientSecret": "s3cret"},
        )
        assert status == 400 and "client_credentials" in answer["message"]
        status, _, answer = call(
            old,
            "POST",
            "/token",
            {"grantType": "app_token", "appID": "llmb-qa", "appSecret": "s3cret"},
        )
        assert status == 200 and "expiresIn" not in answer  # the pre-v3 TokenResponse had none
        payload = answer["accessToken"].split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        issued = time.time()
        # an hour from when it was issued: after the call, before this check (a hang guard's width:
        # a loaded machine may take minutes between the two, never an hour)
        assert issued + 3600 - 600 < claims["exp"] <= issued + 3600


def test_newer_cluster_refuses_app_tokens():
    with FakeRunai(client_credentials_only=True) as new:
        status, _, _ = call(
            new,
            "POST",
            "/token",
            {"grantType": "app_token", "appID": "llmb-qa", "appSecret": "s3cret"},
        )
        assert status == 400
        assert get_token(new)


def test_refresh_token_grant(fake):
    _, _, first = call(
        fake,
        "POST",
        "/token",
        {"grantType": "client_credentials", "clientID": "llmb-qa", "clientSecret": "s3cret"},
    )
    status, _, again = call(
        fake,
        "POST",
        "/token",
        {"grantType": "refresh_token", "refreshToken": first["refreshToken"]},
    )
    assert status == 200 and again["accessToken"] != first["accessToken"]
    assert (
        call(fake, "POST", "/token", {"grantType": "refresh_token", "refreshToken": "nope"})[0]
        == 401
    )


@pytest.mark.parametrize("header", [None, "Bearer", "Bearer not-a-token", "Basic bGxtYjpzM2NyZXQ="])
def test_endpoints_need_a_bearer_token(fake, header):
    req = urllib.request.Request(fake.url + "/org-unit/projects")
    if header:
        req.add_header("Authorization", header)
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(req, timeout=10)
    assert caught.value.code == 401
    answer = json.loads(caught.value.read())
    assert answer["code"] == 401 and answer["message"]


def test_expire_tokens_invalidates_every_issued_token(fake, token):
    other = get_token(fake)
    fake.expire_tokens()
    assert call(fake, "GET", "/org-unit/projects", token=token)[0] == 401
    assert call(fake, "GET", "/org-unit/projects", token=other)[0] == 401
    assert call(fake, "GET", "/org-unit/projects", token=get_token(fake))[0] == 200


def test_tokens_expire_after_their_ttl():
    with FakeRunai(token_ttl=0.3) as f:
        token = get_token(f)
        assert call(f, "GET", "/org-unit/projects", token=token)[0] == 200
        time.sleep(0.4)
        status, _, answer = call(f, "GET", "/org-unit/projects", token=token)
        assert status == 401 and "expired" in answer["message"]


# ----- projects -----


def test_projects_default_and_filtered(fake, token):
    status, _, answer = call(fake, "GET", "/org-unit/projects", token=token)
    assert status == 200
    assert {(p["id"], p["name"], p["clusterId"]) for p in answer["projects"]} == {
        ("2", "llmb-qa", CLUSTER_ID),
        ("5", "other-team", OTHER_CLUSTER_ID),
    }
    _, _, answer = call(fake, "GET", "/org-unit/projects?filterBy=name==llmb-qa", token=token)
    assert [p["id"] for p in answer["projects"]] == ["2"]
    _, _, answer = call(fake, "GET", "/org-unit/projects?limit=1", token=token)
    assert len(answer["projects"]) == 1 and answer["next"] == 1
    assert call(fake, "GET", "/org-unit/projects?limit=0", token=token)[0] == 400


def test_projects_are_configurable():
    mine = [{"id": "17", "name": "perf", "clusterId": CLUSTER_ID}]
    with FakeRunai(projects=mine) as f:
        _, _, answer = call(f, "GET", "/org-unit/projects", token=get_token(f))
        assert answer == {"projects": mine}
        status, _, _ = call(
            f, "POST", "/workloads/trainings", workload("trainings", projectId="17"), get_token(f)
        )
        assert status == 202


# ----- creating workloads -----


@pytest.mark.parametrize("kind", ["distributed", "trainings"])
def test_create_answers_202_with_the_workload(fake, token, kind):
    answer = create(fake, token, kind)
    assert uuid.UUID(answer["workloadId"])
    assert answer["actualPhase"] == "Creating"
    assert (
        answer["requestedName"] == "bench"
        and answer["name"].startswith("bench-")
        and len(answer["name"]) == 11
    )
    assert answer["projectId"] == "2" and answer["clusterId"] == CLUSTER_ID
    stored = fake.workloads[answer["workloadId"]]
    assert (
        stored["kind"] == kind
        and stored["name"] == answer["name"]
        and stored["body"] == workload(kind)
    )


def test_name_is_kept_without_prefix_mode(fake, token):
    answer = create(
        fake, token, "trainings", workload("trainings", useGivenNameAsPrefix=False, name="exact-1")
    )
    assert answer["name"] == "exact-1"


def _set(path: str, value):
    def change(body):
        *parents, last = path.split(".")
        node = body
        for key in parents:
            node = node[key]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value

    return change


_DELETE = object()
INVALID = [
    ("distributed", _set("name", _DELETE), "name"),
    ("distributed", _set("name", 7), "name"),
    ("distributed", _set("projectId", 2), "projectId"),
    ("distributed", _set("clusterId", _DELETE), "clusterId"),
    ("distributed", _set("clusterId", "cluster-a"), "clusterId"),
    ("distributed", _set("clusterId", OTHER_CLUSTER_ID), "does not exist"),
    ("trainings", _set("projectId", "99"), "does not exist"),
    ("distributed", _set("useGivenNameAsPrefix", "yes"), "useGivenNameAsPrefix"),
    ("distributed", _set("name", "Bench"), "DNS-1123"),
    ("distributed", _set("name", "bench_1"), "DNS-1123"),
    ("distributed", _set("name", "-bench"), "DNS-1123"),
    ("distributed", _set("name", "b" * 58), "DNS-1123"),
    ("distributed", _set("spec", _DELETE), "spec"),
    ("distributed", _set("spec.image", _DELETE), "spec.image"),
    ("distributed", _set("spec.command", ["python3"]), "spec.command"),
    ("distributed", _set("spec.args", ""), "spec.args"),
    ("distributed", _set("spec.compute.gpuDevicesRequest", "8"), "gpuDevicesRequest"),
    ("distributed", _set("spec.compute.gpuDevicesRequest", True), "gpuDevicesRequest"),
    ("distributed", _set("spec.compute.largeShmRequest", "true"), "largeShmRequest"),
    ("distributed", _set("spec.compute.gpus", 8), "spec.compute.gpus"),
    (
        "distributed",
        _set("spec.storage.pvc", [{"name": "r", "existingPvc": True, "claimName": "c"}]),
        "path",
    ),
    ("distributed", _set("spec.storage.pvc", [{"path": "/r", "existingPvc": True}]), "claimName"),
    (
        "distributed",
        _set("spec.storage.pvc", [{"path": "/r", "existingPvc": "true", "claimName": "c"}]),
        "existingPvc",
    ),
    ("distributed", _set("spec.environmentVariables", [{"name": "A", "value": 1}]), "value"),
    ("distributed", _set("spec.environmentVariables", [{"value": "1"}]), "name"),
    ("distributed", _set("spec.environmentVariables", {"A": "1"}), "environmentVariables"),
    ("distributed", _set("priority", "high"), "priority"),
    ("distributed", _set("spec.gpus", 8), "spec.gpus"),
    ("distributed", _set("spec.restartPolicy", "Sometimes"), "restartPolicy"),
    ("distributed", _set("spec.backoffLimit", -1), "backoffLimit"),
    ("distributed", _set("spec.numWorkers", _DELETE), "numWorkers"),
    ("distributed", _set("spec.numWorkers", 0), "numWorkers"),
    ("distributed", _set("spec.numWorkers", 1.5), "numWorkers"),
    ("distributed", _set("spec.distributedFramework", "pytorch"), "distributedFramework"),
    ("distributed", _set("spec.maxReplicas", 1), "maxReplicas"),
    ("distributed", _set("masterSpecSameAsWorker", _DELETE), "masterSpecSameAsWorker"),
    ("distributed", _set("masterSpecSameAsWorker", False), "masterSpecSameAsWorker"),
    ("trainings", _set("masterSpecSameAsWorker", True), "masterSpecSameAsWorker"),
    ("trainings", _set("spec.distributedFramework", "PyTorch"), "distributedFramework"),
    ("trainings", _set("spec.numWorkers", 1), "numWorkers"),
    ("trainings", _set("spec.minReplicas", 1), "minReplicas"),
    ("trainings", _set("spec.maxReplicas", 1), "maxReplicas"),
]


@pytest.mark.parametrize(("kind", "change", "says"), INVALID)
def test_invalid_creations_are_400(fake, token, kind, change, says):
    body = copy.deepcopy(workload(kind))
    change(body)
    status, _, answer = call(fake, "POST", f"/workloads/{kind}", body, token)
    assert status == 400, answer
    assert answer["code"] == 400 and says in answer["message"], answer
    assert fake.workloads == {}


@pytest.mark.parametrize("raw", [b"name=bench", b"[1, 2]", b""])
def test_a_body_that_is_no_json_object_is_400(fake, token, raw):
    status, _, answer = call(fake, "POST", "/workloads/trainings", token=token, raw=raw)
    assert status == 400 and answer["code"] == 400


def test_args_limit(fake, token):
    def with_args(n):
        body = workload("distributed")
        body["spec"]["args"] = "x" * n
        return call(fake, "POST", "/workloads/distributed", body, token)

    assert with_args(10_000)[0] == 202
    status, _, answer = with_args(10_001)
    assert status == 400 and "10001" in answer["message"] and "10000" in answer["message"]
    with FakeRunai(args_limit=50) as small:
        body = workload("trainings")
        body["spec"]["args"] = "y" * 51
        assert call(small, "POST", "/workloads/trainings", body, get_token(small))[0] == 400


# ----- phases, events, suspend, delete -----


def test_default_phases_advance_one_per_get_and_stick(fake, token):
    workload_id = create(fake, token)["workloadId"]
    seen = [phase(fake, token, "distributed", workload_id) for _ in range(6)]
    assert seen == ["Creating", "Pending", "Running", "Completed", "Completed", "Completed"]


def test_scripted_phases_and_messages(fake, token):
    before = create(fake, token, "trainings")["workloadId"]
    fake.script_phases(
        ["Pending", "Unknown", "Failed"], {"Pending": "waiting for nodes", "Failed": "OOMKilled"}
    )
    after = create(fake, token, "trainings")["workloadId"]
    answers = [call(fake, "GET", f"/workloads/trainings/{after}", token=token)[2] for _ in range(4)]
    assert [(a["actualPhase"], a["phaseMessage"]) for a in answers] == [
        ("Pending", "waiting for nodes"),
        ("Unknown", ""),
        ("Failed", "OOMKilled"),
        ("Failed", "OOMKilled"),
    ]
    assert phase(fake, token, "trainings", before) == "Creating"  # the script is fixed at creation
    with pytest.raises(ValueError):
        fake.script_phases(["Exploded"])
    assert set(PHASES) >= {"Creating", "Running", "Stopped", "Degraded", "Terminating", "Unknown"}


def test_generic_workload_view_carries_phase_and_message(fake, token):
    fake.script_phases(["Failed"], {"Failed": "ImagePullBackOff"})
    workload_id = create(fake, token)["workloadId"]
    status, _, answer = call(fake, "GET", f"/workloads/{workload_id}", token=token)
    assert status == 200
    assert (
        answer["id"] == workload_id
        and answer["phase"] == "Failed"
        and answer["phaseMessage"] == "ImagePullBackOff"
    )


def test_unknown_ids_and_wrong_kinds_are_404(fake, token):
    workload_id = create(fake, token, "distributed")["workloadId"]
    for path in (
        f"/workloads/trainings/{workload_id}",
        f"/workloads/distributed/{uuid.uuid4()}",
        f"/workloads/{uuid.uuid4()}/events",
    ):
        status, _, answer = call(fake, "GET", path, token=token)
        assert status == 404 and answer["code"] == 404
    assert call(fake, "POST", f"/workloads/trainings/{workload_id}/suspend", token=token)[0] == 404
    assert call(fake, "DELETE", f"/workloads/trainings/{workload_id}", token=token)[0] == 404


def test_events(fake, token):
    workload_id = create(fake, token)["workloadId"]
    fake.add_event(workload_id, "Normal", "Scheduled", "assigned to node a")
    fake.add_event(workload_id, "Warning", "FailedMount", "pvc llmb-pvc not found")
    status, _, answer = call(fake, "GET", f"/workloads/{workload_id}/events", token=token)
    assert status == 200
    newest = answer["events"][0]
    assert (newest["type"], newest["reason"], newest["message"]) == (
        "Warning",
        "FailedMount",
        "pvc llmb-pvc not found",
    )
    assert (
        newest["clusterId"] == CLUSTER_ID
        and newest["createdAt"].endswith("Z")
        and uuid.UUID(newest["id"])
    )
    _, _, answer = call(
        fake, "GET", f"/workloads/{workload_id}/events?sortOrder=asc&limit=1", token=token
    )
    assert [e["reason"] for e in answer["events"]] == ["Scheduled"] and answer["next"] == 1
    with pytest.raises(KeyError):
        fake.add_event(str(uuid.uuid4()), "Normal", "x", "y")


def test_suspend(fake, token):
    workload_id = create(fake, token)["workloadId"]
    assert phase(fake, token, "distributed", workload_id) == "Creating"
    status, _, answer = call(
        fake, "POST", f"/workloads/distributed/{workload_id}/suspend", token=token
    )
    assert status == 202 and answer["code"] == 202
    seen = [phase(fake, token, "distributed", workload_id) for _ in range(3)]
    assert seen == ["Stopping", "Stopped", "Stopped"]


def test_get_on_suspend_is_405(fake, token):
    workload_id = create(fake, token)["workloadId"]
    status, headers, answer = call(
        fake, "GET", f"/workloads/distributed/{workload_id}/suspend", token=token
    )
    assert status == 405 and answer["code"] == 405 and headers["Allow"] == "POST"
    assert phase(fake, token, "distributed", workload_id) == "Creating"  # nothing was suspended


def test_delete(fake, token):
    workload_id = create(fake, token, "trainings")["workloadId"]
    status, _, answer = call(fake, "DELETE", f"/workloads/trainings/{workload_id}", token=token)
    assert status == 202 and answer["code"] == 202
    assert phase(fake, token, "trainings", workload_id) == "Deleting"
    assert call(fake, "GET", f"/workloads/trainings/{workload_id}", token=token)[0] == 404
    assert call(fake, "GET", f"/workloads/{workload_id}/events", token=token)[0] == 404
    assert call(fake, "DELETE", f"/workloads/trainings/{workload_id}", token=token)[0] == 404


def test_unknown_routes_and_methods(fake, token):
    assert call(fake, "GET", "/workloads/distributed/x/y/z", token=token)[0] == 404
    status, headers, _ = call(fake, "POST", "/org-unit/projects", {}, token)
    assert status == 405 and headers["Allow"] == "GET"
    assert call(fake, "GET", "/token")[0] == 405


# ----- injected faults and recording -----


def test_fail_next_injects_errors_then_recovers(fake, token):
    fake.fail_next(503, times=2)
    for _ in range(2):
        status, _, answer = call(fake, "GET", "/org-unit/projects", token=token)
        assert status == 503 and answer["code"] == 503
    assert call(fake, "GET", "/org-unit/projects", token=token)[0] == 200


def test_fail_next_with_retry_after_and_prefix(fake, token):
    fake.fail_next(429, path_prefix="/workloads", retry_after=2)
    # does not match the prefix
    assert call(fake, "GET", "/org-unit/projects", token=token)[0] == 200
    status, headers, _ = call(fake, "POST", "/workloads/trainings", workload("trainings"), token)
    assert status == 429 and headers["Retry-After"] == "2"
    assert fake.workloads == {}  # an injected failure changes nothing
    fake.fail_next(500, path_prefix="/api/v1/token", body="upstream exploded")
    status, _, answer = call(fake, "POST", "/token", {"grantType": "client_credentials"})
    assert status == 500 and answer == "upstream exploded"
    assert create(fake, token, "trainings")


def test_malformed_next(fake, token):
    fake.malformed_next(path_prefix="/org-unit")
    status, headers, answer = call(fake, "GET", "/org-unit/projects", token=token)
    assert (
        status == 200 and headers["Content-Type"] == "application/json" and isinstance(answer, str)
    )
    with pytest.raises(ValueError):
        json.loads(answer)
    assert call(fake, "GET", "/org-unit/projects", token=token)[2]["projects"]


def test_requests_are_recorded(fake, token):
    body = workload("trainings")
    create(fake, token, "trainings", body)
    call(fake, "GET", "/org-unit/projects?filterBy=name==llmb-qa&limit=5", token=token)
    call(fake, "POST", "/workloads/trainings", token=token, raw=b"not json")
    token_req, create_req, list_req, bad_req = fake.requests
    assert (token_req.method, token_req.path, token_req.body["grantType"]) == (
        "POST",
        "/api/v1/token",
        "client_credentials",
    )
    assert (create_req.method, create_req.path, create_req.body) == (
        "POST",
        "/api/v1/workloads/trainings",
        body,
    )
    assert create_req.headers["authorization"] == f"Bearer {token}"
    assert create_req.headers["content-type"] == "application/json"
    assert (list_req.method, list_req.query, list_req.body) == (
        "GET",
        {"filterBy": "name==llmb-qa", "limit": "5"},
        None,
    )
    assert bad_req.body == "not json"
    with pytest.raises(AttributeError):
        bad_req.body = None


def test_workloads_are_listed_and_filtered(fake, token):
    first = create(
        fake, token, "trainings", workload("trainings", useGivenNameAsPrefix=False, name="first")
    )
    create(
        fake,
        token,
        "distributed",
        workload("distributed", useGivenNameAsPrefix=False, name="second"),
    )
    status, _, listed = call(fake, "GET", "/workloads", token=token)
    assert status == 200 and [w["name"] for w in listed["workloads"]] == ["first", "second"]
    assert listed["workloads"][0] == {
        **listed["workloads"][0],
        "id": first["workloadId"],
        "type": "training",
        "projectId": "2",
        "clusterId": CLUSTER_ID,
    }
    _, _, one = call(fake, "GET", "/workloads?filterBy=name==second", token=token)
    assert [w["name"] for w in one["workloads"]] == ["second"]
    _, _, page = call(fake, "GET", "/workloads?limit=1", token=token)
    assert len(page["workloads"]) == 1 and page["next"] == 1
    assert call(fake, "GET", "/workloads?filterBy=colour==red", token=token)[0] == 400
    assert call(fake, "GET", "/workloads")[0] == 401
    call(fake, "DELETE", f"/workloads/trainings/{first['workloadId']}", token=token)
    _, _, live = call(fake, "GET", "/workloads", token=token)
    _, _, deleted = call(fake, "GET", "/workloads?deleted=true", token=token)
    assert [w["name"] for w in live["workloads"]] == ["second"] and [
        w["name"] for w in deleted["workloads"]
    ] == ["first"]


def test_a_name_taken_in_the_project_is_409(fake, token):
    body = workload("trainings", useGivenNameAsPrefix=False, name="once")
    create(fake, token, "trainings", body)
    status, _, answer = call(fake, "POST", "/workloads/trainings", body, token)
    assert status == 409 and "already exists" in answer["message"] and len(fake.workloads) == 1


def test_fail_next_can_echo_the_request_and_match_a_method(fake, token):
    fake.fail_next(400, method="POST", body=lambda r: f"you sent {r.headers['authorization']}")
    assert call(fake, "GET", "/org-unit/projects", token=token)[0] == 200  # another method
    status, _, text = call(fake, "POST", "/workloads/trainings", workload("trainings"), token)
    assert (status, text) == (400, f"you sent Bearer {token}") and fake.workloads == {}


def test_reset_after_next_takes_effect_then_resets(fake, token):
    fake.reset_after_next(path_prefix="/workloads/trainings")
    with pytest.raises((ConnectionError, urllib.error.URLError)):
        call(fake, "POST", "/workloads/trainings", workload("trainings"), token)
    assert len(fake.workloads) == 1  # created, though nobody was told


def test_redirect_next_sends_the_client_to_another_server(fake, token):
    with FakeRunai() as elsewhere:
        fake.redirect_next(
            elsewhere.url.removesuffix("/api/v1"), status=307, path_prefix="/clusters"
        )
        status, _, answer = call(fake, "GET", "/clusters?x=1", token=token)
        assert status == 401 and answer["message"] == "unknown or revoked token"
        (followed,) = elsewhere.requests
        assert (followed.path, followed.query) == ("/api/v1/clusters", {"x": "1"})
        # what plain urllib does: the token leaves
        assert followed.headers["authorization"] == f"Bearer {token}"


def test_drip_next_answers_a_byte_at_a_time(fake, token):
    fake.drip_next(0.3, path_prefix="/clusters")
    port = int(fake.url.split(":")[2].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            f"GET /api/v1/clusters HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
        )
        first = sock.recv(1024)
    # the status line too comes a byte at a time
    assert b"HTTP/1.1 200 OK".startswith(first) and len(first) < 12
    fake.drip_next(0.001, path_prefix="/clusters")
    request = urllib.request.Request(
        fake.url + "/clusters", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert [c["name"] for c in json.loads(response.read())] == ["dgx-cloud", "lab"]


@pytest.mark.parametrize("declare_length", [True, False])
def test_flood_next_writes_as_much_as_asked(fake, token, declare_length):
    fake.flood_next(3_000_000, path_prefix="/org-unit/projects", declare_length=declare_length)
    request = urllib.request.Request(
        fake.url + "/org-unit/projects", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert (response.headers.get("Content-Length") is not None) == declare_length
        body = response.read()
    assert len(body) == 3_000_000 and body.startswith(b'[{"id": "0"')


# ----- execution mode -----

RECORD = (
    "import os, pathlib; e = os.environ.get; "
    "pathlib.Path(e('OUT_DIR'), 'rank-' + e('RANK', 'unset')).write_text("
    "' '.join(e(k, '-') for k in ('WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT', 'PET_NNODES', 'PET_NODE_RANK', 'LLMB_RUN'))); "
    "print('hello from', e('RANK', 'unset'))"
)


def executed(kind: str, out_dir, code: str, num_workers: int = 1) -> dict:
    body = workload(kind)
    body["spec"]["args"] = f'-c "{code}"'
    body["spec"]["storage"]["pvc"][0]["path"] = str(out_dir)
    body["spec"]["environmentVariables"].append({"name": "OUT_DIR", "value": str(out_dir)})
    if kind == "distributed":
        body["spec"]["numWorkers"] = num_workers
    return body


@pytest.fixture
def runner():
    with FakeRunai(execute=True, python=sys.executable) as f:
        yield f


def wait_phase(fake, token, kind, workload_id, wanted, timeout=30):
    return wait_for(
        lambda: phase(fake, token, kind, workload_id) in wanted,
        timeout=timeout,
        what=f"phase in {wanted}",
    )


def test_execute_training(runner, tmp_path):
    token = get_token(runner)
    out = tmp_path / "pvc" / "results"  # created by the fake, like a mounted volume
    workload_id = create(runner, token, "trainings", executed("trainings", out, RECORD))[
        "workloadId"
    ]
    wait_phase(runner, token, "trainings", workload_id, {"Completed"})
    # a training is a plain job: the PyTorch operator's variables are not there
    assert (out / "rank-unset").read_text() == "- - - - - 1"
    assert "hello from unset" in runner.pod_logs(workload_id)


def test_execute_distributed_two_pods(runner, tmp_path):
    token = get_token(runner)
    workload_id = create(runner, token, "distributed", executed("distributed", tmp_path, RECORD))[
        "workloadId"
    ]
    wait_phase(runner, token, "distributed", workload_id, {"Completed"})
    master, worker = (
        (tmp_path / "rank-0").read_text().split(),
        (tmp_path / "rank-1").read_text().split(),
    )
    assert (
        master[:2] == worker[:2] == ["2", "127.0.0.1"]
        and master[2] == worker[2]
        and master[2].isdigit()
    )
    assert (master[3:], worker[3:]) == (["2", "0", "1"], ["2", "1", "1"])
    logs = runner.pod_logs(workload_id)
    assert "-master-0 <==" in logs and "-worker-0 <==" in logs and "hello from 1" in logs


def test_execute_distributed_gloo_all_reduce(runner, tmp_path):
    pytest.importorskip("torch")
    code = (
        "import os, pathlib, torch, torch.distributed as dist; dist.init_process_group('gloo'); "
        "t = torch.ones(1) * (dist.get_rank() + 1); dist.all_reduce(t); "
        "pathlib.Path(os.environ['OUT_DIR'], 'sum-' + os.environ['RANK']).write_text(str(int(t.item()))); "
        "dist.barrier(); dist.destroy_process_group()"  # gloo may abort at exit when the group is left open
    )
    token = get_token(runner)
    workload_id = create(runner, token, "distributed", executed("distributed", tmp_path, code))[
        "workloadId"
    ]
    wait_phase(runner, token, "distributed", workload_id, {"Completed", "Failed"}, timeout=120)
    assert phase(runner, token, "distributed", workload_id) == "Completed", runner.pod_logs(
        workload_id
    )
    assert (tmp_path / "sum-0").read_text() == (tmp_path / "sum-1").read_text() == "3"


def test_execute_failing_pod_fails_the_workload(runner, tmp_path):
    code = "import os, sys, time; sys.exit(3) if os.environ['RANK'] == '1' else time.sleep(60)"
    token = get_token(runner)
    workload_id = create(runner, token, "distributed", executed("distributed", tmp_path, code))[
        "workloadId"
    ]
    wait_phase(runner, token, "distributed", workload_id, {"Failed"})
    _, _, answer = call(runner, "GET", f"/workloads/distributed/{workload_id}", token=token)
    assert "-worker-0" in answer["phaseMessage"] and "code 3" in answer["phaseMessage"]
    _, _, events = call(runner, "GET", f"/workloads/{workload_id}/events", token=token)
    assert any(
        e["type"] == "Warning" and e["reason"] == "BackoffLimitExceeded" for e in events["events"]
    )
    master = runner.workloads[workload_id]["procs"][0]
    wait_for(lambda: master.poll() is not None, timeout=10, what="the master pod to be killed")


def test_execute_suspend_kills_a_sleeping_pod(runner, tmp_path):
    token = get_token(runner)
    body = executed(
        "trainings", tmp_path, "import time; print('sleeping', flush=True); time.sleep(60)"
    )
    workload_id = create(runner, token, "trainings", body)["workloadId"]
    wait_phase(runner, token, "trainings", workload_id, {"Running"})
    assert (
        call(runner, "POST", f"/workloads/trainings/{workload_id}/suspend", token=token)[0] == 202
    )
    assert phase(runner, token, "trainings", workload_id) == "Stopping"
    wait_phase(runner, token, "trainings", workload_id, {"Stopped"}, timeout=10)
    assert runner.workloads[workload_id]["procs"][0].returncode == -15  # SIGTERM was enough


def test_execute_delete_and_stop_kill_pods(tmp_path):
    with FakeRunai(execute=True, python=sys.executable) as f:
        token = get_token(f)
        sleeper = executed("trainings", tmp_path, "import time; time.sleep(60)")
        deleted = create(f, token, "trainings", sleeper)["workloadId"]
        kept = create(f, token, "trainings", sleeper)["workloadId"]
        for workload_id in (deleted, kept):
            wait_phase(f, token, "trainings", workload_id, {"Running"})
        assert call(f, "DELETE", f"/workloads/trainings/{deleted}", token=token)[0] == 202
        wait_for(
            lambda: f.workloads[deleted]["procs"][0].poll() is not None,
            timeout=10,
            what="the deleted pod to end",
        )
    assert f.workloads[kept]["procs"][0].poll() is not None  # stop() ended it


def test_execute_needs_a_command(runner):
    body = workload("trainings")
    del body["spec"]["command"]
    status, _, answer = call(runner, "POST", "/workloads/trainings", body, get_token(runner))
    assert status == 400 and "spec.command" in answer["message"]


def test_execute_a_command_that_cannot_start_fails(runner, tmp_path):
    body = executed("trainings", tmp_path, "pass")
    body["spec"]["command"] = "/nonexistent/binary"
    token = get_token(runner)
    workload_id = create(runner, token, "trainings", body)["workloadId"]
    wait_phase(runner, token, "trainings", workload_id, {"Failed"})
    assert "could not start" in runner.workloads[workload_id]["phaseMessage"]


def test_a_bug_in_the_fake_fails_the_test_that_used_it():
    """Issue 36: the fake answered its own exceptions with a 500, which llmb retries, so a bug in
    the fake could pass unseen; now the block that used it fails, naming the bug."""
    with pytest.raises(AssertionError, match="fake_runai had internal errors.*ZeroDivisionError"):
        with FakeRunai() as f:
            f._route = lambda req: 1 / 0
            status, _, answer = call(f, "GET", "/org-unit/projects")
            assert status == 500 and "fake_runai internal error" in answer["message"]
