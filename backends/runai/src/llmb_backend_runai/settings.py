"""Where and as whom to submit: the seed's Run:ai variables.

Each setting comes from, in this order: ``llmb run --backend-opt KEY=VALUE``,
the seed's environment variable, the config file (``LLMB_RUNAI_CONFIG``, else
``~/.config/llmb/runai.yaml``), the default.

    key         variable          meaning
    base_url    BASE_URL          https://<host>/api/v1
    app_id      APP_ID            the Run:ai application (client id)
    app_secret  APP_SECRET        its secret (variable or config file only: never a flag)
    project     PROJECT_NAME      the Run:ai project to run in
    pvc_dir     PVC_DIR           llmb's directory on the mounted PVC, as the pods see it
    mounts      RUN_CONF_MOUNTS   PVCs to mount: name:path:claimName[,...]
    cluster     RUNAI_CLUSTER     the cluster (name or id), when the project name exists on several
    grant       RUNAI_GRANT       client_credentials, app_token, or auto (try both; default)
    python      RUNAI_PYTHON      the pods' Python (default python3)
    cancel      RUNAI_CANCEL      suspend (default) or delete
    allow_http  RUNAI_ALLOW_HTTP  1: accept a plain http:// BASE_URL (a local test server); default 0
    request_timeout  RUNAI_REQUEST_TIMEOUT  seconds one request may take, its retries included (default 120)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from llmb import UsageError

KEYS = {
    "base_url": "BASE_URL",
    "app_id": "APP_ID",
    "app_secret": "APP_SECRET",
    "project": "PROJECT_NAME",
    "pvc_dir": "PVC_DIR",
    "mounts": "RUN_CONF_MOUNTS",
    "cluster": "RUNAI_CLUSTER",
    "grant": "RUNAI_GRANT",
    "python": "RUNAI_PYTHON",
    "cancel": "RUNAI_CANCEL",
    "allow_http": "RUNAI_ALLOW_HTTP",
    "request_timeout": "RUNAI_REQUEST_TIMEOUT",
}
REQUIRED = ("base_url", "app_id", "app_secret", "project", "pvc_dir", "mounts")
CHOICES = {
    "grant": ("auto", "client_credentials", "app_token"),
    "cancel": ("suspend", "delete"),
    "allow_http": ("0", "1"),
}
DEFAULTS = {
    "grant": "auto",
    "python": "python3",
    "cancel": "suspend",
    "allow_http": "0",
    "request_timeout": "120",
}


@dataclass(frozen=True)
class Mount:
    name: str
    path: str
    claim: str


@dataclass(frozen=True)
class RunaiSettings:
    base_url: str
    app_id: str
    app_secret: str = field(repr=False)
    project: str
    pvc_dir: str
    mounts: tuple[Mount, ...]
    cluster: str | None = None
    grant: str = "auto"
    python: str = "python3"
    cancel: str = "suspend"
    allow_http: bool = False
    request_timeout: float = 120.0

    def public(self) -> dict:
        """Everything but the secret (what a job record or a dry run may show)."""
        return {
            "base_url": self.base_url,
            "app_id": self.app_id,
            "project": self.project,
            "pvc_dir": self.pvc_dir,
            "mounts": [m.__dict__ for m in self.mounts],
            "cluster": self.cluster,
            "grant": self.grant,
            "python": self.python,
            "cancel": self.cancel,
            "allow_http": self.allow_http,
            "request_timeout": self.request_timeout,
        }


def parse_mounts(text: str) -> tuple[Mount, ...]:
    """``name:path:claimName[,...]`` (the seed's RUN_CONF_MOUNTS)."""
    mounts = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        parts = item.split(":")
        if len(parts) != 3 or not all(p.strip() for p in parts) or not parts[1].startswith("/"):
            raise UsageError(
                f"RUN_CONF_MOUNTS item {item!r}: expected name:path:claimName with an absolute path, "
                f"e.g. workspace:/nemo2-workspace:nemo2-workspace-project-hprdj."
            )
        mounts.append(Mount(*(p.strip() for p in parts)))
    if not mounts:
        raise UsageError("RUN_CONF_MOUNTS names no PVC: expected name:path:claimName[,...].")
    return tuple(mounts)


def config_file(environ: dict) -> str:
    return environ.get("LLMB_RUNAI_CONFIG") or os.path.join(
        os.path.expanduser("~"), ".config", "llmb", "runai.yaml"
    )


def _from_file(path: str) -> dict:
    import yaml
    from llmb import load_user_yaml_file

    try:
        data = load_user_yaml_file(path) or {}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise UsageError(
            f"cannot read the Run:ai config file {path}: {getattr(exc, 'problem', None) or exc}"
        ) from None
    if not isinstance(data, dict):
        raise UsageError(f"the Run:ai config file {path} must be a mapping of {', '.join(KEYS)}.")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise UsageError(
            f"the Run:ai config file {path} has unknown keys {', '.join(unknown)}; valid: "
            f"{', '.join(KEYS)}."
        )
    return {k: str(v) for k, v in data.items() if v is not None}


def resolve(
    options: tuple[tuple[str, str], ...] = (),
    environ: dict | None = None,
    missing: list[str] | None = None,
) -> RunaiSettings:
    """The settings, or UsageError naming everything missing or wrong (and where to set it). With
    ``missing`` (a dry run's), a required setting not given is a placeholder (``<PROJECT_NAME>``) and
    what a submission would say of them is appended to ``missing``; a wrong one is still an error."""
    env = os.environ if environ is None else environ
    flags = dict(options)
    unknown = sorted(set(flags) - set(KEYS))
    if unknown:
        raise UsageError(
            f"unknown --backend-opt {', '.join(unknown)} for runai; valid: "
            f"{', '.join(k for k in KEYS if k != 'app_secret')}."
        )
    if "app_secret" in flags:
        raise UsageError(
            "--backend-opt app_secret=... would show the secret in your shell history and process "
            "list; set APP_SECRET in the environment or app_secret in the config file."
        )
    path = config_file(env)
    from_file = _from_file(path)
    values = {}
    for key, variable in KEYS.items():
        value = flags.get(key) or env.get(variable) or from_file.get(key) or DEFAULTS.get(key)
        if value:
            values[key] = value.strip()
    absent = [k for k in REQUIRED if not values.get(k)]
    if absent:
        listed = ", ".join(
            f"{KEYS[k]}" + ("" if k == "app_secret" else f" (or --backend-opt {k}=...)")
            for k in absent
        )
        problem = (
            f"the runai backend needs {listed}; they can also go in {path}. See docs/runai.md."
        )
        if missing is None:
            raise UsageError(problem)
        missing.append(problem)
        values.update(_placeholders(absent, values))
    for key, valid in CHOICES.items():
        if values[key] not in valid:
            raise UsageError(f"runai {key} {values[key]!r}: valid: {', '.join(valid)}.")
    base = values["base_url"].rstrip("/")
    if not base.startswith(("https://", "http://")) or not base.endswith("/api/v1"):
        raise UsageError(
            f"BASE_URL {values['base_url']!r}: expected https://<host>/api/v1, "
            f"e.g. https://nvidia.run.ai/api/v1."
        )
    allow_http = values["allow_http"] == "1"
    if base.startswith("http://") and not allow_http:
        raise UsageError(
            f"BASE_URL {base} is plain http: the access token and APP_SECRET would cross the network "
            f"unencrypted. Use https://<host>/api/v1, or set RUNAI_ALLOW_HTTP=1 (or --backend-opt "
            f"allow_http=1) to allow it on purpose, e.g. for a local test server."
        )
    request_timeout = _seconds(values["request_timeout"])
    if not values["pvc_dir"].startswith("/"):
        raise UsageError(
            f"PVC_DIR {values['pvc_dir']!r}: expected the absolute path the pods see, e.g. "
            f"/nemo2-workspace/llmb."
        )
    mounts = parse_mounts(values["mounts"])
    if not any(
        values["pvc_dir"] == m.path or values["pvc_dir"].startswith(m.path.rstrip("/") + "/")
        for m in mounts
    ):
        raise UsageError(
            f"PVC_DIR {values['pvc_dir']} is on none of the mounted PVCs "
            f"({', '.join(m.path for m in mounts)}); the pods could not write there."
        )
    return RunaiSettings(
        base_url=base,
        app_id=values["app_id"],
        app_secret=values["app_secret"],
        project=values["project"],
        pvc_dir=values["pvc_dir"].rstrip("/"),
        mounts=mounts,
        cluster=values.get("cluster"),
        grant=values["grant"],
        python=values["python"],
        cancel=values["cancel"],
        allow_http=allow_http,
        request_timeout=request_timeout,
    )


def _placeholders(absent: list[str], values: dict[str, str]) -> dict[str, str]:
    """What a dry run shows for each setting in ``absent``: its variable's name in angle brackets, in
    the form the setting takes (a URL, an absolute path on a mounted PVC)."""
    shown = {key: f"<{KEYS[key]}>" for key in absent}
    if "base_url" in shown:
        shown["base_url"] = f"https://<{KEYS['base_url']}>/api/v1"
    if "pvc_dir" in shown:
        given = parse_mounts(values["mounts"])[0].path if "mounts" not in shown else ""
        shown["pvc_dir"] = f"{given.rstrip('/')}/<{KEYS['pvc_dir']}>"
    if "mounts" in shown:
        pvc_dir = shown.get("pvc_dir") or values["pvc_dir"]
        shown["mounts"] = f"workspace:{pvc_dir}:<{KEYS['mounts']}>"
    return shown


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise UsageError(
            f"RUNAI_REQUEST_TIMEOUT {text!r}: expected the seconds one Run:ai request may take in all, "
            f"a number above 0, e.g. 120."
        )
    return value
