"""The Run:ai client against a hostile control plane (tests/fake_runai.py's hostile knobs, on 127.0.0.1):
a redirect to another origin, plain http, errors that echo the token or the secret, an answer that
drips, an answer without end, and a POST that takes effect while its connection is reset."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from fake_runai import API, FakeRunai
from llmb import http_safety
from test_runai_backend import NEMOTRON4, SECRET, runai_env, workload_requests


@pytest.fixture
def fake():
    with FakeRunai(client_secret=SECRET) as server:
        yield server


@pytest.fixture
def env(fake, tmp_path):
    return runai_env(fake.url, tmp_path)


def origin(url: str) -> str:
    return url[: -len(API)]


def tokens_issued(server: FakeRunai) -> set[str]:
    return {
        r.headers["authorization"].split()[1]
        for r in server.requests
        if "authorization" in r.headers
    }


def assert_not_shown(env, texts, *secrets):
    """No secret in ``texts``, not even a 16-character piece of one; none in a file under the install."""
    for secret in secrets:
        pieces = {secret[i : i + 16] for i in range(max(1, len(secret) - 15))}
        for text in texts:
            assert not any(piece in text for piece in pieces), secret
        for path in Path(env["LLMB_INSTALL"]).rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path


# ----- 3a: the token stays on its origin -----


def test_the_token_does_not_follow_a_redirect_to_another_origin(llmb_proc, env, fake):
    with FakeRunai(client_secret=SECRET) as elsewhere:
        # another port: another origin
        fake.redirect_next(origin(elsewhere.url), path_prefix="/org-unit/projects")
        fake.redirect_next(origin(fake.url), path_prefix="/org-unit/projects")  # the same origin
        result = llmb_proc("run", *NEMOTRON4, "--detach", env=env)
        assert result.code == 0, result.err
        (followed,) = elsewhere.requests
        assert (
            followed.path == "/api/v1/org-unit/projects" and "authorization" not in followed.headers
        )
    gets = [r for r in fake.requests if r.path == "/api/v1/org-unit/projects"]
    # redirected away; sent again after the 401 from there, redirected home; followed
    assert len(gets) == 3
    # kept within its origin
    assert all(r.headers["authorization"].startswith("Bearer ") for r in gets)
    assert len(fake.workloads) == 1


def test_a_redirect_to_plain_http_is_refused_unless_allowed(fake):
    with FakeRunai() as elsewhere:
        fake.redirect_next(origin(elsewhere.url), path_prefix="/clusters")
        request = urllib.request.Request(
            fake.url + "/clusters", headers={"Authorization": "Bearer abc"}
        )
        with pytest.raises(http_safety.RedirectRefused, match="only https is allowed"):
            http_safety.fetch(request, deadline_s=10, max_bytes=1 << 20, schemes=("https",))
        assert elsewhere.requests == []


# ----- 3b: plain http only when asked for -----


def test_a_plain_http_base_url_is_refused_without_the_option(llmb_proc, env, fake):
    for plain in (
        {k: v for k, v in env.items() if k != "RUNAI_ALLOW_HTTP"},
        {**env, "RUNAI_ALLOW_HTTP": "0"},
    ):
        result = llmb_proc("run", *NEMOTRON4, "--detach", env=plain)
        assert result.code == 2 and "Traceback" not in result.err
        assert (
            f"BASE_URL {fake.url} is plain http" in result.err
            and "RUNAI_ALLOW_HTTP=1" in result.err
        )
    wrong = llmb_proc("run", *NEMOTRON4, "--detach", env={**env, "RUNAI_ALLOW_HTTP": "yes"})
    assert wrong.code == 2 and "runai allow_http 'yes': valid: 0, 1" in wrong.err
    assert fake.requests == []  # nothing was sent, not even the secret
    allowed = llmb_proc(
        "run",
        *NEMOTRON4,
        "--backend-opt",
        "allow_http=1",
        "--detach",
        env={k: v for k, v in env.items() if k != "RUNAI_ALLOW_HTTP"},
    )
    assert allowed.code == 0, allowed.err


# ----- 3c: what a server echoes is masked -----


def test_errors_that_echo_the_token_or_the_secret_do_not_show_them(llmb_proc, env, fake):
    fake.fail_next(
        503,
        times=2,
        path_prefix="/org-unit/projects",  # retried: a log line each time
        body=lambda r: json.dumps(
            {"code": 503, "message": f"busy; you sent {r.headers['authorization']}"}
        ),
    )
    fake.fail_next(
        403,
        path_prefix="/org-unit/projects",
        body=lambda r: json.dumps(
            {
                "code": 403,
                "message": f"token {r.headers['authorization'].split()[1]} may not list projects",
            }
        ),
    )
    result = llmb_proc("run", *NEMOTRON4, "--detach", env=env)
    assert result.code == 2 and "Run:ai answered 403: token *** may not list projects" in result.err
    assert "busy; you sent Bearer ***" in result.err  # the retries' log lines, masked too
    (token,) = tokens_issued(fake)

    fake.requests.clear()

    # An error page (not JSON) with the bare token across the place where the shown text is cut (200 characters).
    def cut_token(request):
        token = request.headers["authorization"].split()[1]
        return "x" * max(0, 220 - len(token)) + token

    fake.fail_next(404, path_prefix="/org-unit/projects", body=cut_token)
    page = llmb_proc("run", *NEMOTRON4, "--detach", env=env)
    assert page.code == 2 and "Run:ai answered 404" in page.err
    (second,) = tokens_issued(fake)

    # The token request's error echoes its body: the secret.
    fake.fail_next(
        400,
        path_prefix="/token",
        times=2,
        body=lambda r: json.dumps({"message": f"bad body {r.body}"}),
    )
    refused = llmb_proc("run", *NEMOTRON4, "--detach", env=env)
    assert (
        refused.code == 2
        and "refused the credentials" in refused.err
        and "'clientSecret': '***'" in refused.err
    )
    assert_not_shown(
        env,
        [result.out, result.err, page.out, page.err, refused.out, refused.err],
        token,
        second,
        SECRET,
    )


# ----- 3d: one deadline per request -----


def test_a_server_that_drips_its_answer_is_given_up_at_the_deadline(llmb_proc, env, fake):
    # the whole answer would take about a minute
    fake.drip_next(0.2, path_prefix="/org-unit/projects")
    result = llmb_proc(
        "run", *NEMOTRON4, "--detach", env={**env, "RUNAI_REQUEST_TIMEOUT": "2"}, timeout=60
    )
    assert result.code == 2 and "Traceback" not in result.err
    assert (
        "GET /org-unit/projects: Run:ai gave no complete answer within the 2 s allowed for one request"
        in result.err
    )
    assert [r.path for r in fake.requests].count(
        "/api/v1/org-unit/projects"
    ) == 1 and not workload_requests(fake)
    wrong = llmb_proc("run", *NEMOTRON4, "--detach", env={**env, "RUNAI_REQUEST_TIMEOUT": "soon"})
    assert wrong.code == 2 and "RUNAI_REQUEST_TIMEOUT 'soon': expected the seconds" in wrong.err


# ----- 3e: answers are bounded -----


@pytest.mark.parametrize("declare_length", [True, False])
def test_an_answer_without_end_is_refused(llmb_proc, env, fake, declare_length):
    fake.flood_next(500_000_000, path_prefix="/org-unit/projects", declare_length=declare_length)
    result = llmb_proc("run", *NEMOTRON4, "--detach", env=env, timeout=120)
    assert result.code == 2 and "Traceback" not in result.err
    assert "GET /org-unit/projects: Run:ai's answer is larger than 8 MiB" in result.err
    assert not workload_requests(fake)


# ----- 4: a workload is created once -----


def submitted(llmb_proc, env, fake) -> tuple[str, str]:
    """Submit; (job id, workload id), checking that exactly one workload exists and llmb tracks it."""
    result = llmb_proc("run", *NEMOTRON4, "--detach", "--json", env=env)
    assert result.code == 0, result.err
    job = json.loads(result.out)["job_id"]
    (workload_id,) = fake.workloads
    record = json.loads((Path(env["LLMB_INSTALL"]) / "jobs" / job / "job.json").read_text())
    assert record["details"]["runai"]["workload_id"] == workload_id
    assert record["details"]["runai"]["name"] == fake.workloads[workload_id]["name"]
    status = llmb_proc("status", job, "--json", env=env)
    assert json.loads(status.out)["state"] == "QUEUED", status.err
    assert fake.requests[-1].path == f"/api/v1/workloads/distributed/{workload_id}"
    return job, workload_id


def test_a_post_that_took_effect_before_its_connection_was_reset_is_not_sent_again(
    llmb_proc, env, fake
):
    fake.reset_after_next(path_prefix="/workloads/distributed", method="POST")
    submitted(llmb_proc, env, fake)
    assert len(workload_requests(fake, "POST")) == 1
    (lookup,) = [r for r in fake.requests if r.path == "/api/v1/workloads"]
    assert (
        lookup.method == "GET"
        and lookup.query["filterBy"] == f"name=={next(iter(fake.workloads.values()))['name']}"
    )


def test_a_post_that_failed_before_taking_effect_is_sent_again(llmb_proc, env, fake):
    fake.fail_next(502, path_prefix="/workloads/distributed", method="POST")
    submitted(llmb_proc, env, fake)
    assert len(workload_requests(fake, "POST")) == 2  # looked up in between, not found, sent again


def test_a_listing_that_lags_behind_still_makes_one_workload(llmb_proc, env, fake):
    fake.reset_after_next(path_prefix="/workloads/distributed", method="POST")
    # not listed yet
    fake.fail_next(200, method="GET", path_prefix="/workloads", body='{"workloads": []}')
    submitted(llmb_proc, env, fake)
    posts = workload_requests(fake, "POST")
    # the second was refused: 409
    assert len(posts) == 2 and posts[0].body["name"] == posts[1].body["name"]


def test_a_lost_answer_that_cannot_be_checked_is_not_sent_again_blindly(llmb_proc, env, fake):
    fake.reset_after_next(path_prefix="/workloads/distributed", method="POST")
    # and the lookup cannot be answered
    fake.fail_next(503, times=50, method="GET", path_prefix="/workloads")
    result = llmb_proc(
        "run", *NEMOTRON4, "--detach", env={**env, "RUNAI_REQUEST_TIMEOUT": "3"}, timeout=60
    )
    (created,) = fake.workloads.values()
    assert result.code == 2 and "Traceback" not in result.err
    assert (
        f"whether Run:ai created workload {created['name']} all the same could not be checked"
        in result.err
    )
    assert "look for it in project llmb-qa before submitting again" in result.err
    assert len(workload_requests(fake, "POST")) == 1
