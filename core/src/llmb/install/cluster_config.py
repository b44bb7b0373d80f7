"""``$LLMB_INSTALL/cluster.yaml``: what a site sets once for its cluster.

``llmb install`` writes it as a commented template (never over an existing
file); the user edits it. Every cluster run (a backend other than ``local``)
takes from it what neither a flag nor an environment variable gave
(``llmb.lifecycle.run_option_values``); ``llmb config show`` lists the outcome. The
format and every key are in docs/cluster-config.md.

Every value is checked when the file is read: an unknown key, a wrong type
or a bad value is a UsageError naming the file, the key and what is valid;
malformed YAML names the line. Secrets never go in the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from llmb.errors import UsageError
from llmb.install import cluster_settings, value_checks
from llmb.paths import packaged_data

FILE_NAME = "cluster.yaml"
TEMPLATE = packaged_data("cluster-template.yaml")
SLURM_SECTION = "slurm"
# The Kubernetes backend's section (llmb-backend-kubernetes checks its values: docs/kubernetes.md).
KUBERNETES_SECTION = "kubernetes"
KUBERNETES_KEYS = (
    "context",
    "namespace",
    "volume",
    "install_path",
    "queue",
    "priority_class",
    "image_pull_secret",
    "service_account",
    "secret",
    "rdma",
    "python",
    "log",
    "request_timeout",
)
KEYS = (
    "account",
    "partition",
    "gpu",
    "gpus_per_node",
    "gres",
    "images",
    "mounts",
    "env",
    "numa_binding",
    SLURM_SECTION,
    KUBERNETES_SECTION,
)
SLURM_KEYS = tuple(
    s.key.split(".", 1)[1]
    for s in cluster_settings.SETTINGS
    if s.key.startswith(SLURM_SECTION + ".")
)


@dataclass(frozen=True)
class ClusterConfig:
    """The checked contents of the cluster file; None: not set there."""

    path: str
    account: str | None = None
    partition: str | None = None
    gpu: str | None = None
    gpus_per_node: int | None = None
    gres: str | None = None
    numa_binding: bool | None = None
    time_limit: str | None = None  # slurm.time
    nodelist: str | None = None
    exclude: str | None = None
    reservation: str | None = None
    qos: str | None = None
    constraint: str | None = None
    segment: int | None = None
    images: tuple[tuple[str, str], ...] = ()  # workload -> container image
    mounts: tuple[str, ...] = ()  # SRC:DST[:ro]
    env: tuple[tuple[str, str], ...] = ()

    def value(self, name: str) -> Any:
        """A setting by its name in ``llmb.install.cluster_settings`` (``time_limit``, ``qos``)."""
        return getattr(self, name)

    def image(self, workload: str) -> str | None:
        return dict(self.images).get(workload)


def cluster_file() -> str:
    from llmb.paths import install_dir

    return os.path.join(install_dir(), FILE_NAME)


def load(path: str | None = None) -> ClusterConfig | None:
    """The cluster file (default ``$LLMB_INSTALL/cluster.yaml``), checked; None when there is none."""
    import yaml

    from llmb.yamlio import load_user_yaml_file

    path = path or cluster_file()
    if not os.path.lexists(path):
        return None
    if os.path.isdir(path):
        raise UsageError(
            f"the cluster file {path} is a directory; it must be a YAML file (see docs/cluster-config.md)."
        )
    try:
        data = load_user_yaml_file(path)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise UsageError(
            f"the cluster file {path} is not valid YAML{at}: {getattr(exc, 'problem', None) or exc}. "
            f"Fix it, or remove it and run llmb install for a fresh template."
        ) from None
    except OSError as exc:
        raise UsageError(f"cannot read the cluster file {path}: {exc.strerror or exc}.") from None
    if data is None:  # empty, or every line commented out (the template as written)
        return ClusterConfig(path=path)
    return from_dict(data, path)


def from_dict(data: object, path: str) -> ClusterConfig:
    _mapping(data, path, KEYS, "the cluster file")
    _refuse_credentials(data, path)
    slurm = data.get(SLURM_SECTION)
    if slurm is not None:
        _mapping(slurm, path, SLURM_KEYS, f"the {SLURM_SECTION} section")
    kubernetes = data.get(KUBERNETES_SECTION)
    if kubernetes is not None:
        _mapping(kubernetes, path, KUBERNETES_KEYS, f"the {KUBERNETES_SECTION} section")
    values: dict[str, Any] = {}
    for setting in cluster_settings.SETTINGS:
        section, _, leaf = setting.key.rpartition(".")
        raw = (slurm or {}).get(leaf) if section else data.get(leaf)
        if raw is None:
            continue
        where = f"{path}: {setting.key}"
        if setting.name == "time_limit" and not isinstance(raw, str):
            raise UsageError(
                f'{where} {raw!r}: quote the time limit, e.g. time: "30" or time: "2:00:00" '
                f"(YAML reads an unquoted 2:00:00 as the number 7200)."
            )
        values[setting.name] = setting.check(raw, where)
    return ClusterConfig(
        path=path,
        **values,
        images=_images(data.get("images"), path),
        mounts=_mounts(data.get("mounts"), path),
        env=_env(data.get("env"), path),
    )


def _strings(data: object, key: str = ""):
    """(dotted key, text) of every key and string value in ``data``."""
    if isinstance(data, dict):
        for name, value in data.items():
            inner = f"{key}.{name}" if key else str(name)
            yield inner, str(name)
            yield from _strings(value, inner)
    elif isinstance(data, list):
        for value in data:
            yield from _strings(value, key)
    elif isinstance(data, str):
        yield key, data


def _refuse_credentials(data: object, path: str) -> None:
    """A password in a URL (a proxy's, a mirror's) is a secret: never in a file that every run records."""
    from llmb.redaction import credential_in

    for key, text in _strings(data):
        if what := credential_in(text):
            raise UsageError(
                f"{path}: {key}: {what} never goes in a file (it would be recorded with every run). "
                f"Export the variable in the shell that runs llmb and pass it with llmb run --secret NAME."
            )


def _mapping(data: object, where: str, keys: tuple[str, ...], what: str) -> None:
    if not isinstance(data, dict):
        raise UsageError(
            f"{where}: {what} must be a mapping of {', '.join(keys)}; got {type(data).__name__}."
        )
    unknown = [str(k) for k in data if k not in keys]
    if unknown:
        raise UsageError(
            f"{where}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} in {what}; "
            f"valid: {', '.join(keys)}."
        )


def _images(raw: object, path: str) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise UsageError(
            f"{path}: images must map workload names to container images, e.g. "
            f'images: {{llama31: "nvcr.io#nvidia/nemo:25.09"}}.'
        )
    out = []
    for workload, image in raw.items():
        where = f"{path}: images.{workload}"
        value_checks.workload_name(workload, where)
        out.append((workload, value_checks.image(image, where)))  # as --image's
    return tuple(out)


def _mounts(raw: object, path: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise UsageError(
            f"{path}: mounts must be a list of SRC:DST or SRC:DST:ro, e.g. mounts: [/lustre:/lustre]."
        )
    # as --mount's
    return tuple(dict.fromkeys(value_checks.mount(item, f"{path}: mounts item") for item in raw))


def _env(raw: object, path: str) -> tuple[tuple[str, str], ...]:
    from llmb.engines.frameworks.settings import SECRETS
    from llmb.redaction import is_secret_name
    from llmb.runs.runspec import SECRET_VARIABLES

    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise UsageError(
            f"{path}: env must be a mapping NAME: value, e.g. env: {{NCCL_IB_HCA: mlx5}}."
        )
    out = []
    for name, value in raw.items():
        value_checks.env_name(name, f"{path}: env")  # as --env's
        if name in SECRETS or name in SECRET_VARIABLES or is_secret_name(name):
            raise UsageError(
                f"{path}: env {name}: a secret never goes in a file (and would be recorded with every "
                f"run). Export it in the shell that runs llmb: HF_TOKEN always reaches the job that way, "
                f"another secret with llmb run --secret {name}."
            )
        out.append((name, value_checks.env_value(name, value, f"{path}: env {name}")))
    return tuple(out)


def write_template(path: str) -> bool:
    """Write the commented template at ``path`` unless a file is there; True when written."""
    with open(TEMPLATE, encoding="utf-8") as handle:
        text = handle.read()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    try:
        # exclusive: never over an existing (edited) file
        with open(path, "x", encoding="utf-8") as handle:
            handle.write(text)
    except FileExistsError:
        return False
    return True


@dataclass(frozen=True)
class Effective:
    """One setting as a cluster run takes it (flags aside): its value and where it came from."""

    name: str
    key: str  # in the cluster file
    flag: str
    variable: str | None
    value: Any
    source: str  # env | file | default
    origin: str | None  # the variable's name, the file's path; None for a default
    default: str | None = None  # the default, in words


# The file's collections: key, the flag that adds to it.
_COLLECTIONS = (("images", "--image"), ("mounts", "--mount"), ("env", "--env"))


def effective(config: ClusterConfig | None, environ: dict[str, str]) -> list[Effective]:
    """Every setting: its variable when set (not empty), else the file's value, else the default."""
    out = []
    for s in cluster_settings.SETTINGS:
        raw = environ.get(s.variable)
        if raw:
            found = (s.check(raw, s.variable), "env", s.variable, None)
        elif config is not None and config.value(s.name) is not None:
            found = (config.value(s.name), "file", config.path, None)
        else:
            found = (s.default_value, "default", None, s.default)
        out.append(Effective(s.name, s.key, s.flag, s.variable, *found))
    for key, flag in _COLLECTIONS:
        held = config.value(key) if config is not None else ()
        value = list(held) if key == "mounts" else dict(held)
        found = (value, "file", config.path, None) if held else (value, "default", None, "none")
        out.append(Effective(key, key, flag, None, *found))
    return out
