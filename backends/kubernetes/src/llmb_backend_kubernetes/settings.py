"""Where and how to submit: the Kubernetes backend's settings.

Each setting comes from, in this order: ``llmb run --backend-opt KEY=VALUE``, its environment
variable, the cluster file's ``kubernetes:`` section (``$LLMB_INSTALL/cluster.yaml``), the default.
The credentials are never a setting: they are the kubeconfig's (``KUBECONFIG``, else
``~/.kube/config``; its current context or ``context``), or the pod's service account when llmb
itself runs in the cluster.

    key                variable                      meaning
    context            LLMB_KUBE_CONTEXT             the kubeconfig context (default: its current one)
    namespace          LLMB_KUBE_NAMESPACE           the namespace (default: the context's, else default)
    volume             LLMB_KUBE_VOLUME              the install directory: pvc:CLAIM or hostPath:/path
    install_path       LLMB_KUBE_INSTALL_PATH        where the pods see it (default: the same path)
    queue              LLMB_KUEUE_QUEUE              a Kueue LocalQueue (kueue.x-k8s.io/queue-name)
    priority_class     LLMB_KUBE_PRIORITY_CLASS      the pods' priorityClassName
    image_pull_secret  LLMB_KUBE_IMAGE_PULL_SECRET   a Secret's name for the image pull
    service_account    LLMB_KUBE_SERVICE_ACCOUNT     the pods' service account
    secret             LLMB_KUBE_SECRET              the Secret holding HF_TOKEN and the --secret names
    rdma               LLMB_KUBE_RDMA                RDMA/InfiniBand resources: name=count[,...]
    python             LLMB_KUBE_PYTHON              the pods' Python (default python3)
    log                LLMB_KUBE_LOG                 volume (the pods write the log here) or api (copied)
    request_timeout    LLMB_KUBE_REQUEST_TIMEOUT     seconds one API request may take, retries included
    allow_http         LLMB_KUBE_ALLOW_HTTP          1: accept a plain http:// API server (a local emulator)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llmb import UsageError

KEYS = {
    "context": "LLMB_KUBE_CONTEXT",
    "namespace": "LLMB_KUBE_NAMESPACE",
    "volume": "LLMB_KUBE_VOLUME",
    "install_path": "LLMB_KUBE_INSTALL_PATH",
    "queue": "LLMB_KUEUE_QUEUE",
    "priority_class": "LLMB_KUBE_PRIORITY_CLASS",
    "image_pull_secret": "LLMB_KUBE_IMAGE_PULL_SECRET",
    "service_account": "LLMB_KUBE_SERVICE_ACCOUNT",
    "secret": "LLMB_KUBE_SECRET",
    "rdma": "LLMB_KUBE_RDMA",
    "python": "LLMB_KUBE_PYTHON",
    "log": "LLMB_KUBE_LOG",
    "request_timeout": "LLMB_KUBE_REQUEST_TIMEOUT",
    "allow_http": "LLMB_KUBE_ALLOW_HTTP",
}
FILE_ONLY_NOT = ("allow_http",)  # never from the cluster file: a choice for one shell, not the site
DEFAULTS = {"python": "python3", "request_timeout": "30", "allow_http": "0"}
CHOICES = {"log": ("volume", "api"), "allow_http": ("0", "1")}

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# an extended resource's name: [prefix/]name, the prefix a DNS subdomain (nvidia.com/hostdev, rdma/ib)
RESOURCE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
# which DNS-1123 form each named object takes, and its length limit
NAMES = {
    "namespace": ("label", 63),
    "queue": ("subdomain", 253),
    "priority_class": ("subdomain", 253),
    "image_pull_secret": ("subdomain", 253),
    "service_account": ("subdomain", 253),
    "secret": ("subdomain", 253),
    "claim": ("subdomain", 253),
}


@dataclass(frozen=True)
class Volume:
    kind: str  # pvc | hostPath
    source: str  # the claim's name, or the host's path


@dataclass(frozen=True)
class KubeSettings:
    context: str | None
    namespace: str | None  # None: the context's (resolved by the client)
    volume: Volume
    install_path: str | None  # None: the install directory's own path
    queue: str | None = None
    priority_class: str | None = None
    image_pull_secret: str | None = None
    service_account: str | None = None
    secret: str | None = None
    rdma: tuple[tuple[str, int], ...] = ()
    python: str = "python3"
    log: str | None = None  # None: volume where the pods see the install directory at its path here
    request_timeout: float = 30.0
    allow_http: bool = False

    def public(self) -> dict:
        """What a job record or a dry run may show (no credential is a setting)."""
        return {
            "context": self.context,
            "namespace": self.namespace,
            "volume": f"{self.volume.kind}:{self.volume.source}",
            "install_path": self.install_path,
            "queue": self.queue,
            "priority_class": self.priority_class,
            "image_pull_secret": self.image_pull_secret,
            "service_account": self.service_account,
            "secret": self.secret,
            "rdma": dict(self.rdma),
            "python": self.python,
            "log": self.log,
            "request_timeout": self.request_timeout,
            "allow_http": self.allow_http,
        }


def dns_name(value: str, what: str, where: str) -> str:
    """``value`` when it is a valid DNS-1123 name of the form ``what`` takes; else UsageError."""
    form, limit = NAMES[what]
    pattern = DNS1123_LABEL if form == "label" else DNS1123_SUBDOMAIN
    if len(value) > limit or not pattern.match(value):
        example = {"label": "llmb-team-a", "subdomain": "llmb-team-a or ngc.registry"}[form]
        raise UsageError(
            f"{where} {value!r}: expected a Kubernetes name (RFC 1123 {form}: lower-case letters, digits "
            f"and '-'{'' if form == 'label' else ' or .'}, starting and ending with a letter or digit, "
            f"at most {limit} characters), e.g. {example}."
        )
    return value


def parse_volume(text: str, where: str) -> Volume:
    kind, sep, source = text.partition(":")
    if sep and kind == "pvc" and source:
        return Volume("pvc", dns_name(source, "claim", f"{where} pvc:"))
    if sep and kind == "hostPath" and source.startswith("/") and _plain_path(source):
        return Volume("hostPath", source.rstrip("/") or "/")
    raise UsageError(
        f"{where} {text!r}: expected pvc:CLAIM (a PersistentVolumeClaim in the namespace, e.g. "
        f"pvc:llmb-install) or hostPath:/absolute/path (e.g. hostPath:/lustre/llmb)."
    )


def _plain_path(path: str) -> bool:
    return not any(c in path for c in "\n\r\t\0") and ".." not in path.split("/")


def parse_rdma(raw: object, where: str) -> tuple[tuple[str, int], ...]:
    """``name=count[,...]`` (a flag or a variable) or a mapping (the cluster file)."""
    if isinstance(raw, dict):
        items = list(raw.items())
    else:
        items = []
        for part in (p.strip() for p in str(raw).split(",")):
            if part:
                name, _, count = part.partition("=")
                items.append((name.strip(), count.strip()))
    out = []
    for name, count in items:
        text = str(count)
        if not isinstance(name, str) or not RESOURCE.match(name) or len(name) > 253:
            raise UsageError(
                f"{where}: resource name {name!r}: expected an extended resource such as "
                f"nvidia.com/hostdev or rdma/rdma_shared_device_a."
            )
        if isinstance(count, bool) or not text.isdigit() or not 0 < int(text) <= 1024:
            raise UsageError(
                f"{where}: {name} {count!r}: expected how many each pod asks for, a whole number from 1, "
                f"e.g. {name}=8."
            )
        out.append((name, int(text)))
    return tuple(out)


def _seconds(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < 3600:
        raise UsageError(
            f"{where} {text!r}: expected the seconds one Kubernetes API request may take in all, above 0 "
            f"and under 3600, e.g. 30."
        )
    return value


def resolve(
    options: tuple[tuple[str, str], ...],
    environ: dict,
    cluster_file: tuple[tuple[str, object], ...] = (),
    file_path: str = "the cluster file",
    missing: list[str] | None = None,
) -> KubeSettings:
    """The settings, or UsageError naming what is missing or wrong and where it was given. With
    ``missing`` (a dry run's), a missing ``volume`` is shown as a placeholder and the problem is
    appended there instead."""
    flags = dict(options)
    unknown = sorted(set(flags) - set(KEYS))
    if unknown:
        raise UsageError(
            f"unknown --backend-opt {', '.join(unknown)} for kubernetes; valid: {', '.join(KEYS)}."
        )
    from_file = dict(cluster_file)
    values: dict[str, object] = {}
    where: dict[str, str] = {}
    for key, variable in KEYS.items():
        if flags.get(key):
            values[key], where[key] = flags[key].strip(), f"--backend-opt {key}"
        elif environ.get(variable):
            values[key], where[key] = environ[variable].strip(), variable
        elif key not in FILE_ONLY_NOT and from_file.get(key) not in (None, ""):
            raw = from_file[key]
            values[key] = raw if key == "rdma" else str(raw).strip()
            where[key] = f"{file_path}: kubernetes.{key}"
        elif key in DEFAULTS:
            values[key], where[key] = DEFAULTS[key], f"{key} (default)"
    for key, valid in CHOICES.items():
        if key in values and values[key] not in valid:
            raise UsageError(f"{where[key]} {values[key]!r}: valid: {', '.join(valid)}.")
    if "volume" in values:
        volume = parse_volume(str(values["volume"]), where["volume"])
    else:
        problem = (
            "the kubernetes backend needs the install directory as a volume the pods mount: set "
            "volume: pvc:CLAIM or volume: hostPath:/path in the cluster file's kubernetes section (or "
            "LLMB_KUBE_VOLUME, or --backend-opt volume=...). See docs/kubernetes.md."
        )
        if missing is None:
            raise UsageError(problem)
        missing.append(problem)
        volume = Volume("pvc", "<LLMB_KUBE_VOLUME>")
    names = {}
    for key in (
        "namespace",
        "queue",
        "priority_class",
        "image_pull_secret",
        "service_account",
        "secret",
    ):
        if values.get(key):
            names[key] = dns_name(str(values[key]), key, where[key])
    install_path = values.get("install_path")
    if install_path is not None:
        install_path = str(install_path)
        if not install_path.startswith("/") or not _plain_path(install_path):
            raise UsageError(
                f"{where['install_path']} {install_path!r}: expected the absolute path where the pods "
                f"see the install directory, e.g. /lustre/llmb."
            )
        install_path = install_path.rstrip("/") or "/"
    context = values.get("context")
    if context is not None and (not str(context) or any(c in str(context) for c in "\n\r\0")):
        raise UsageError(
            f"{where['context']} {context!r}: expected a context name of the kubeconfig."
        )
    python = str(values["python"])
    if not re.match(r"^[A-Za-z0-9_./+-]+$", python):
        raise UsageError(
            f"{where['python']} {python!r}: expected the pods' Python, a command name or an absolute "
            f"path without spaces, e.g. python3 or /usr/bin/python3."
        )
    return KubeSettings(
        context=str(context) if context else None,
        volume=volume,
        install_path=install_path,
        rdma=parse_rdma(values["rdma"], where["rdma"]) if values.get("rdma") else (),
        python=python,
        log=str(values["log"]) if values.get("log") else None,
        request_timeout=_seconds(str(values["request_timeout"]), where["request_timeout"]),
        allow_http=values["allow_http"] == "1",
        **{
            k: names.get(k)
            for k in (
                "namespace",
                "queue",
                "priority_class",
                "image_pull_secret",
                "service_account",
                "secret",
            )
        },
    )
