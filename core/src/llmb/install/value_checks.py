"""The one check of each kind of value a user gives llmb for a cluster run,
whichever way it comes: a flag of ``llmb run`` / ``sweep`` / ``certify`` (or
a sweep file's key of the same name), its environment variable, the cluster
file (``$LLMB_INSTALL/cluster.yaml``), or an ``ADDITIONAL_SLURM_PARAMS``
item for the same sbatch option.

Each check takes the value and ``where`` (the flag, the variable, the file
and key, or the ADDITIONAL_SLURM_PARAMS item), matches the WHOLE value
(``re.fullmatch``: ``$`` would let a trailing line break through) and
returns it as llmb uses it, or raises UsageError saying where the value
came from, what it was (its repr: a line break shows) and what is valid,
with an example.

Most of these values end up in ``#SBATCH`` lines (which sbatch reads
itself), on srun's command line or in pyxis' comma-separated lists: a value
never holds a line break, a quote, a space inside it or, where pyxis
separates items with commas, a comma. Blanks around a value are dropped.
"""

from __future__ import annotations

import re

from llmb.env_names import ENV_NAME, env_name  # noqa: F401 - a name's check is a base module; here with the rest
from llmb.errors import UsageError

_NAME = r"[A-Za-z0-9_.@+%-]+"
NAMES = re.compile(rf"{_NAME}(?:,{_NAME})*")  # accounts, partitions, QOS, reservations: a,b
HOSTLIST = re.compile(r"[A-Za-z0-9_.,\[\]-]+")  # node001,node[002-004]
FEATURES = re.compile(r"[A-Za-z0-9_.,:&|\[\]*!()-]+")  # gpu&ib, [rack1|rack2], gpu*2
TIME = re.compile(
    r"\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+(?::\d{1,2}){0,2}|UNLIMITED|INFINITE",
    re.I | re.ASCII,
)  # ASCII: \d is any script's digits otherwise
GRES = re.compile(r"none|gpu(?::(?P<type>[A-Za-z0-9_.-]+))?:(?P<count>\d{1,9})", re.ASCII)
# pyxis separates mounts with commas and srun splits on blanks: neither in a path
_PATH = r"/[A-Za-z0-9_.@+%=/-]*"
MOUNT = re.compile(rf"(?P<src>{_PATH}):(?P<dst>{_PATH})(?::(?P<flags>ro|rw))?")
IMAGE_REFERENCE = re.compile(
    r"(?P<registry>[A-Za-z0-9.-]+(?::\d+)?)#(?P<repo>[a-z0-9._/-]+):(?P<tag>[A-Za-z0-9._-]+)",
    re.ASCII,
)  # nvcr.io#nvidia/nemo:26.04.01
SQSH = re.compile(rf"{_PATH}\.sqsh")
WORKLOAD = re.compile(r"[a-z0-9][a-z0-9_-]*")
SBATCH_OPTION = re.compile(r"[a-z][a-z0-9-]*")
MAX_SEGMENT = 131072  # nodes; beyond any cluster: a typo
_BLANKS = " \t"  # dropped around a value; a line break never is


