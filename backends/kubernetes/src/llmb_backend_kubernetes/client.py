"""The Kubernetes API, as llmb uses it, through the official client (``kubernetes``).

Credentials: the kubeconfig (``KUBECONFIG``, else ``~/.kube/config``), its current context or the
one asked for; or, where llmb itself runs in a pod and no kubeconfig is there, the pod's service
account. The client holds them in memory; llmb writes none of them anywhere, and masks every token
of the configuration in whatever text of a server it shows. TLS is verified (the kubeconfig's
certificate authority, else the system's or the one ``SSL_CERT_FILE`` names): a context that says
``insecure-skip-tls-verify`` is refused, and so is a plain ``http://`` server unless ``allow_http``.

Every request has one deadline (``request_timeout``): a server that is down or does not answer
ends the command with a message that says which. Reads are retried on 429, 5xx and dropped
connections within it; a create is sent again only after looking the object up by its name (the
first may have arrived).
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections.abc import Callable

from llmb import LlmbError, UsageError, get_logger, http_safety

from llmb_backend_kubernetes.settings import KubeSettings

RETRIES = 4
BACKOFF_S = 0.25
MAX_WAIT_S = 5.0
SHOWN = 400  # characters of a server's message put into an error
MAX_LOG_BYTES = 64 << 20
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class KubeError(LlmbError):
    """The API server refused or could not answer (the message says which and why)."""

    def __init__(self, message: str, status: int | None = None, reason: str | None = None):
        super().__init__(message)
        self.status = status
        self.reason = reason


class KubeClient:
    def __init__(
        self,
        settings: KubeSettings,
        environ: dict,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.settings = settings
        self.environ = environ
        self.sleep, self.clock = sleep, clock
        self.log = get_logger("llmb.kubernetes")
        self.secrets: tuple[str, ...] = ()
        self.context_name, self.namespace, self.where = self._configure()

    # ------------------------------------------------------------ configuration

    def _configure(self) -> tuple[str, str, str]:
        from kubernetes import client as kclient
        from kubernetes.config import ConfigException, incluster_config, kube_config

        s = self.settings
        configuration = kclient.Configuration()
        kubeconfig = self.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        paths = [p for p in kubeconfig.split(os.pathsep) if p]
        in_cluster = not any(os.path.isfile(p) for p in paths) and bool(
            self.environ.get("KUBERNETES_SERVICE_HOST")
        )
        namespace = s.namespace
        try:
            if in_cluster:
                if s.context:
                    raise UsageError(
                        f"context {s.context!r} was asked for, but there is no kubeconfig "
                        f"({kubeconfig}) and llmb runs in a pod: drop the context to use the pod's "
                        f"service account, or point KUBECONFIG at a kubeconfig."
                    )
                incluster_config.InClusterConfigLoader(
                    token_filename=os.path.join(SERVICE_ACCOUNT_DIR, "token"),
                    cert_filename=os.path.join(SERVICE_ACCOUNT_DIR, "ca.crt"),
                ).load_and_set(configuration)
                context = "in-cluster service account"
                if namespace is None:
                    try:
                        with open(os.path.join(SERVICE_ACCOUNT_DIR, "namespace")) as handle:
                            namespace = handle.read().strip() or None
                    except OSError:
                        namespace = None
            else:
                if not any(os.path.isfile(p) for p in paths):
                    raise UsageError(
                        f"no kubeconfig at {kubeconfig} (KUBECONFIG, else ~/.kube/config), and llmb does "
                        f"not run in a pod: give llmb a kubeconfig for the cluster (the one kubectl uses), "
                        f"see docs/kubernetes.md."
                    )
                loader = kube_config._get_kube_config_loader(
                    filename=kubeconfig, persist_config=False
                )
                contexts = [c["name"] for c in loader.list_contexts()]
                if s.context and s.context not in contexts:
                    raise UsageError(
                        f"the kubeconfig {kubeconfig} has no context {s.context!r}; its contexts: "
                        f"{', '.join(contexts) or 'none'}."
                    )
                if s.context:
                    loader.set_active_context(s.context)
                loader.load_and_set(configuration)
                active = loader.current_context
                context = active["name"]
                if namespace is None:
                    namespace = (active.get("context") or {}).get("namespace") or None
        except (ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
            if in_cluster:
                raise UsageError(
                    f"there is no kubeconfig ({kubeconfig}) and llmb runs in a pod "
                    f"(KUBERNETES_SERVICE_HOST), but the pod's service account cannot be used "
                    f"({exc}; {SERVICE_ACCOUNT_DIR}): mount its token, or give llmb a kubeconfig."
                ) from None
            raise UsageError(
                f"cannot use the kubeconfig {kubeconfig}: {exc}. Check it with kubectl config view."
            ) from None
        self.secrets = tuple(
            str(v).split(" ", 1)[-1]
            for v in (configuration.api_key or {}).values()
            if v and isinstance(v, str)
        )
        host = configuration.host.rstrip("/")
        if host.startswith("http://") and not s.allow_http:
            raise UsageError(
                f"the Kubernetes API server of context {context} is plain http ({host}): credentials "
                f"would cross the network unencrypted. Use its https:// address, or set "
                f"LLMB_KUBE_ALLOW_HTTP=1 (or --backend-opt allow_http=1) on purpose, e.g. for a local "
                f"emulator."
            )
        if host.startswith("https://") and not configuration.verify_ssl:
            raise UsageError(
                f"context {context} says insecure-skip-tls-verify: llmb verifies the API server's TLS "
                f"certificate. Give the kubeconfig the cluster's certificate-authority instead."
            )
        http_safety.check_certificate_paths(self.environ)
        configuration.retries = False  # llmb retries, within one deadline a request
        self.host = host
        self.api = kclient.ApiClient(configuration)
        self.api.user_agent = "llmb-backend-kubernetes"
        return context, namespace or "default", f"{host} (context {context})"

    # ------------------------------------------------------------ plumbing

    def hide(self, text: str, limit: int | None = SHOWN) -> str:
        shown = http_safety.mask(str(text), self.secrets)
        return shown if limit is None or len(shown) <= limit else shown[:limit] + "..."

    def request(
        self,
        method: str,
        path: str,
        body: dict | None = None,
        query: dict | None = None,
        ok: tuple[int, ...] = (200, 201, 202),
        content_type: str = "application/json",
        retry: bool | None = None,
        raw: bool = False,
    ):
        """One call: the answer's JSON (bytes with ``raw``), or None for a 404 that ``ok`` lists.
        Retries reads (and ``retry``) on 429, 5xx and dropped connections, all by one deadline."""
        import urllib3

        retry = method == "GET" if retry is None else retry
        url = path + ("?" + urllib.parse.urlencode(query) if query else "")
        allowed = self.settings.request_timeout
        deadline = self.clock() + allowed
        headers = {"Accept": "application/json" if not raw else "*/*"}
        if body is not None:
            headers["Content-Type"] = content_type
        for attempt in range(RETRIES + 1):
            left = deadline - self.clock()
            if left <= 0:
                raise KubeError(
                    f"{method} {path}: the Kubernetes API server at {self.where} gave no answer within "
                    f"the {allowed:g} s allowed (LLMB_KUBE_REQUEST_TIMEOUT)"
                )
            try:
                params = self.api.param_serialize(
                    method=method,
                    resource_path=url,
                    header_params=dict(headers),
                    body=body,
                    auth_settings=["BearerToken"],
                )
                reply = self.api.call_api(*params, _request_timeout=(min(left, 10.0), left))
                data = reply.read()
                status = reply.status
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                refused = isinstance(exc, urllib3.exceptions.NewConnectionError | ConnectionError)
                timed_out = not refused and (
                    isinstance(exc, urllib3.exceptions.TimeoutError) or "timed out" in str(exc)
                )
                problem = (
                    f"gave no answer within the {allowed:g} s allowed (LLMB_KUBE_REQUEST_TIMEOUT)"
                    if timed_out
                    else f"cannot be reached ({_why(exc)})"
                )
                if timed_out or not retry or attempt == RETRIES:
                    raise KubeError(
                        f"{method} {path}: the Kubernetes API server at {self.where} {problem}"
                    ) from None
            except Exception as exc:  # noqa: BLE001 - the client's own errors (ApiException: TLS)
                raise KubeError(
                    f"{method} {path}: {self.where}: {self.hide(getattr(exc, 'reason', None) or exc)}"
                ) from None
            else:
                if status in ok or status < 300:
                    if status >= 400:  # a 404 (or a log not there yet) that ok lists
                        return None
                    if raw:
                        return data
                    try:
                        return json.loads(data) if data and data.strip() else {}
                    except ValueError:
                        raise KubeError(
                            f"{method} {path}: the API server answered {status} with a body that is not "
                            f"JSON: {self.hide(data.decode(errors='replace'), 200)!r}",
                            status,
                        ) from None
                said, reason = _status_message(data)
                if status not in (429,) and status < 500 or not retry or attempt == RETRIES:
                    raise self._refusal(method, path, status, said, reason)
                problem = f"{status} {said}"
            wait = min(MAX_WAIT_S, BACKOFF_S * 2**attempt)
            if self.clock() + wait >= deadline:
                raise KubeError(
                    f"{method} {path}: the Kubernetes API server at {self.where}: {self.hide(problem)}; "
                    f"no time is left for a retry within the {allowed:g} s allowed"
                )
            self.log.warning(
                "Kubernetes request retried", method=method, path=path, problem=self.hide(problem)
            )
            self.sleep(wait)
        raise AssertionError("unreachable")

    def _refusal(self, method: str, path: str, status: int, said: str, reason: str | None):
        said = self.hide(said)
        if status == 401:
            return KubeError(
                f"{method} {path}: the Kubernetes API server at {self.where} refused the credentials "
                f"(401 Unauthorized: {said}). Renew them (kubectl auth whoami tells whether they work).",
                status,
                reason,
            )
        if status == 403:
            return KubeError(
                f"{method} {path}: forbidden in namespace {self.namespace} (403: {said}). The "
                f"credentials of context {self.context_name} need the rights docs/kubernetes.md lists "
                f"(kubectl auth can-i create jobsets.jobset.x-k8s.io -n {self.namespace}).",
                status,
                reason,
            )
        return KubeError(
            f"{method} {path}: the API server answered {status}: {said}", status, reason
        )

    # ------------------------------------------------------------ what llmb asks

    def resources(self, group_version: str) -> list[str] | None:
        """The resource names the server serves under ``group_version`` (discovery), None if none."""
        path = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
        found = self.request("GET", path, ok=(200, 404))
        if found is None:
            return None
        return [r.get("name") for r in found.get("resources") or [] if isinstance(r, dict)]

    def group_versions(self, group: str) -> list[str] | None:
        found = self.request("GET", f"/apis/{group}", ok=(200, 404))
        if found is None:
            return None
        preferred = (found.get("preferredVersion") or {}).get("version")
        versions = [v.get("version") for v in found.get("versions") or [] if isinstance(v, dict)]
        return sorted(set(versions), key=lambda v: (v != preferred, v))

    def jobset_path(self, name: str | None = None) -> str:
        base = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{self.namespace}/jobsets"
        return base if name is None else f"{base}/{name}"

    def get_jobset(self, name: str) -> dict | None:
        return self.request("GET", self.jobset_path(name), ok=(200, 404))

    def create_jobset(self, manifest: dict) -> dict:
        """POST the JobSet, at most once: after a failed POST it is looked up by name before it is
        sent again, and a 409 after such a failure is the earlier POST's object when it carries this
        submission's job label."""
        name = manifest["metadata"]["name"]
        job_id = manifest["metadata"]["labels"]["llmb.nvidia.com/job"]
        sent = False
        for _attempt in range(3):
            try:
                return self.request(
                    "POST",
                    self.jobset_path(),
                    manifest,
                    query={"fieldValidation": "Strict"},
                    ok=(200, 201, 202),
                    retry=False,
                )
            except KubeError as exc:
                if exc.status == 409:
                    found = self.get_jobset(name) if sent else None
                    if (
                        found
                        and (found.get("metadata", {}).get("labels") or {}).get(
                            "llmb.nvidia.com/job"
                        )
                        == job_id
                    ):
                        return found
                    raise KubeError(
                        f"a JobSet named {name} already exists in namespace {self.namespace} (409 "
                        f"AlreadyExists); nothing was created. Submit again (llmb picks a fresh name).",
                        409,
                    ) from None
                if exc.status is not None and exc.status < 500:
                    raise
                sent = True
                try:
                    found = self.get_jobset(name)
                except KubeError as lookup:
                    raise KubeError(
                        f"{exc}; whether the JobSet {name} was created all the same could not be checked "
                        f"({lookup}): look for it (kubectl get jobset {name} -n {self.namespace}) before "
                        f"submitting again"
                    ) from None
                if found is not None:
                    return found
                self.sleep(BACKOFF_S)
        raise KubeError(f"POST {self.jobset_path()}: the JobSet {name} could not be created")

    def delete_jobset(self, name: str) -> None:
        self.request(
            "DELETE",
            self.jobset_path(name),
            {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Foreground"},
            ok=(200, 202, 404),
            retry=True,
        )

    def pods(self, jobset: str) -> list[dict]:
        """The JobSet's pods (by its label; filtered here again on the label)."""
        key = "jobset.sigs.k8s.io/jobset-name"
        found = self.request(
            "GET",
            f"/api/v1/namespaces/{self.namespace}/pods",
            query={"labelSelector": f"{key}={jobset}"},
        )
        return [
            p
            for p in (found or {}).get("items") or []
            if isinstance(p, dict)
            and ((p.get("metadata") or {}).get("labels") or {}).get(key) == jobset
        ]

    def pod_log(self, pod: str, container: str) -> bytes | None:
        return self.request(
            "GET",
            f"/api/v1/namespaces/{self.namespace}/pods/{pod}/log",
            query={"container": container, "limitBytes": MAX_LOG_BYTES},
            ok=(200, 400, 404),
            raw=True,
        )


def _status_message(data: bytes) -> tuple[str, str | None]:
    """(message, reason) of a Kubernetes Status answer, else its text."""
    try:
        body = json.loads(data)
    except (ValueError, TypeError):
        return (data or b"").decode(errors="replace").strip()[:SHOWN], None
    if isinstance(body, dict):
        return str(body.get("message") or body.get("reason") or body), body.get("reason")
    return str(body), None


def _why(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    text = str(reason)
    if "Connection refused" in text or "NewConnectionError" in type(reason).__name__:
        return "connection refused: is the API server up?"
    return text[:SHOWN] or type(reason).__name__
