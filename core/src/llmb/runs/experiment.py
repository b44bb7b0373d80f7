"""Experiment names and directories in the seeds' layout:

    <install>/workloads/<workload>/experiments/<name>/<name>_<timestamp>/<name>/log-<name>.out

with ``recipe.json`` (what was asked for and what ran) in the
``<name>_<timestamp>`` run directory. Names follow Megatron-Bridge's
(``pretrain_llama3_8b_nvfp4_gpus8_tp1_pp1_cp1_vpNone_ep1_mbs4_gbs128``) with
``_tuned`` appended for runs tuned with ``--set`` and ``_proxy-<kind>`` for proxy runs.

llmb's own state files (records of runs, jobs, sweeps, suites) are written
here atomically (``write_json``) and read back by ``load_json_state``: a
regular file only and bounded, because anyone may have put something else
where the record was (a FIFO would hang the reader; a truncated file is
"corrupt", not "missing").
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import time
from dataclasses import dataclass

from llmb.errors import LlmbError
from llmb.paths import workload_dir
from llmb.recipes.records import Recipe

RECIPE_FILE = "recipe.json"


def experiment_name(recipe: Recipe, proxy: str | None = None, tuned: bool = False) -> str:
    def value(v: object) -> str:
        return "None" if v is None else str(v)

    name = (
        f"pretrain_{recipe.workload}_{recipe.size}_{recipe.dtype}_gpus{recipe.gpus}_tp{recipe.tp}_pp{recipe.pp}"
        f"_cp{recipe.cp}_vp{value(recipe.vp)}_ep{value(recipe.ep)}_mbs{recipe.mbs}_gbs{recipe.gbs}"
    )
    # tuned (--set, --framework-arg): never taken for the official configuration's
    if recipe.overrides or tuned:
        name += "_tuned"
    return f"{name}_proxy-{proxy}" if proxy else name


# The parts of an experiment name that say "not used" (no CP, no virtual pipeline, no expert parallelism).
_UNUSED_PARTS = re.compile(r"_(?:cp1|vpNone|epNone|ep1)(?=_|$)")
_RUN_STAMP = re.compile(r"_\d{6,}$")


def compact_name(name: str, keep: tuple[str, ...] = ()) -> str:
    """An experiment name (or a run directory's ``<name>_<timestamp>``) in the short form tables show:
    no ``pretrain_`` prefix, no timestamp (the JOB column, or --full-names, tells runs apart), and no
    part that says a dimension is unused: ``pretrain_llama31_8b_bf16_gpus8_tp1_pp1_cp1_vpNone_ep1_mbs2
    _gbs128_1795668434`` -> ``llama31_8b_bf16_gpus8_tp1_pp1_mbs2_gbs128``, except the settings in
    ``keep`` (``cp``: the recipe's CP is not 1, so ``cp1`` says how the run differs from it).
    ``--full-names`` and ``--json`` show the whole one."""
    if not name.startswith("pretrain_"):
        return name  # not one of llmb's (or the replaced tool's) names: shown as it is

    def unused(part: re.Match) -> str:
        return part.group(0) if part.group(0)[1:3].lower() in keep else ""

    return _UNUSED_PARTS.sub(unused, _RUN_STAMP.sub("", name.removeprefix("pretrain_")))


@dataclass(frozen=True)
class ExperimentDir:
    name: str
    run_dir: str  # <name>_<timestamp>
    inner: str  # <name>_<timestamp>/<name>
    log: str

    @property
    def recipe_file(self) -> str:
        return os.path.join(self.run_dir, RECIPE_FILE)


def _layout(run_dir: str, name: str) -> ExperimentDir:
    inner = os.path.join(run_dir, name)
    return ExperimentDir(name, run_dir, inner, os.path.join(inner, f"log-{name}.out"))


def locate(workload: str, name: str, root: str | None = None) -> ExperimentDir:
    """Where ``create`` would put a run now, creating nothing (a run being prepared, a dry run): the first
    timestamp from now that no run directory has taken."""
    base = os.path.join(root or os.path.join(workload_dir(workload), "experiments"), name)
    stamp = int(time.time())
    while os.path.lexists(os.path.join(base, f"{name}_{stamp}")):
        stamp += 1
    return _layout(os.path.join(base, f"{name}_{stamp}"), name)


def claim(where: ExperimentDir) -> bool:
    """Create exactly ``where`` (from ``locate``); False, creating nothing, when another run took its
    directory in between."""
    os.makedirs(os.path.dirname(where.run_dir), exist_ok=True)
    try:
        os.mkdir(where.run_dir)
    except FileExistsError:
        return False
    os.makedirs(where.inner)
    return True


def create(workload: str, name: str, root: str | None = None) -> ExperimentDir:
    """A fresh run directory; the timestamp moves on until the name is free."""
    while True:
        where = locate(workload, name, root)
        if claim(where):
            return where


def write_json(path: str, data: dict) -> None:
    """Atomically: readers see the old file or the new one, never half. Strict JSON: a NaN or an
    infinity is a ValueError naming the file, never the non-JSON token ``NaN`` written in it.
    Every secret in ``data`` is written ``***`` (``llmb.redaction.scrub``): every record llmb
    writes goes through here, ``run.json``, ``recipe.json``, ``provenance.json``, the job records."""
    from llmb.redaction import scrub

    try:
        text = json.dumps(scrub(data), indent=2, default=str, allow_nan=False)
    except ValueError as exc:
        raise ValueError(f"{path}: not written, as it would not be strict JSON: {exc}") from None
    _write(path, text + "\n")


def write_text(path: str, text: str) -> None:
    """Atomically, as ``write_json``; every secret in ``text`` written ``***`` (``llmb.redaction``:
    ``--dump-env``'s file)."""
    from llmb.redaction import environment_secrets, mask

    _write(path, mask(text, environment_secrets()))


def _write(path: str, text: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:  # a full disk, an interrupt: leave no half-written temporary behind
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


# bytes: the largest records llmb writes are a sweep's or a certification suite's, under a kilobyte a task, so
# a few megabytes at the most tasks a sweep may have (runs/sweeps.MAX_TASKS); far more is not llmb's writing,
# and reading it would take memory by the gigabyte (JSON's objects are ten times its text) for nothing.
MAX_STATE_FILE = 64 << 20

_JSON_KINDS = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    list: "a list",
    dict: "an object",
    type(None): "null",
}


def json_kind(value: object) -> str:
    """What a JSON value is, in words (``a list``, ``an integer``...)."""
    return _JSON_KINDS.get(type(value), type(value).__name__)


class StateFileError(LlmbError):
    """A state file llmb wrote (``job.json``, ``sweep.json``, ``suite.json``...) that is there but cannot be
    used. ``problem`` says why and follows the file's name: ``is not valid JSON (corrupt or cut short)``,
    ``is a FIFO (named pipe), not a regular file``, ``holds a list, not an object``. With ``subject`` (what
    the file records: ``sweep 'sweep-1a2b3c'``) the message starts with it: ``sweep 'sweep-1a2b3c' is
    corrupt: <path> is not valid JSON (corrupt or cut short)``, then ``hint``. Exit code 1."""

    def __init__(self, path: str, problem: str, subject: str | None = None, hint: str = ""):
        message = f"{path} {problem}"
        if subject:
            state = "is unreadable" if problem.startswith("cannot be read") else "is corrupt"
            message = f"{subject} {state}: {message}"
        super().__init__(message + (f"; {hint}" if hint else ""))
        self.path = path
        self.problem = problem

    def about(self, subject: str, hint: str = "") -> StateFileError:
        """The same problem, said of ``subject``."""
        return StateFileError(self.path, self.problem, subject, hint)

    @property
    def short(self) -> str:
        """The problem after the file's name alone (``exit.json is empty``)."""
        return f"{os.path.basename(self.path)} {self.problem}"


def wrong_shape(path: str, exc: ValueError) -> StateFileError:
    """A record whose JSON is fine but whose content is not what llmb writes (``record_fields``'s error)."""
    return StateFileError(path, f"has the wrong shape: {exc}")


def _os_problem(path: str, exc: OSError) -> str:
    from llmb.files import NotRegularFile

    try:
        target = os.readlink(path)
    except OSError:
        target = None
    if isinstance(exc, NotRegularFile):
        return (
            f"is {f'a symbolic link to {target}, which is ' if target is not None else ''}{exc.kind}, "
            f"not a regular file"
        )
    if exc.errno == errno.ELOOP:
        return f"is a symbolic link to {target} that cannot be followed: the links loop"
    if isinstance(exc, FileNotFoundError) and target is not None:
        return f"is a symbolic link to {target}, which does not exist"
    return f"cannot be read ({os.strerror(exc.errno).lower() if exc.errno else exc})"


def load_json_state(path: str, *, finite: bool = False) -> dict | None:
    """The JSON object in the state file ``path``; None when there is no such file. Anything else raises
    ``StateFileError`` naming what is wrong: only a regular file is read (a FIFO is refused, never waited
    on; a device, a directory likewise), and at most ``MAX_STATE_FILE`` bytes of it. ``finite``: a NaN,
    an Infinity or a number too large for a float (Python's JSON, not the standard's) is an error too."""
    from llmb.files import read_regular

    try:
        raw = read_regular(path, MAX_STATE_FILE + 1)
    except (FileNotFoundError, NotADirectoryError) as exc:
        if os.path.islink(path):
            raise StateFileError(path, _os_problem(path, exc)) from None
        return None
    except OSError as exc:
        raise StateFileError(path, _os_problem(path, exc)) from None
    if len(raw) > MAX_STATE_FILE:
        raise StateFileError(
            path, f"is larger than {MAX_STATE_FILE >> 20} MiB, more than any record llmb writes"
        )
    try:
        data = json.loads(raw.decode("utf-8"), **(_FINITE if finite else {}))
    except (UnicodeDecodeError, ValueError):
        raise StateFileError(
            path, "is empty" if not raw.strip() else "is not valid JSON (corrupt or cut short)"
        ) from None
    except RecursionError:  # "[[[[...": the decoder's recursion bound
        raise StateFileError(path, "nests deeper than any record llmb writes") from None
    if not isinstance(data, dict):
        raise StateFileError(path, f"holds {json_kind(data)}, not an object")
    return data


def _not_standard_json(constant: str):
    raise ValueError(f"{constant} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large for a float")
    return value


_FINITE = {"parse_constant": _not_standard_json, "parse_float": _finite_float}


_ANNOTATED = {
    "str": ((str,), "a string"),
    "int": ((int,), "an integer"),
    "float": ((int, float), "a number"),
    "bool": ((bool,), "true or false"),
    "dict": ((dict,), "an object"),
    "None": ((type(None),), "null"),
    "list": ((list,), "a list"),
}


def _fits(value: object, annotation: str) -> bool:
    if annotation.startswith("list[") and annotation.endswith("]"):
        return isinstance(value, list) and all(_fits(item, annotation[5:-1]) for item in value)
    names = [a.strip() for a in annotation.split("|")]
    if not all(name in _ANNOTATED for name in names):
        return True  # a type JSON has no word for (none of llmb's records has one): not checked
    kinds = tuple(kind for name in names for kind in _ANNOTATED[name][0])
    # true is no integer here
    return isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool))


def _words(annotation: str) -> str:
    if annotation.startswith("list[") and annotation.endswith("]"):
        inner = _words(annotation[5:-1])
        return (
            f"a list of {inner.removeprefix('a ').removeprefix('an ')}s"
            if " or " not in inner
            else f"a list, each item {inner}"
        )
    return " or ".join(_ANNOTATED[a.strip()][1] for a in annotation.split("|"))


def record_fields(
    cls: type, data: object, what: str, nested: dict[str, type] | None = None
) -> dict:
    """The fields of the dataclass ``cls`` from the JSON object ``data`` (a record llmb wrote), each
    checked against its annotation (``str``, ``int | None``, ``list[str]``, ``dict``...; a ``list[X]``
    whose ``X`` is in ``nested`` is a list of such records, built). Keys the class does not know are
    left out. A ValueError names what is wrong: ``job.json lacks the field 'log'``, ``job.json's field
    'ranks' is a string ('two'), not an integer`` (``what`` names the record)."""
    from dataclasses import MISSING, fields

    if not isinstance(data, dict):
        raise ValueError(f"{what} is {json_kind(data)}, not an object")
    values = {}
    for spec in fields(cls):
        if spec.name not in data:
            if spec.default is MISSING and spec.default_factory is MISSING:
                raise ValueError(f"{what} lacks the field {spec.name!r}")
            continue
        value = data[spec.name]
        annotation = (
            spec.type
            if isinstance(spec.type, str)
            else getattr(spec.type, "__name__", str(spec.type))
        )
        inner = annotation[5:-1] if annotation.startswith("list[") else None
        if nested and inner in nested:
            if not isinstance(value, list):
                raise ValueError(f"{what}'s field {spec.name!r} is {json_kind(value)}, not a list")
            value = [
                nested[inner](
                    **record_fields(nested[inner], item, f"{what}'s {spec.name}[{number}]", nested)
                )
                for number, item in enumerate(value, start=1)
            ]
        elif not _fits(value, annotation):
            raise ValueError(
                f"{what}'s field {spec.name!r} is {json_kind(value)} ({value!r:.40}), not "
                f"{_words(annotation)}"
            )
        values[spec.name] = value
    return values


def read_json(path: str, *, finite: bool = False) -> dict | None:
    """The JSON object in ``path``; None when there is none or it cannot be used (``load_json_state``
    tells the two apart, and says why; ``finite`` as there)."""
    try:
        return load_json_state(path, finite=finite)
    except StateFileError:
        return None
