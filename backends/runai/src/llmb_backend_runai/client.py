"""Run:ai's control-plane REST API, as llmb uses it.

Authentication: ``POST /token`` with client credentials (or, on older
clusters, the app-token form); the access token is kept until shortly before
it expires and fetched again on a 401. 429 and 5xx answers and dropped
connections are retried with exponential backoff (``Retry-After`` honoured),
a bounded number of times. The application secret goes into the body of the
token request and nowhere else: never into an error, a log line or a file.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from llmb.errors import LlmbError
from llmb.log import get_logger

from llmb_backend_runai.settings import RunaiSettings

RETRIES = 5
BACKOFF_S = 0.5
MAX_WAIT_S = 30.0
TIMEOUT_S = 60.0
RENEW_BEFORE_S = 30.0  # renew a token this long before it expires (or at 90% of a short life)


class RunaiError(LlmbError):
    """Run:ai refused or could not answer a request (the message says which and why)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict
    headers: dict


class RunaiClient:
    def __init__(self, settings: RunaiSettings, *, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic, timeout: float = TIMEOUT_S):
        self.settings = settings
        self.sleep = sleep
        self.clock = clock
        self.timeout = timeout
        self.token: str | None = None
        self.expires_at = 0.0
        self.calls = 0
        self.log = get_logger("llmb.runai")

    # ------------------------------------------------------------ plumbing

    def _hide(self, text: str) -> str:
        secret = self.settings.app_secret
        return text.replace(secret, "***") if secret else text

    def _send(self, method: str, path: str, body: dict | None, token: str | None) -> Answer:
        """One HTTP exchange; retries 429, 5xx and dropped connections."""
        url = self.settings.base_url + path
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(RETRIES + 1):
            request = urllib.request.Request(url, data=data, method=method)
            request.add_header("Accept", "application/json")
            if data is not None:
                request.add_header("Content-Type", "application/json")
            if token:
                request.add_header("Authorization", f"Bearer {token}")
            self.calls += 1
            retry_after = None
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return self._answer(method, path, response.status, response.read(), dict(response.headers))
            except urllib.error.HTTPError as exc:
                raw = exc.read()
                if exc.code != 429 and exc.code < 500:
                    return self._answer(method, path, exc.code, raw, dict(exc.headers or {}))
                problem = f"{exc.code} {_message(raw) or exc.reason}"
                retry_after = _seconds(exc.headers.get("Retry-After") if exc.headers else None)
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                problem = f"no answer ({getattr(exc, 'reason', exc)})"
            if attempt == RETRIES:
                raise RunaiError(self._hide(f"{method} {path}: Run:ai {problem}, still after {RETRIES} retries"))
            wait = min(MAX_WAIT_S, retry_after if retry_after is not None else BACKOFF_S * 2 ** attempt)
            self.log.warning("Run:ai request retried", method=method, path=path, problem=self._hide(problem),
                             wait_s=wait)
            self.sleep(wait)
        raise AssertionError("unreachable")

    def _answer(self, method: str, path: str, status: int, raw: bytes, headers: dict) -> Answer:
        if status == 204 or not raw.strip():
            return Answer(status, {}, headers)
        try:
            body = json.loads(raw)
        except ValueError:
            shown = self._hide(raw[:200].decode(errors="replace"))
            if status >= 400:  # an error page: its text is the message
                return Answer(status, {"message": shown}, headers)
            raise RunaiError(f"{method} {path}: Run:ai answered {status} with a body that is not JSON: {shown!r}",
                             status) from None
        if isinstance(body, list):
            body = {"items": body}  # a listing answered as a bare array (GET /clusters)
        if not isinstance(body, dict):
            raise RunaiError(f"{method} {path}: Run:ai answered {status} with JSON that is neither an object nor a "
                             f"list", status)
        return Answer(status, body, headers)

    # ------------------------------------------------------------ authentication

    def _grants(self) -> list[dict]:
        s = self.settings
        credentials = {"grantType": "client_credentials", "clientID": s.app_id, "clientSecret": s.app_secret}
        app_token = {"grantType": "app_token", "appID": s.app_id, "appSecret": s.app_secret}
        return {"client_credentials": [credentials], "app_token": [app_token]}.get(s.grant, [credentials, app_token])

    def authenticate(self) -> str:
        refused = []
        for body in self._grants():
            answer = self._send("POST", "/token", body, None)
            if answer.status == 200 and answer.body.get("accessToken"):
                life = _lifetime(answer.body)
                self.token = answer.body["accessToken"]
                self.expires_at = self.clock() + max(0.0, life - min(RENEW_BEFORE_S, life * 0.1))
                return self.token
            refused.append(f"{body['grantType']}: {answer.status} {self._hide(_describe(answer.body))}")
        raise RunaiError(f"Run:ai refused the credentials of application {self.settings.app_id!r} at "
                         f"{self.settings.base_url} ({'; '.join(refused)}). Check APP_ID and APP_SECRET "
                         f"(Access | Applications in the Run:ai UI).", 401)

    def _valid_token(self) -> str:
        if self.token is None or self.clock() >= self.expires_at:
            return self.authenticate()
        return self.token

    def call(self, method: str, path: str, body: dict | None = None, ok: tuple[int, ...] = (200, 201, 202)) -> Answer:
        """An authenticated request; a 401 fetches a new token once."""
        answer = self._send(method, path, body, self._valid_token())
        if answer.status == 401:
            answer = self._send(method, path, body, self.authenticate())
        if answer.status not in ok:
            raise RunaiError(self._hide(f"{method} {path}: Run:ai answered {answer.status}: {_describe(answer.body)}"),
                             answer.status)
        return answer

    # ------------------------------------------------------------ the endpoints llmb uses

    def projects(self) -> list[dict]:
        projects = self.call("GET", "/org-unit/projects").body.get("projects")
        if not isinstance(projects, list):
            raise RunaiError("GET /org-unit/projects: Run:ai's answer has no projects list")
        return projects

    def clusters(self) -> list[dict]:
        return [c for c in self.call("GET", "/clusters").body.get("items", []) if isinstance(c, dict)]

    def create(self, kind: str, body: dict) -> dict:
        return self.call("POST", f"/workloads/{kind}", body).body

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
    if isinstance(body, dict):
        return str(body.get("message") or body.get("error") or body.get("details") or body)[:500]
    return str(body)[:500]


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
