"""Run:ai's control-plane REST API, as llmb uses it.

Authentication: ``POST /token`` with client credentials (or, on older
clusters, the app-token form); the access token is kept until shortly before
it expires and fetched again on a 401. 429 and 5xx answers and dropped
connections are retried with exponential backoff (``Retry-After`` honoured),
a bounded number of times, all within one deadline per request
(``request_timeout``). An answer is read up to ``MAX_BODY`` bytes; the token
follows no redirect to another origin; plain http only with ``allow_http``.
The application secret goes into the body of the token request and nowhere
else, and neither it nor a token appears in an error or a log line, even
when a server echoes them.

Creating a workload is done at most once: its name is unique to the
submission and sent as the exact name, and after a failed POST the workload
is looked up by that name before the POST is sent again.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from llmb import LlmbError, get_logger, http_safety

from llmb_backend_runai.settings import RunaiSettings

RETRIES = 5
BACKOFF_S = 0.5
MAX_WAIT_S = 30.0
TIMEOUT_S = 60.0  # one socket operation (within the request's deadline)
MAX_BODY = 8 << 20  # bytes of one answer; llmb's answers are a few kB
RENEW_BEFORE_S = 30.0  # renew a token this long before it expires (or at 90% of a short life)
SHOWN = 500  # characters of a server's message put into an error


class RunaiError(LlmbError):
    """Run:ai refused or could not answer a request (the message says which and why)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict
    headers: Mapping[str, str]


