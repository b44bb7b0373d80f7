"""A test double of Run:ai's control-plane REST API (``/api/v1``), written from its documentation.

Endpoints served (all JSON; errors are ``{"code": <status>, "message": ...}`` like the documented
``Error`` schema):

- ``POST /api/v1/token``: grants ``client_credentials`` (``clientID``/``clientSecret``), the older
  ``app_token`` (``appID``/``appSecret``) and ``refresh_token``. 200 ``{accessToken, idToken,
  refreshToken, expiresIn}``; an older cluster (``app_token_only``) leaves ``expiresIn`` out, as the
  pre-v3 ``TokenResponse`` did (the token is a JWT whose ``exp`` claim still tells the expiry).
- ``GET /api/v1/org-unit/projects`` (``filterBy``, ``search``, ``offset``, ``limit``), and
  ``GET /api/v1/clusters`` (a JSON array of ``{uuid, name, ...}``).
- ``POST /api/v1/workloads/{distributed|trainings}`` (strictly validated; a name already taken in
  the project is 409), ``GET``/``DELETE .../{id}``, ``POST .../{id}/suspend``, ``GET
  /api/v1/workloads`` (the live workloads' generic views: ``filterBy``, ``offset``, ``limit``;
  ``{"workloads": [...], "next": ...}``), ``GET /api/v1/workloads/{id}`` (the generic view, which
  carries ``phase`` and ``phaseMessage``) and ``GET /api/v1/workloads/{id}/events`` (``offset``,
  ``limit``, ``sortOrder``, newest first by default).

Hostile behaviours, each for the next matching requests: ``fail_next`` (an error, its body possibly
echoing the request), ``reset_after_next`` (the request takes effect, then the connection is reset
unanswered), ``redirect_next`` (to another origin), ``drip_next`` (the answer a byte at a time) and
``flood_next`` (an endless answer).

Phases are scripted (one step per GET) unless ``execute=True``, where each workload's pods run as
local processes with the environment the PyTorch training operator gives a PyTorchJob's pods.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shlex
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

API = "/api/v1"
PHASES = (
    "Creating",
    "Initializing",
    "Resuming",
    "Pending",
    "Deleting",
    "Running",
    "Updating",
    "Stopped",
    "Stopping",
    "Degraded",
    "Failed",
    "Completed",
    "Terminating",
    "Unknown",
)
DEFAULT_PHASES = ["Creating", "Pending", "Running", "Completed"]
CLUSTER_ID = "0b4c9e3a-58f1-4d0e-9a57-2c61f0d7e8a4"
OTHER_CLUSTER_ID = "7d2e6f15-93ab-4c8e-b1d0-4f5a6e7c8d90"
# GET /api/v1/clusters answers a JSON array of clusters (uuid, name, ...), as documented.
DEFAULT_CLUSTERS = [
    {"uuid": "0b4c9e3a-58f1-4d0e-9a57-2c61f0d7e8a4", "name": "dgx-cloud", "tenantId": 1},
    {"uuid": "7d2e6f15-93ab-4c8e-b1d0-4f5a6e7c8d90", "name": "lab", "tenantId": 1},
]
DEFAULT_PROJECTS = [
    {"id": "2", "name": "llmb-qa", "clusterId": CLUSTER_ID},
    {"id": "5", "name": "other-team", "clusterId": OTHER_CLUSTER_ID},
]
KILL_GRACE_S = 5.0
# The fields of the generic workload view (GET /workloads/{id}, and each item of GET /workloads) it fills.
GENERIC_FIELDS = {
    "id",
    "name",
    "type",
    "phase",
    "phaseMessage",
    "clusterId",
    "projectId",
    "projectName",
    "createdAt",
    "deletedAt",
    "submittedBy",
    "runningPods",
}

# Field names from the documented request schemas (WorkloadCreationMeta, DistributedSpec, TrainingSpec).
TOP_KEYS = {"name", "projectId", "clusterId", "useGivenNameAsPrefix", "templateId", "spec"}
DISTRIBUTED_TOP_KEYS = {"masterSpecSameAsWorker", "masterSpec"}
SPEC_KEYS = {
    "annotations",
    "args",
    "autoDeletionTimeAfterCompletionSeconds",
    "backoffLimit",
    "category",
    "command",
    "compute",
    "createHomeDir",
    "environmentVariables",
    "exposedUrls",
    "image",
    "imagePullPolicy",
    "imagePullSecrets",
    "labels",
    "nodeAffinityRequired",
    "nodePools",
    "nodeType",
    "podAffinity",
    "ports",
    "preemptibility",
    "priorityClass",
    "probes",
    "relatedUrls",
    "restartPolicy",
    "security",
    "stdin",
    "storage",
    "terminateAfterPreemption",
    "terminationGracePeriodSeconds",
    "tolerations",
    "tty",
    "workingDir",
}
DISTRIBUTED_SPEC_KEYS = {
    "cleanPodPolicy",
    "distributedFramework",
    "maxReplicas",
    "minReplicas",
    "mpiLauncherCreationPolicy",
    "numWorkers",
    "slotsPerWorker",
    "sshAuthMountPath",
}
TRAINING_SPEC_KEYS = {"completions", "parallelism"}
COMPUTE_KEYS = {
    "cpuCoreLimit",
    "cpuCoreRequest",
    "cpuMemoryLimit",
    "cpuMemoryRequest",
    "extendedResources",
    "gpuDevicesRequest",
    "gpuMemoryLimit",
    "gpuMemoryRequest",
    "gpuPortionLimit",
    "gpuPortionRequest",
    "gpuRequestType",
    "largeShmRequest",
}
STORAGE_KEYS = {
    "configMapVolume",
    "dataVolume",
    "emptyDirVolume",
    "git",
    "hostPath",
    "nfs",
    "pvc",
    "s3",
    "secretVolume",
}
PVC_KEYS = {
    "name",
    "path",
    "existingPvc",
    "claimName",
    "readOnly",
    "ephemeral",
    "claimInfo",
    "dataSharing",
    "exclude",
}
ENV_KEYS = {
    "name",
    "value",
    "secret",
    "configMap",
    "podFieldRef",
    "userCredential",
    "exclude",
    "description",
}
FRAMEWORKS = {"MPI", "PyTorch", "TF", "XGBoost", "JAX"}
RESTART_POLICIES = {"Always", "Never", "OnFailure"}
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)
FILTER_RE = re.compile(r"^(\w+)(==|!=|<=|>=|=@|!@|=\^|=\$)(.+)$")
FILTER_OPS = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
    "=@": lambda a, b: b in a,
    "!@": lambda a, b: b not in a,
    "=^": str.startswith,
    "=$": str.endswith,
}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict  # name -> value (the last one when repeated)
    headers: dict  # lower-case names
    body: Any  # parsed JSON, the raw text when not JSON, None when empty


class _Reply(Exception):
    """Raised while handling a request to answer it at once with an error."""

    def __init__(self, status: int, message: str = "", headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def _bad(message: str) -> _Reply:
    return _Reply(400, message)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeRunai:
    """The fake control plane. ``requests`` records every request in order; ``workloads`` maps each
    created workload's id to its record (``kind``: "distributed" or "trainings", ``body``: the creation
    request, ``name``, ``phase``, ``phaseMessage``, ``events``, ``pods``: pod names, ``procs``: the
    pods' processes in execution mode, ...)."""

    def __init__(
        self,
        *,
        client_id="llmb-qa",
        client_secret="s3cret",
        projects=None,
        token_ttl=3600.0,
        args_limit=10_000,
        app_token_only=False,
        client_credentials_only=False,
        execute=False,
        python=None,
    ):
        self.client_id, self.client_secret = client_id, client_secret
        self.projects = [dict(p) for p in (DEFAULT_PROJECTS if projects is None else projects)]
        self.token_ttl, self.args_limit = float(token_ttl), args_limit
        self.app_token_only, self.client_credentials_only = app_token_only, client_credentials_only
        self.execute, self.python = execute, python
        self.url = ""
        self.log_dir: Path | None = None
        self.requests: list[Request] = []
        self.workloads: dict[str, dict] = {}
        self._tokens: dict[str, float] = {}  # access token -> monotonic expiry
        self._expire_at_get: int | None = None  # expire_tokens_at_get's
        self._refresh_tokens: set[str] = set()
        self._faults: list[dict] = []
        self._phases, self._messages = list(DEFAULT_PHASES), {}
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._stopping = False
        self.internal_errors: list[str] = []  # the fake's own bugs: __exit__ fails the test on them

    # ----- lifecycle -----

    def start(self) -> FakeRunai:
        if self.execute:  # kept after stop(), for debugging
            self.log_dir = Path(tempfile.mkdtemp(prefix="fake-runai-"))
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                fake._serve(self)

            do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{API}"
        return self

    def stop(self) -> None:
        self._stopping = True
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            procs = [p for w in self.workloads.values() for p in w["procs"]]
        _kill(procs)

    def __enter__(self) -> FakeRunai:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        if self.internal_errors and exc[0] is None:
            raise AssertionError(
                "fake_runai had internal errors (answered as 500s, which llmb retries): "
                + "; ".join(self.internal_errors)
            )

    # ----- knobs for tests -----

    def fail_next(
        self,
        status: int,
        times: int = 1,
        path_prefix: str = "",
        body: str | Callable[[Request], str] | None = None,
        retry_after: float | None = None,
        method: str | None = None,
    ) -> None:
        """Answer the next ``times`` requests whose path starts with ``path_prefix`` (with or without
        ``/api/v1``) and, when given, whose method is ``method`` with ``status``, before any other
        processing (nothing is created or changed). ``body`` may be a function of the request (a
        server that echoes what it was sent)."""
        headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
        self._add_fault(
            "reply", times, path_prefix, method, status=status, body=body, headers=headers
        )

    def malformed_next(self, times: int = 1, path_prefix: str = "") -> None:
        """Answer the next matching requests 200 with a truncated, unparsable JSON body."""
        self._add_fault(
            "reply", times, path_prefix, None, status=200, body='{"code": 200, "mess', headers={}
        )

    def reset_after_next(
        self, times: int = 1, path_prefix: str = "", method: str | None = None
    ) -> None:
        """Handle the next matching requests in full (a POST creates its workload), then reset the
        connection (TCP RST) instead of answering: the client cannot know it took effect."""
        self._add_fault("reset", times, path_prefix, method)

    def redirect_next(
        self,
        location: str,
        status: int = 302,
        times: int = 1,
        path_prefix: str = "",
        method: str | None = None,
    ) -> None:
        """Answer the next matching requests with a redirect to ``location`` followed by the request's
        own path and query (``location`` is another server: another origin)."""
        self._add_fault(
            "redirect", times, path_prefix, method, status=status, location=location.rstrip("/")
        )

    def drip_next(
        self, interval: float, times: int = 1, path_prefix: str = "", method: str | None = None
    ) -> None:
        """Answer the next matching requests as usual, but one byte (status line and headers too) every
        ``interval`` seconds."""
        self._add_fault("drip", times, path_prefix, method, interval=interval)

    def flood_next(
        self,
        size: int,
        times: int = 1,
        path_prefix: str = "",
        method: str | None = None,
        declare_length: bool = True,
    ) -> None:
        """Answer the next matching requests 200 with ``size`` bytes of JSON array, written as fast as
        the client reads them: with that Content-Length, or (``declare_length=False``) none at all,
        the answer ending when the connection closes."""
        self._add_fault(
            "flood", times, path_prefix, method, size=size, declare_length=declare_length
        )

    def _add_fault(
        self, action: str, times: int, prefix: str, method: str | None, **details
    ) -> None:
        with self._lock:
            self._faults.append(
                {"action": action, "times": times, "prefix": prefix, "method": method, **details}
            )

    def expire_tokens(self) -> None:
        with self._lock:
            self._tokens.clear()

    def expire_tokens_at_get(self, gets: int) -> None:
        """Every access token expires as a workload's ``gets``-th GET is answered: mid-job whatever
        the machine's load (a timer fired before a loaded machine's llmb had asked for its token)."""
        with self._lock:
            self._expire_at_get = gets

    def script_phases(self, phases: list[str], messages: dict[str, str] | None = None) -> None:
        unknown = [p for p in phases if p not in PHASES]
        if not phases or unknown:
            raise ValueError(f"phases must be a non-empty list of {PHASES}; unknown: {unknown}")
        with self._lock:
            self._phases, self._messages = list(phases), dict(messages or {})

    def add_event(self, workload_id: str, type: str, reason: str, message: str) -> None:
        with self._lock:
            self._event(self.workloads[workload_id], type, reason, message)

    def pod_logs(self, workload_id: str) -> str:
        """Every pod's output (execution mode), each after a ``==> <pod name> <==`` line."""
        wl = self.workloads[workload_id]
        parts = []
        for index, pod in enumerate(wl["pods"]):
            path = self.log_dir / f"pod-{workload_id}-{index}.log" if self.log_dir else None
            text = path.read_text(errors="replace") if path and path.exists() else ""
            parts.append(f"==> {pod} <==\n{text}")
        return "\n".join(parts)

    # ----- HTTP plumbing -----

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        split = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length).decode("utf-8", "replace") if length else ""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        req = Request(
            h.command,
            split.path,
            dict(parse_qsl(split.query, keep_blank_values=True)),
            {k.lower(): v for k, v in h.headers.items()},
            body,
        )
        with self._lock:
            self.requests.append(req)
            fault = self._take_fault(req)
        action = fault["action"] if fault else None
        headers = {}
        if action == "flood":
            return self._flood(h, fault)
        if action == "reply":
            status, headers, text = fault["status"], fault["headers"], fault["body"]
            if callable(text):
                text = text(req)
            if text is None:
                text = json.dumps(
                    {"code": status, "message": h.responses.get(status, ("Injected failure",))[0]}
                )
        elif action == "redirect":
            status, headers = fault["status"], {"Location": fault["location"] + h.path}
            text = json.dumps({"code": status, "message": "moved"})
        else:
            status, headers, text = self._answer(req)
            if action == "reset":
                return _reset(h)
        data = text.encode()
        head = [
            f"HTTP/1.1 {status} {h.responses.get(status, ('',))[0]}",
            "Content-Type: application/json",
            f"Content-Length: {len(data)}",
            *(f"{k}: {v}" for k, v in headers.items()),
        ]
        if action == "drip":
            return self._drip(
                h, ("\r\n".join(head) + "\r\n\r\n").encode() + data, fault["interval"]
            )
        h.send_response(status)
        for line in head[1:]:
            h.send_header(*line.split(": ", 1))
        h.end_headers()
        h.wfile.write(data)

    def _answer(self, req: Request) -> tuple[int, dict, str]:
        headers = {}
        try:
            status, payload = self._route(req)
        except _Reply as reply:
            status, headers, payload = (
                reply.status,
                reply.headers,
                {"code": reply.status, "message": reply.message},
            )
        except Exception as error:  # a bug in the fake: say so rather than drop the connection
            status, payload = 500, {"code": 500, "message": f"fake_runai internal error: {error!r}"}
            # and fail the test that used it (__exit__): llmb retries a 500, which would hide the bug
            self.internal_errors.append(f"{req.method} {req.path}: {error!r}")
        return status, headers, json.dumps(payload)

    def _drip(self, h: BaseHTTPRequestHandler, data: bytes, interval: float) -> None:
        h.close_connection = True
        for i in range(len(data)):
            if self._stopping:
                return
            try:
                h.wfile.write(data[i : i + 1])
            except OSError:  # the client gave up
                return
            time.sleep(interval)

    def _flood(self, h: BaseHTTPRequestHandler, fault: dict) -> None:
        h.close_connection = True
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        if fault["declare_length"]:
            h.send_header("Content-Length", str(fault["size"]))
        else:
            h.send_header("Connection", "close")
        h.end_headers()
        item = b'{"id": "0", "name": "flood", "clusterId": "' + CLUSTER_ID.encode() + b'"},'
        chunk = item * (65536 // len(item))
        sent = 0
        try:
            h.wfile.write(b"[")
            while sent < fault["size"] - 1 and not self._stopping:
                part = chunk[: fault["size"] - 1 - sent]
                h.wfile.write(part)
                sent += len(part)
        except OSError:  # the client stopped reading and closed
            pass

    def _take_fault(self, req: Request) -> dict | None:
        for fault in self._faults:
            prefix = fault["prefix"]
            if (
                fault["times"] > 0
                and (req.path.startswith(prefix) or req.path.startswith(API + prefix))
                and fault["method"] in (None, req.method)
            ):
                fault["times"] -= 1
                return fault
        return None

    def _route(self, req: Request) -> tuple[int, Any]:
        if not req.path.startswith(API + "/"):
            raise _Reply(404, f"no route for {req.path}")
        route, method = req.path[len(API) :], req.method
        if route == "/token":
            _allow(method, "POST")
            return self._token(req.body)
        self._authenticate(req.headers.get("authorization", ""))
        with self._lock:
            if route == "/org-unit/projects":
                _allow(method, "GET")
                return 200, self._list_projects(req.query)
            if route == "/clusters":
                _allow(method, "GET")
                return 200, [dict(c) for c in DEFAULT_CLUSTERS]
            if route == "/workloads":
                _allow(method, "GET")
                return 200, self._list_workloads(req.query)
            if m := re.fullmatch(r"/workloads/(distributed|trainings)", route):
                _allow(method, "POST")
                return 202, self._create(m[1], req.body)
            if m := re.fullmatch(r"/workloads/(distributed|trainings)/([^/]+)", route):
                _allow(method, "GET", "DELETE")
                wl = self._find(m[2], m[1])
                if method == "DELETE":
                    return self._delete(wl)
                return 200, self._view(self._observe(wl))
            if m := re.fullmatch(r"/workloads/(distributed|trainings)/([^/]+)/suspend", route):
                _allow(method, "POST")
                return self._suspend(self._find(m[2], m[1]))
            if m := re.fullmatch(r"/workloads/([^/]+)/events", route):
                _allow(method, "GET")
                return 200, self._list_events(self._find(m[1]), req.query)
            if m := re.fullmatch(r"/workloads/([^/]+)", route):
                _allow(method, "GET")
                return 200, self._generic_view(self._observe(self._find(m[1])))
        raise _Reply(404, f"no route for {req.path}")

    # ----- authentication -----

    def _token(self, body) -> tuple[int, dict]:
        if not isinstance(body, dict):
            raise _bad("the request body must be a JSON object")
        grant = body.get("grantType")
        if grant == "refresh_token":
            with self._lock:
                if body.get("refreshToken") not in self._refresh_tokens:
                    raise _Reply(401, "invalid refresh token")
            return 200, self._issue()
        fields = {
            "client_credentials": ("clientID", "clientSecret"),
            "app_token": ("appID", "appSecret"),
        }.get(grant)
        if (
            fields is None
            or (grant == "client_credentials" and self.app_token_only)
            or (grant == "app_token" and self.client_credentials_only)
        ):
            raise _bad(f"unsupported grantType {grant!r}")
        given = [body.get(f) for f in fields]
        if not all(isinstance(v, str) and v for v in given):
            raise _bad(f"{fields[0]} and {fields[1]} are required for grantType {grant!r}")
        if given != [self.client_id, self.client_secret]:
            raise _Reply(401, "invalid client credentials")
        return 200, self._issue()

    def _issue(self) -> dict:
        now = time.time()
        claims = {
            "iss": self.url,
            "sub": self.client_id,
            "iat": int(now),
            "exp": int(now + self.token_ttl),
            "jti": secrets.token_hex(8),
        }
        access = ".".join(
            [
                _b64(b'{"alg":"RS256","typ":"JWT"}'),
                _b64(json.dumps(claims).encode()),
                _b64(secrets.token_bytes(32)),
            ]
        )
        refresh = secrets.token_urlsafe(32)
        with self._lock:
            self._tokens[access] = time.monotonic() + self.token_ttl
            self._refresh_tokens.add(refresh)
        answer = {
            "accessToken": access,
            "idToken": secrets.token_urlsafe(32),
            "refreshToken": refresh,
        }
        if not self.app_token_only:
            answer["expiresIn"] = int(self.token_ttl)
        return answer

    def _authenticate(self, header: str) -> None:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _Reply(401, "missing bearer token")
        with self._lock:
            expiry = self._tokens.get(token.strip())
        if expiry is None:
            raise _Reply(401, "unknown or revoked token")
        if time.monotonic() >= expiry:
            raise _Reply(401, "token is expired")

    # ----- projects -----

    def _list_projects(self, query: dict) -> dict:
        found = _filtered(list(self.projects), query)
        if search := query.get("search"):
            found = [p for p in found if search.lower() in str(p.get("name", "")).lower()]
        return _page(found, query, "projects")

    # ----- workloads -----

    def _list_workloads(self, query: dict) -> dict:
        """The generic views of the live workloads (of the deleted ones with ``deleted=true``), as listed."""
        deleted = query.get("deleted", "false") == "true"
        views = [
            self._generic_view(wl)
            for wl in self.workloads.values()
            if (wl["deletedAt"] is not None) == deleted
        ]
        return _page(_filtered(views, query, GENERIC_FIELDS), query, "workloads")

    def _find(self, workload_id: str, kind: str | None = None) -> dict:
        wl = self.workloads.get(workload_id)
        if wl is None or wl["state"] == "gone" or (kind is not None and wl["kind"] != kind):
            raise _Reply(404, f"workload {workload_id} not found")
        return wl

    def _create(self, kind: str, body) -> dict:
        name, project = self._validate(kind, body)
        workload_id = str(uuid.uuid4())
        final = name
        if body.get("useGivenNameAsPrefix"):
            final = f"{name}-{''.join(secrets.choice('abcdefghijklmnopqrstuvwxyz0123456789') for _ in range(5))}"
        if len(final) > 63 or not DNS1123_LABEL.match(final):
            what = (
                "prefix of a DNS-1123 label (with the 6-character suffix)"
                if final != name
                else "DNS-1123 label"
            )
            raise _bad(
                f"name: {name!r} is not a valid {what}: lower-case letters, digits and '-', "
                "starting and ending with a letter or digit, at most 63 characters"
            )
        if any(
            w["name"] == final and w["projectId"] == body["projectId"] and w["state"] != "gone"
            for w in self.workloads.values()
        ):
            raise _Reply(
                409, f"a workload named {final} already exists in project {body['projectId']}"
            )
        spec = body["spec"]
        if kind == "distributed":
            pods = [f"{final}-master-0"] + [
                f"{final}-worker-{i}" for i in range(spec["numWorkers"])
            ]
        else:
            pods = [f"{final}-0-0"]
        wl = self.workloads[workload_id] = {
            "kind": kind,
            "body": body,
            "id": workload_id,
            "name": final,
            "requestedName": name,
            "projectId": body["projectId"],
            "projectName": project.get("name", ""),
            "clusterId": body["clusterId"],
            "createdAt": _now(),
            "createdBy": self.client_id,
            "desiredPhase": "Running",
            "phase": "Creating",
            "phaseMessage": "",
            "script": list(self._phases),
            "messages": dict(self._messages),
            "gets": 0,
            "state": "active",
            "stop_seen": False,
            "deletedAt": None,
            "pods": pods,
            "procs": [],
            "events": [],
        }
        if self.execute:
            threading.Thread(target=self._run_pods, args=(wl,), daemon=True).start()
        return self._view(wl)

    def _validate(self, kind: str, body) -> tuple[str, dict]:
        if not isinstance(body, dict):
            raise _bad("the request body must be a JSON object")
        allowed = TOP_KEYS | (DISTRIBUTED_TOP_KEYS if kind == "distributed" else set())
        for key in body:
            if key not in allowed:
                where = "in a training" if key in DISTRIBUTED_TOP_KEYS else "here"
                raise _bad(f"{key}: field not allowed {where}")
        for key in ("name", "projectId", "clusterId"):
            if not isinstance(body.get(key), str) or not body[key]:
                raise _bad(f"{key}: required, a non-empty string")
        if not UUID_RE.match(body["clusterId"]):
            raise _bad("clusterId: must be a UUID")
        if "useGivenNameAsPrefix" in body and not isinstance(body["useGivenNameAsPrefix"], bool):
            raise _bad("useGivenNameAsPrefix: must be a boolean")
        project = next(
            (
                p
                for p in self.projects
                if str(p.get("id")) == body["projectId"] and p.get("clusterId") == body["clusterId"]
            ),
            None,
        )
        if project is None:
            raise _bad(
                f"projectId {body['projectId']!r} does not exist in cluster {body['clusterId']}"
            )
        spec = body.get("spec")
        if not isinstance(spec, dict):
            raise _bad("spec: required, an object")
        extra = DISTRIBUTED_SPEC_KEYS if kind == "distributed" else TRAINING_SPEC_KEYS
        for key in spec:
            if key not in SPEC_KEYS | extra:
                where = "here"
                if key in DISTRIBUTED_SPEC_KEYS | TRAINING_SPEC_KEYS:
                    where = (
                        "in a distributed workload" if kind == "distributed" else "in a training"
                    )
                raise _bad(f"spec.{key}: field not allowed {where}")
        _string(spec, "image", required=True)
        _string(spec, "command", required=self.execute)
        _string(spec, "args")
        _string(spec, "workingDir")
        if len(spec.get("args") or "") > self.args_limit:
            raise _bad(
                f"spec.args: {len(spec['args'])} characters, more than the {self.args_limit} allowed"
            )
        self._validate_compute(spec.get("compute"))
        self._validate_storage(spec.get("storage"))
        self._validate_env(spec.get("environmentVariables"))
        _integer(spec, "backoffLimit", minimum=0)
        if spec.get("restartPolicy") is not None and spec["restartPolicy"] not in RESTART_POLICIES:
            raise _bad(f"spec.restartPolicy: must be one of {sorted(RESTART_POLICIES)}")
        if kind == "distributed":
            if spec.get("distributedFramework") not in FRAMEWORKS:
                raise _bad(f"spec.distributedFramework: required, one of {sorted(FRAMEWORKS)}")
            _integer(spec, "numWorkers", minimum=1, required=True)
            _integer(spec, "minReplicas", minimum=1)
            _integer(spec, "maxReplicas", minimum=1)
            if (
                _is_int(spec.get("minReplicas"))
                and _is_int(spec.get("maxReplicas"))
                and spec["maxReplicas"] < spec["minReplicas"]
            ):
                raise _bad("spec.maxReplicas: cannot be smaller than spec.minReplicas")
            if body.get("masterSpecSameAsWorker") is not True or "masterSpec" in body:
                raise _bad(
                    "masterSpecSameAsWorker: must be true, without a masterSpec (no separate master spec here)"
                )
        else:
            _integer(spec, "completions", minimum=1)
            _integer(spec, "parallelism", minimum=1)
        return body["name"], project

    def _validate_compute(self, compute) -> None:
        if compute is None:
            return
        if not isinstance(compute, dict):
            raise _bad("spec.compute: must be an object")
        for key in compute:
            if key not in COMPUTE_KEYS:
                raise _bad(f"spec.compute.{key}: field not allowed here")
        _integer(compute, "gpuDevicesRequest", minimum=0, where="spec.compute")
        if compute.get("largeShmRequest") is not None and not isinstance(
            compute["largeShmRequest"], bool
        ):
            raise _bad("spec.compute.largeShmRequest: must be a boolean")

    def _validate_storage(self, storage) -> None:
        if storage is None:
            return
        if not isinstance(storage, dict):
            raise _bad("spec.storage: must be an object")
        for key in storage:
            if key not in STORAGE_KEYS:
                raise _bad(f"spec.storage.{key}: field not allowed here")
        pvcs = storage.get("pvc")
        if pvcs is None:
            return
        if not isinstance(pvcs, list):
            raise _bad("spec.storage.pvc: must be a list")
        for i, pvc in enumerate(pvcs):
            where = f"spec.storage.pvc[{i}]"
            if not isinstance(pvc, dict):
                raise _bad(f"{where}: must be an object")
            for key in pvc:
                if key not in PVC_KEYS:
                    raise _bad(f"{where}.{key}: field not allowed here")
            _string(pvc, "path", required=True, where=where)
            _string(pvc, "name", where=where)
            _string(pvc, "claimName", where=where)
            for flag in ("existingPvc", "readOnly", "ephemeral", "dataSharing", "exclude"):
                if pvc.get(flag) is not None and not isinstance(pvc[flag], bool):
                    raise _bad(f"{where}.{flag}: must be a boolean")
            if len(pvc.get("claimName") or "") > 63:
                raise _bad(f"{where}.claimName: at most 63 characters")
            if pvc.get("existingPvc") and (
                not pvc.get("claimName") or pvc.get("claimInfo") is not None
            ):
                raise _bad(f"{where}: an existing PVC needs a claimName and no claimInfo")

    def _validate_env(self, env) -> None:
        if env is None:
            return
        if not isinstance(env, list):
            raise _bad("spec.environmentVariables: must be a list")
        for i, item in enumerate(env):
            where = f"spec.environmentVariables[{i}]"
            if not isinstance(item, dict):
                raise _bad(f"{where}: must be an object")
            for key in item:
                if key not in ENV_KEYS:
                    raise _bad(f"{where}.{key}: field not allowed here")
            _string(item, "name", required=True, where=where)
            if item.get("value") is not None and not isinstance(item["value"], str):
                raise _bad(f"{where}.value: must be a string")

    def _observe(self, wl: dict) -> dict:
        """One GET of the workload: advance its scripted phase (or read its pods' state)."""
        if wl["state"] == "deleting":
            wl["state"], wl["phase"], wl["phaseMessage"] = "gone", "Deleting", ""
        elif wl["state"] == "suspending":
            busy = any(p.poll() is None for p in wl["procs"])
            wl["phase"] = "Stopped" if wl["stop_seen"] and not busy else "Stopping"
            wl["stop_seen"], wl["phaseMessage"] = True, ""
        elif not self.execute:
            wl["phase"] = wl["script"][min(wl["gets"], len(wl["script"]) - 1)]
            wl["phaseMessage"] = wl["messages"].get(wl["phase"], "")
            wl["gets"] += 1
            if wl["gets"] == self._expire_at_get:
                self._tokens.clear()
                self._expire_at_get = None
        return wl

    def _view(self, wl: dict) -> dict:
        view = {
            "name": wl["name"],
            "requestedName": wl["requestedName"],
            "workloadId": wl["id"],
            "projectId": wl["projectId"],
            "clusterId": wl["clusterId"],
            "createdBy": wl["createdBy"],
            "createdAt": wl["createdAt"],
            "deletedAt": wl["deletedAt"],
            "desiredPhase": wl["desiredPhase"],
            "actualPhase": wl["phase"],
            "phaseMessage": wl["phaseMessage"],
            "spec": wl["body"]["spec"],
        }
        if wl["kind"] == "distributed":
            view["masterSpecSameAsWorker"] = True
        return view

    def _generic_view(self, wl: dict) -> dict:
        return {
            "id": wl["id"],
            "name": wl["name"],
            "type": "distributed" if wl["kind"] == "distributed" else "training",
            "phase": wl["phase"],
            "phaseMessage": wl["phaseMessage"],
            "clusterId": wl["clusterId"],
            "projectId": wl["projectId"],
            "projectName": wl["projectName"],
            "createdAt": wl["createdAt"],
            "deletedAt": wl["deletedAt"],
            "submittedBy": wl["createdBy"],
            "runningPods": sum(p.poll() is None for p in wl["procs"]),
        }

    def _suspend(self, wl: dict) -> tuple[int, dict]:
        if wl["state"] == "deleting":
            raise _Reply(404, f"workload {wl['id']} not found")
        if wl["state"] == "active":
            wl["state"], wl["stop_seen"], wl["desiredPhase"] = "suspending", False, "Stopped"
            self._event(wl, "Normal", "Suspended", "Workload suspended")
            threading.Thread(target=_kill, args=(list(wl["procs"]),), daemon=True).start()
        return 202, {"code": 202, "message": "Request has been accepted."}

    def _delete(self, wl: dict) -> tuple[int, dict]:
        wl["state"], wl["desiredPhase"], wl["deletedAt"] = "deleting", "Deleted", _now()
        threading.Thread(target=_kill, args=(list(wl["procs"]),), daemon=True).start()
        return 202, {"code": 202, "message": "Request has been accepted."}

    # ----- events -----

    def _event(
        self, wl: dict, type: str, reason: str, message: str, pod: str | None = None
    ) -> None:
        event = {
            "createdAt": _now(),
            "id": str(uuid.uuid4()),
            "type": type,
            "clusterId": wl["clusterId"],
            "message": message,
            "reason": reason,
            "source": "kubelet" if pod else "runai",
        }
        if pod:
            namespace = f"runai-{wl['projectName']}"
            event["involvedObject"] = {
                "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, pod)),
                "kind": "Pod",
                "name": pod,
                "namespace": namespace,
            }
        wl["events"].append(event)

    def _list_events(self, wl: dict, query: dict) -> dict:
        order = query.get("sortOrder", "desc")
        if order not in ("asc", "desc"):
            raise _bad("sortOrder: must be asc or desc")
        events = wl["events"] if order == "asc" else wl["events"][::-1]
        return _page(events, query, "events")

    # ----- execution mode -----

    def _run_pods(self, wl: dict) -> None:
        try:
            self._start_pods(wl)
        # a pod that cannot even be set up fails the workload, it does not hang it
        except Exception as error:
            self._fail(
                wl,
                str(error)
                if isinstance(error, RuntimeError)
                else f"cannot start the pods: {error!r}",
            )
            return
        self._watch_pods(wl)

    def _start_pods(self, wl: dict) -> None:
        spec = wl["body"]["spec"]
        argv = shlex.split(spec.get("command") or "") + shlex.split(spec.get("args") or "")
        if self.python and argv and argv[0] in ("python3", "python"):
            argv[0] = self.python
        for pvc in (spec.get("storage") or {}).get("pvc") or []:
            Path(pvc["path"]).mkdir(parents=True, exist_ok=True)
        env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
        env.update(
            {e["name"]: e.get("value") or "" for e in spec.get("environmentVariables") or []}
        )
        port, size = _free_port(), len(wl["pods"])
        workdir = spec.get("workingDir")
        cwd = workdir if workdir and os.path.isdir(workdir) else self.log_dir
        with self._lock:
            wl["phase"] = "Pending"
        for index, pod in enumerate(wl["pods"]):
            pod_env = dict(env)
            # what the training operator adds to a PyTorchJob's pods
            if wl["kind"] == "distributed":
                pod_env.update(
                    {
                        "PYTHONUNBUFFERED": "1",
                        "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(port),
                        "PET_MASTER_ADDR": "127.0.0.1",
                        "PET_MASTER_PORT": str(port),
                        "WORLD_SIZE": str(size),
                        "RANK": str(index),
                        "PET_NODE_RANK": str(index),
                        "PET_NNODES": str(size),
                    }
                )
            with open(self.log_dir / f"pod-{wl['id']}-{index}.log", "wb") as log:
                try:
                    proc = subprocess.Popen(
                        argv,
                        env=pod_env,
                        cwd=cwd,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                except OSError as error:
                    log.write(f"cannot start {argv!r}: {error}\n".encode())
                    raise RuntimeError(f"pod {pod} could not start: {error}") from None
            with self._lock:
                wl["procs"].append(proc)
                self._event(wl, "Normal", "Started", "Started container", pod)
        with self._lock:
            if wl["state"] == "active":
                wl["phase"] = "Running"
                return
            procs = list(wl["procs"])
        _kill(procs)  # suspended or deleted while its pods were being started

    def _watch_pods(self, wl: dict) -> None:
        while not self._stopping:
            time.sleep(0.05)
            with self._lock:
                if wl["state"] != "active":
                    return
                codes = [p.poll() for p in wl["procs"]]
                failed = next((i for i, c in enumerate(codes) if c not in (None, 0)), None)
                if failed is None and None not in codes:
                    wl["phase"] = "Completed"
                    self._event(wl, "Normal", "Completed", "All pods completed")
                    return
            if failed is not None:
                self._fail(wl, f"pod {wl['pods'][failed]} exited with code {codes[failed]}")
                return

    def _fail(self, wl: dict, why: str) -> None:
        with self._lock:
            if wl["state"] != "active":
                return
            wl["phase"], wl["phaseMessage"] = "Failed", why
            self._event(
                wl,
                "Warning",
                "BackoffLimitExceeded",
                f"Job has reached the specified backoff limit: {why}",
            )
            procs = list(wl["procs"])
        _kill(procs)


def _allow(method: str, *allowed: str) -> None:
    if method not in allowed:
        raise _Reply(405, f"method {method} not allowed", {"Allow": ", ".join(allowed)})


def _string(obj: dict, key: str, required: bool = False, where: str = "spec") -> None:
    value = obj.get(key)
    if value is None and not required:
        return
    if not isinstance(value, str) or not value:
        raise _bad(f"{where}.{key}: {'required, ' if required else 'must be '}a non-empty string")


def _integer(
    obj: dict, key: str, minimum: int, required: bool = False, where: str = "spec"
) -> None:
    value = obj.get(key)
    if value is None and not required:
        return
    if not _is_int(value) or value < minimum:
        raise _bad(
            f"{where}.{key}: {'required, ' if required else 'must be '}an integer >= {minimum}"
        )


def _filtered(items: list[dict], query: dict, fields: set[str] | None = None) -> list[dict]:
    """``items`` that pass every ``filterBy`` clause (comma-separated ``field<op>value``)."""
    for clause in filter(None, query.get("filterBy", "").split(",")):
        m = FILTER_RE.match(clause)
        if not m:
            raise _bad(f"filterBy: cannot parse {clause!r}")
        field, op, value = m.groups()
        if fields is not None and field not in fields:
            raise _bad(f"filterBy: unknown field {field!r}")
        items = [i for i in items if FILTER_OPS[op](str(i.get(field, "")), value)]
    return items


def _reset(h: BaseHTTPRequestHandler) -> None:
    """Close the connection with a TCP reset, unanswered."""
    h.close_connection = True
    h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    h.connection.close()  # the descriptor closes (RST) once the handler's reader is closed


def _page(items: list, query: dict, key: str) -> dict:
    try:
        offset, limit = int(query.get("offset", 0)), int(query.get("limit", 50))
    except ValueError:
        raise _bad("offset and limit must be integers") from None
    if offset < 0 or not 1 <= limit <= 500:
        raise _bad("offset must be >= 0 and limit between 1 and 500")
    page = {key: items[offset : offset + limit]}
    if offset + limit < len(items):
        page["next"] = offset + limit
    return page


def _kill(procs: list[subprocess.Popen], grace: float = KILL_GRACE_S) -> None:
    """SIGTERM each pod's process group, then SIGKILL what is left after ``grace`` seconds."""
    for proc in procs:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    # The whole group (the pod's children too), even when its first process is gone: Linux does not
    # hand out a pid again while a process group of that id still has members.
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
