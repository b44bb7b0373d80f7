"""Reading the YAML data files, fast.

PyYAML builds Python objects in Python even with libyaml's C parser, about
10 ms for llmb's data; JSON is 50 times faster. So each parsed file is also
kept as JSON in the cache directory (``$LLMB_CACHE_DIR``, else
``$XDG_CACHE_HOME/llmb``, else ``~/.cache/llmb``), keyed by the file's path,
size and modification time, and used while those still match. A cache that
cannot be read or written is ignored; ``LLMB_NO_CACHE=1`` turns it off.

Files users write (the cluster file, sweep files, the Run:ai config) are
read by ``load_user_yaml_file`` instead: never cached, a regular file
(``llmb.files.read_regular``: a FIFO is refused, never waited on) of at most
``MAX_USER_FILE`` bytes, and refused when it uses an alias (``*name``),
checked on the parser's events before anything is built: nested aliases
expand exponentially (a few lines took gigabytes), and llmb's formats need none.
"""

from __future__ import annotations

import json
import os
import zlib
from typing import Any

import yaml

from llmb.files import read_regular

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_FORMAT = 1
# bytes: llmb's largest data file is tens of kilobytes as JSON; a longer entry is cut, so
MAX_CACHE_ENTRY = 16 << 20
#                             not valid JSON, and parsed afresh


def load_yaml(text: str | bytes) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader


def cache_dir() -> str | None:
    if os.environ.get("LLMB_NO_CACHE"):
        return None
    explicit = os.environ.get("LLMB_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "llmb")


def load_yaml_file(path: str | os.PathLike[str]) -> Any:
    """``path`` parsed, from the JSON cache when it is current.

    (os.path rather than pathlib, and no hashlib or tempfile: those imports
    alone would cost the CLI several milliseconds at every start.)"""
    path = os.path.realpath(path)
    stat = os.stat(path)
    stamp = {"format": _FORMAT, "path": path, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    where = cache_dir()
    entry = None
    if where is not None:
        entry = os.path.join(
            where, f"{zlib.crc32(path.encode()):08x}-{os.path.basename(path)}.json"
        )
        # a regular file only, and bounded: a FIFO left in the cache must not hang every command
        try:
            cached = json.loads(read_regular(entry, MAX_CACHE_ENTRY))
            if cached.get("stamp") == stamp:
                return cached["data"]
        except (OSError, ValueError, AttributeError):
            pass
    with open(path, "rb") as handle:
        data = load_yaml(handle.read())
    if entry is not None:
        _store(entry, {"stamp": stamp, "data": data})
    return data


def _store(entry: str, payload: dict[str, Any]) -> None:
    tmp = f"{entry}.{os.getpid()}.tmp"
    try:
        text = json.dumps(payload)
        os.makedirs(os.path.dirname(entry), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, entry)  # atomic: readers see the old entry or the new one
    except (OSError, TypeError, ValueError):
        try:
            os.unlink(tmp)
        except OSError:
            pass  # an unwritable cache only costs speed


MAX_USER_FILE = 1 << 20  # bytes: a cluster or sweep file is a few kilobytes


def load_user_yaml_file(path: str | os.PathLike[str]) -> Any:
    """A YAML file a user wrote, parsed (see the module's docstring). Raises OSError when it cannot be
    read or is not a regular file, ``yaml.YAMLError`` (with ``problem`` and, for an alias, ``problem_mark``)
    when it is too large, not YAML, or uses an alias."""
    # a regular file only, opened without blocking (not a FIFO's)
    text = read_regular(path, MAX_USER_FILE + 1)
    if len(text) > MAX_USER_FILE:
        raise yaml.MarkedYAMLError(
            problem=f"larger than {MAX_USER_FILE >> 20} MiB; such a file is a few kilobytes"
        )
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.AliasEvent):
            raise yaml.MarkedYAMLError(
                problem=f"an alias (*{event.anchor}) is not accepted here: write the value out",
                problem_mark=event.start_mark,
            )
    try:
        return load_yaml(text)
    # a value PyYAML's constructors cannot build: an integer of more than 4,300 digits
    except ValueError as exc:
        raise yaml.MarkedYAMLError(problem=f"a value llmb cannot read ({exc})") from None