def _text(value: object, where: str, pattern: re.Pattern, valid: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise UsageError(f"{where}: expected text ({valid}), got {value!r}.")
    text = str(value).strip(_BLANKS)
    if not pattern.fullmatch(text):
        raise UsageError(
            f"{where} {value!r}: expected {valid}, without spaces, quotes or line breaks."
        )
    return text


def names(value: object, where: str) -> str:
    """Accounts, partitions, QOS, reservations: ``gpu-team.a100`` or ``batch,backfill``."""
    return _text(
        value,
        where,
        NAMES,
        "a name or comma-separated names of letters, digits and _ . @ + % -, "
        "e.g. my-team.gpu or batch,backfill",
    )


def hostlist(value: object, where: str) -> str:
    """Slurm host lists: ``node[001-004],node010`` (the cluster file may give a YAML list)."""
    if isinstance(value, list):
        value = ",".join(str(v) for v in value)
    return _text(value, where, HOSTLIST, "a Slurm host list such as node001,node[002-004]")


def features(value: object, where: str) -> str:
    """Slurm feature expressions (``--constraint``): ``gpu&ib``, ``[rack1|rack2]``."""
    return _text(
        value, where, FEATURES, "a Slurm feature expression such as gpu&ib or [rack1|rack2]"
    )


def time_limit(value: object, where: str) -> str:
    """Slurm's time forms: ``30``, ``2:00:00``, ``1-00:00:00``, ``UNLIMITED``."""
    return _text(
        value,
        where,
        TIME,
        "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (Slurm's forms), "
        "e.g. 30, 2:00:00 or 1-00:00:00",
    )


def count(value: object, where: str, low: int, high: int, example: str) -> int:
    number = value
    digits = value.strip(_BLANKS) if isinstance(value, str) else ""
    # int() refuses thousands of digits
    if digits.isdigit() and digits.isascii() and len(digits) <= 18:
        number = int(digits)
    if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
        raise UsageError(
            f"{where} {value!r}: expected a whole number from {low} to {high:,}, e.g. {example}."
        )
    return number


def segment(value: object, where: str) -> int:
    """Nodes per topology segment (sbatch ``--segment``): 1 to 131,072."""
    return count(value, where, 1, MAX_SEGMENT, "4")


def gpus_per_node(value: object, where: str) -> int:
    from llmb.recipes.gpus import MAX_GPUS_PER_NODE

    return count(value, where, 1, MAX_GPUS_PER_NODE, "8")


def gres(value: object, where: str) -> str:
    """How the job asks for GPUs as generic resources: ``gpu:N``, ``gpu:TYPE:N`` (N per node) or ``none``."""
    from llmb.recipes.gpus import MAX_GPUS_PER_NODE

    text = value.strip(_BLANKS) if isinstance(value, str) else None
    match = GRES.fullmatch(text) if text is not None else None
    if match is None or (
        match["count"] is not None and not 1 <= int(match["count"]) <= MAX_GPUS_PER_NODE
    ):
        raise UsageError(
            f"{where} {value!r}: expected gpu:N or gpu:TYPE:N (N GPUs per node, 1 to "
            f"{MAX_GPUS_PER_NODE}), e.g. gpu:8 or gpu:h100:8, where the cluster schedules GPUs as gres, "
            f"or none where it does not."
        )
    return text


def boolean(value: object, where: str) -> bool:
    from llmb.engines.frameworks.settings import FALSE, TRUE

    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip(_BLANKS).lower() in TRUE + FALSE:
        return value.strip(_BLANKS).lower() in TRUE
    raise UsageError(
        f"{where} {value!r}: expected true or false ({'/'.join(TRUE)} or {'/'.join(FALSE)})."
    )


def gpu(value: object, where: str) -> str:
    from llmb.recipes.gpus import catalogue

    known = list(catalogue())
    if not isinstance(value, str) or value.strip(_BLANKS).lower() not in known:
        raise UsageError(f"{where} {value!r}: unknown GPU type; llmb knows: {', '.join(known)}.")
    return value.strip(_BLANKS).lower()


def image_reference(value: object, where: str) -> str:
    """A registry image in pyxis/enroot form: ``nvcr.io#nvidia/nemo:26.04.01``."""
    if isinstance(value, str) and IMAGE_REFERENCE.fullmatch(value):
        return value
    hint = ""
    if isinstance(value, str) and "#" not in value and "/" in value and not value.startswith("/"):
        registry, _, rest = value.partition("/")
        hint = f" (did you mean {registry + '#' + rest!r}? pyxis looks a '/' reference up on Docker Hub)"
    raise UsageError(
        f"{where} {value!r} is not in registry#repo:tag form, e.g. nvcr.io#nvidia/nemo:26.04.01"
        f"{hint}; no spaces, commas, quotes or line breaks."
    )


def image(value: object, where: str) -> str:
    """A container image: ``registry#repo:tag`` or the absolute path of a ``.sqsh`` file."""
    if not isinstance(value, str) or not value.strip(_BLANKS):
        raise UsageError(
            f"{where} {value!r}: expected a container image, registry#repo:tag "
            f"(e.g. nvcr.io#nvidia/nemo:26.04.01) or a .sqsh file's absolute path."
        )
    text = value.strip(_BLANKS)
    if text.startswith("/") or text.rstrip().endswith(".sqsh"):  # a file
        if not SQSH.fullmatch(text):
            raise UsageError(
                f"{where} {value!r}: a .sqsh image must be an absolute path ending in .sqsh, without "
                f"spaces, commas, quotes or line breaks, e.g. /lustre/images/nemo-26.04.01.sqsh."
            )
        return text
    return image_reference(text, where)


def mount(value: object, where: str) -> str:
    """One container mount, as pyxis takes it: ``SRC:DST`` or ``SRC:DST:ro`` (or ``:rw``), absolute paths."""
    if not isinstance(value, str) or not MOUNT.fullmatch(value.strip(_BLANKS)):
        raise UsageError(
            f"{where} {value!r}: expected SRC:DST or SRC:DST:ro with absolute paths (letters, digits "
            f"and _ . @ + % = / -; no spaces, commas, quotes or line breaks: one mount per item), "
            f"e.g. /lustre/data:/data:ro."
        )
    return value.strip(_BLANKS)


def env_value(name: str, value: object, where: str) -> str:
    """An environment variable's value: any single line (it is shell-quoted where it is written).
    A value that may be a secret is never repeated: the name's are masked whole, others' credentials."""
    from llmb.redaction import MASK, is_secret_name, mask

    if value is None or isinstance(value, dict | list | tuple):
        raise UsageError(f'{where}: expected a single value (quote it; "" for an empty one).')
    text = str(value)
    if any(c in text for c in "\n\r\0"):
        shown = MASK if is_secret_name(name) else repr(mask(text))
        raise UsageError(
            f"{where} {shown}: a value cannot contain a line break or a NUL character; give one line, "
            f"e.g. {name}=value."
        )
    return text


def workload_name(value: object, where: str) -> str:
    if isinstance(value, str) and WORKLOAD.fullmatch(value):
        return value
    raise UsageError(
        f"{where}: a workload name such as llama31 (lower-case letters, digits, _ and -), "
        f"got {value!r}."
    )


def sbatch_option(value: object, where: str) -> str:
    """The name of an sbatch long option, without its dashes: ``mail-type``."""
    if isinstance(value, str) and SBATCH_OPTION.fullmatch(value):
        return value
    raise UsageError(
        f"{where}: expected key=value or a flag name (an sbatch option: lower-case letters, digits "
        f'and -), got {value!r}; e.g. "nodelist=node001,node002;constraint=gpu;exclusive".'
    )