class RunaiClient:
    def __init__(
        self,
        settings: RunaiSettings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        timeout: float = TIMEOUT_S,
        max_body: int = MAX_BODY,
    ):
        self.settings = settings
        self.sleep = sleep
        self.clock = clock
        self.timeout = timeout
        self.max_body = max_body
        self.token: str | None = None
        # every token this client held: masked wherever a server's words are shown
        self.tokens: set[str] = set()
        self.expires_at = 0.0
        self.calls = 0
        self.log = get_logger("llmb.runai")

    # ------------------------------------------------------------ plumbing

    def hide(self, text: str, limit: int | None = None) -> str:
        """``text`` without the secret or any token (masked before it is cut to ``limit``)."""
        shown = http_safety.mask(text, (self.settings.app_secret, *self.tokens))
        return shown if limit is None or len(shown) <= limit else shown[:limit] + "..."

    def error(self, message: str, status: int | None = None) -> RunaiError:
        return RunaiError(self.hide(message), status)

    def _request(
        self, method: str, url: str, data: bytes | None, token: str | None
    ) -> urllib.request.Request:
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        return request

    def _send(
        self,
        method: str,
        path: str,
        body: dict | None,
        token: str | None,
        after_failure: Callable[[], Answer | None] | None = None,
    ) -> Answer:
        """One request: retries 429, 5xx and dropped connections, all by one deadline.

        ``after_failure`` is asked after each failed attempt (the request may have
        arrived all the same); an answer from it ends the request there."""
        url = self.settings.base_url + path
        data = None if body is None else json.dumps(body).encode()
        schemes = ("https", "http") if self.settings.allow_http else ("https",)
        allowed = self.settings.request_timeout
        deadline = self.clock() + allowed
        for attempt in range(RETRIES + 1):
            self.calls += 1
            retry_after, out_of_time = None, False
            try:
                reply = http_safety.fetch(
                    self._request(method, url, data, token),
                    deadline_s=deadline - self.clock(),
                    max_bytes=self.max_body,
                    timeout=self.timeout,
                    schemes=schemes,
                )
            except http_safety.TooLarge as exc:
                raise self.error(
                    f"{method} {path}: Run:ai's answer is larger than {exc.limit >> 20} MiB, far more "
                    f"than any answer llmb expects; refused without reading it all"
                ) from None
            except http_safety.RedirectRefused as exc:
                raise self.error(
                    f"{method} {path}: Run:ai redirected to {exc.url}, which is not https; refused "
                    f"(RUNAI_ALLOW_HTTP=1 allows plain http)"
                ) from None
            except http_safety.CertificateRefused as exc:  # a retry would be refused the same way
                raise self.error(f"{method} {path}: {exc}") from None
            except http_safety.DeadlineExceeded:
                problem, out_of_time = (
                    f"gave no complete answer within the {allowed:g} s allowed for one request",
                    True,
                )
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                problem = f"no answer ({_why(exc)})"
            else:
                if reply.status != 429 and reply.status < 500:
                    return self._answer(method, path, reply.status, reply.body, reply.headers)
                said = self.hide(_message(reply.body), SHOWN) or http.client.responses.get(
                    reply.status, ""
                )
                problem = f"{reply.status} {said}"
                retry_after = _seconds(reply.headers.get("Retry-After"))
            if after_failure is not None and (found := after_failure()) is not None:
                return found
            wait = min(
                MAX_WAIT_S, retry_after if retry_after is not None else BACKOFF_S * 2**attempt
            )
            if attempt == RETRIES:
                raise self.error(
                    f"{method} {path}: Run:ai {problem}, still after {RETRIES} retries"
                )
            if out_of_time or self.clock() + wait >= deadline:
                raise self.error(
                    f"{method} {path}: Run:ai {problem}"
                    + (
                        ""
                        if out_of_time
                        else f"; no time is left for a retry within the {allowed:g} s allowed for one request"
                    )
                    + f" (RUNAI_REQUEST_TIMEOUT sets it; {attempt} retries)"
                )
            self.log.warning(
                "Run:ai request retried",
                method=method,
                path=path,
                problem=self.hide(problem, SHOWN),
                wait_s=wait,
            )
            self.sleep(wait)
        raise AssertionError("unreachable")

    def _answer(self, method: str, path: str, status: int, raw: bytes, headers: dict) -> Answer:
        if status == 204 or not raw.strip():
            return Answer(status, {}, headers)
        try:
            body = json.loads(raw)
        except ValueError:
            shown = self.hide(raw.decode(errors="replace"), 200)
            if status >= 400:  # an error page: its text is the message
                return Answer(status, {"message": shown}, headers)
            raise self.error(
                f"{method} {path}: Run:ai answered {status} with a body that is not JSON: {shown!r}",
                status,
            ) from None
        if isinstance(body, list):
            body = {"items": body}  # a listing answered as a bare array (GET /clusters)
        if not isinstance(body, dict):
            raise self.error(
                f"{method} {path}: Run:ai answered {status} with JSON that is neither an object nor a "
                f"list",
                status,
            )
        return Answer(status, body, headers)

    # ------------------------------------------------------------ authentication

    def _grants(self) -> list[dict]:
        s = self.settings
        credentials = {
            "grantType": "client_credentials",
            "clientID": s.app_id,
            "clientSecret": s.app_secret,
        }
        app_token = {"grantType": "app_token", "appID": s.app_id, "appSecret": s.app_secret}
        return {"client_credentials": [credentials], "app_token": [app_token]}.get(
            s.grant, [credentials, app_token]
        )

    def authenticate(self) -> str:
        refused = []
        for body in self._grants():
            answer = self._send("POST", "/token", body, None)
            issued = answer.body.get("accessToken")
            if answer.status == 200 and isinstance(issued, str) and issued:
                self.tokens.update(
                    t
                    for t in (issued, answer.body.get("refreshToken"), answer.body.get("idToken"))
                    if isinstance(t, str) and t
                )
                life = _lifetime(answer.body)
                self.token = issued
                self.expires_at = self.clock() + max(0.0, life - min(RENEW_BEFORE_S, life * 0.1))
                return self.token
            refused.append(
                f"{body['grantType']}: {answer.status} {self.hide(_describe(answer.body), SHOWN)}"
            )
        raise self.error(
            f"Run:ai refused the credentials of application {self.settings.app_id!r} at "
            f"{self.settings.base_url} ({'; '.join(refused)}). Check APP_ID and APP_SECRET "
            f"(Access | Applications in the Run:ai UI).",
            401,
        )

    def _valid_token(self) -> str:
        if self.token is None or self.clock() >= self.expires_at:
            return self.authenticate()
        return self.token

    def call(
        self,
        method: str,
        path: str,
        body: dict | None = None,
        ok: tuple[int, ...] = (200, 201, 202),
        after_failure: Callable[[], Answer | None] | None = None,
    ) -> Answer:
        """An authenticated request; a 401 fetches a new token once."""
        answer = self._send(method, path, body, self._valid_token(), after_failure)
        if answer.status == 401:
            answer = self._send(method, path, body, self.authenticate(), after_failure)
        if answer.status not in ok:
            raise self.error(
                f"{method} {path}: Run:ai answered {answer.status}: "
                f"{self.hide(_describe(answer.body), SHOWN)}",
                answer.status,
            )
        return answer

    # ------------------------------------------------------------ the endpoints llmb uses

    def projects(self) -> list[dict]:
        projects = self.call("GET", "/org-unit/projects").body.get("projects")
        if not isinstance(projects, list):
            raise RunaiError("GET /org-unit/projects: Run:ai's answer has no projects list")
        return projects

    def clusters(self) -> list[dict]:
        return [
            c for c in self.call("GET", "/clusters").body.get("items", []) if isinstance(c, dict)
        ]

    def find(self, name: str, project_id: str) -> dict | None:
        """The live workload called ``name`` in the project, from ``GET /workloads?filterBy=name==<name>``."""
        query = urllib.parse.urlencode({"filterBy": f"name=={name}", "limit": 500})
        found = self.call("GET", f"/workloads?{query}").body.get("workloads")
        if not isinstance(found, list):
            raise RunaiError("GET /workloads: Run:ai's answer has no workloads list")
        return next(
            (
                w
                for w in found
                if isinstance(w, dict)
                and w.get("name") == name
                and str(w.get("projectId")) == project_id
            ),
            None,
        )

    def create(self, kind: str, body: dict) -> dict:
        """``POST /workloads/<kind>``, creating at most one workload.

        ``body["name"]`` must be unique to this submission and exact (not a prefix).
        A POST that failed may have arrived (the answer was lost): before sending it
        again, and after the last try, the workload is looked up by its name and,
        when there, taken as created. A 409 (the name is taken) after such a failure
        is the earlier POST's workload too."""
        path, name, project = f"/workloads/{kind}", body["name"], str(body["projectId"])
        failed = []

        def created_already() -> Answer | None:
            try:
                found = self.find(name, project)
            except RunaiError as exc:
                raise self.error(
                    f"POST {path} failed, and whether Run:ai created workload {name} all the same could "
                    f"not be checked ({exc}); look for it in project {self.settings.project} before "
                    f"submitting again"
                ) from None
            if found is None or not found.get("id"):
                return None
            self.log.warning(
                "Run:ai workload found after a failed submission; not sent again", name=name
            )
            return Answer(200, {"workloadId": found["id"], "name": found.get("name") or name}, {})

        def after_failure() -> Answer | None:
            failed.append(True)
            return created_already()

        answer = self.call("POST", path, body, ok=(200, 201, 202, 409), after_failure=after_failure)
        if answer.status == 409:
            adopted = created_already() if failed else None
            if adopted is None:
                raise self.error(
                    f"POST {path}: Run:ai answered 409: a workload named {name} already exists in "
                    f"project {self.settings.project} ({self.hide(_describe(answer.body), SHOWN)})",
                    409,
                )
            return adopted.body
        return answer.body

    def workload(self, kind: str, workload_id: str) -> dict | None:
        """The workload, or None when Run:ai no longer knows it (deleted)."""
        answer = self.call("GET", f"/workloads/{kind}/{workload_id}", ok=(200, 404))
        return None if answer.status == 404 else answer.body

    def phase_message(self, workload_id: str) -> str | None:
        """``phaseMessage`` from the generic workload view (the per-kind view may not carry it)."""
        answer = self.call("GET", f"/workloads/{workload_id}", ok=(200, 404))
        return answer.body.get("phaseMessage") or None if answer.status == 200 else None

    def events(self, workload_id: str) -> list[dict]:
        events = self.call("GET", f"/workloads/{workload_id}/events").body.get("events")
        return events if isinstance(events, list) else []

    def suspend(self, kind: str, workload_id: str) -> None:
        self.call("POST", f"/workloads/{kind}/{workload_id}/suspend", ok=(200, 202, 204))

    def delete(self, kind: str, workload_id: str) -> None:
        self.call("DELETE", f"/workloads/{kind}/{workload_id}", ok=(200, 202, 204, 404))


def _lifetime(token_answer: dict) -> float:
    """Seconds the access token lives: ``expiresIn``, else (older clusters) the JWT's ``exp`` claim."""
    if token_answer.get("expiresIn"):
        return float(token_answer["expiresIn"])
    try:
        import base64

        payload = token_answer["accessToken"].split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return max(0.0, float(claims["exp"]) - time.time())
    except (IndexError, KeyError, ValueError, TypeError):
        return 300.0  # unknown: renew often rather than use an expired token (a 401 renews anyway)


def _message(raw: bytes) -> str:
    try:
        return _describe(json.loads(raw))
    except (ValueError, TypeError):
        return ""


def _describe(body) -> str:
    """What a server's answer says (whole: mask it before cutting it short)."""
    if isinstance(body, dict):
        return str(body.get("message") or body.get("error") or body.get("details") or body)
    return str(body)


def _why(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    return str(reason) or type(reason).__name__


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
