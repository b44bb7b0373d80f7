"""``ADDITIONAL_SLURM_PARAMS``: the seeds' extra sbatch parameters.

Semicolon-separated items, each ``key=value`` or a bare flag; values may
hold commas (``nodelist=node001,node002;constraint=gpu&memory;exclusive``),
which is why the separator is a semicolon. Each item becomes one
``#SBATCH --key=value`` (or ``#SBATCH --flag``) line. A bare word must be
one of sbatch's options that take no value (``sbatch_options.FLAGS``):
``qos=x;y`` is refused, never read as ``--y``.

An item is refused, naming the option and why, when sbatch could read it
as an option llmb sets itself (``OWNED``: the script's own lines,
``script.OWNED_OPTIONS``, and what its submission depends on) or one that
breaks llmb's bookkeeping of the job (``BREAKS``: a job array's tasks would
share the job's one attempt file, exit file and log; ``oversubscribe``, or
an ``exclusive=user``/``mcs``, would undo the whole nodes llmb asks for),
whatever its spelling: sbatch takes any unambiguous abbreviation of an
option (``outpu`` is ``output``). Every other item must name an sbatch
option whole (``sbatch_options.whole``, or a name the installed sbatch's
``--help`` lists, for a Slurm newer than the data): an abbreviation
(``partit``, or ``a``, which sbatch refuses as ambiguous) and a word sbatch
does not know are refused with the whole name or the names that are valid.

sbatch also reads options from its input variables (``SBATCH_ARRAY_INX``,
``SBATCH_OPEN_MODE``, ...), over the script's lines: one set in the
submitting shell for an option refused here is refused the same way
(``check_environment``), and never reaches sbatch.

An item for an option llmb has a setting of its own for (``nodelist=``,
``qos=``, ``gres=``, ``account=``, ``time=``, ...; ``CHECKED``), under
whatever spelling sbatch reads as that option, passes the same check as
the setting's flag, variable and cluster file key (``llmb.install.value_checks``).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping

from llmb import UsageError, value_checks

from llmb_backend_slurm import sbatch_options
from llmb_backend_slurm.script import OWNED_OPTIONS

_BLANKS = " \t"
_RECIPE = "llmb sets it from the recipe; change the recipe (--gpus, --gpus-per-node) instead"
_LAYOUT = "llmb sets it: the job's name, output and directory follow the published recipes' experiment layout"
_SUBMISSION = "llmb sets it: its submission and tracking depend on it"
_NO_JOB = "sbatch would then not submit the job llmb tracks (or not answer until it ended)"
# sbatch options llmb sets itself, and why: giving them here would contradict the recipe or the job's bookkeeping.
OWNED = {
    **OWNED_OPTIONS,
    "ntasks": _RECIPE,
    "gpus": _RECIPE,
    "error": _LAYOUT,
    "chdir": _LAYOUT,
    "parsable": _SUBMISSION,
    "wrap": _SUBMISSION,
    "export": _SUBMISSION,
    "comment": "llmb sets it: it marks each submission, to find the job again when sbatch's answer is lost",
    "test-only": _NO_JOB,
    "wait": _NO_JOB,
    "help": _NO_JOB,
    "usage": _NO_JOB,
    "version": _NO_JOB,
}
_SHARED = (
    "llmb asks for whole nodes (--exclusive), as the published recipes run: written after it, this "
    "would let other jobs onto the benchmark's nodes, GPUs and network"
)
# sbatch options that would break llmb's bookkeeping of the job, and why.
BREAKS = {
    "array": (
        "a job array runs each index as a task of its own, and every task would write the one attempt "
        "file, exit file and log llmb follows the job by; submit several runs with llmb sweep instead"
    ),
    "oversubscribe": _SHARED,
}
REFUSED = {**OWNED, **BREAKS}
_EXCLUSIVE_VALUE = (
    "--exclusive with a value shares the nodes (=user and =mcs with other jobs of the same user or "
    "MCS label, =oversubscribe with any)"
)
# sbatch's input variables (man sbatch, INPUT ENVIRONMENT VARIABLES) for options llmb refuses: sbatch
# reads them from the submitting shell, over the script's #SBATCH lines (tests/test_slurm_options.py
# finds each in the installed sbatch). SBATCH_EXCLUSIVE is refused with a value that shares the nodes.
VARIABLES = {
    "SBATCH_ARRAY_INX": "array",
    "SBATCH_ERROR": "error",
    "SBATCH_EXCLUSIVE": "exclusive",
    "SBATCH_EXPORT": "export",
    "SBATCH_GPUS": "gpus",
    "SBATCH_JOB_NAME": "job-name",
    "SBATCH_NO_REQUEUE": "no-requeue",
    "SBATCH_OPEN_MODE": "open-mode",
    "SBATCH_OUTPUT": "output",
    "SBATCH_REQUEUE": "requeue",
    "SBATCH_WAIT": "wait",
}


def check_environment(environ: Mapping[str, str]) -> None:
    """UsageError when the submitting shell sets an sbatch input variable for an option llmb sets
    or refuses (``VARIABLES``): sbatch would obey it over the script (a job array, another output)."""
    for variable, name in sorted(VARIABLES.items()):
        value = environ.get(variable)
        if value is None:
            continue
        shown = value if len(value) <= 40 else value[:40] + "..."
        if name == "exclusive":
            if value.strip(_BLANKS) in ("", "exclusive"):
                continue
            why = f"{_EXCLUSIVE_VALUE}; {_SHARED}"
        else:
            why = REFUSED[name]
        raise UsageError(
            f"{variable}={shown!r} is set in this shell: sbatch reads it as --{name}, over the "
            f"script's #SBATCH lines; {why}. Unset it for llmb's runs (env -u {variable} llmb ...)."
        )


def parse(
    text: str | None, listed: Callable[[str], bool | None] | None = None
) -> list[tuple[str, str | None]]:
    """``[(key, value or None), ...]``; UsageError naming the bad item. ``listed``: whether the
    installed sbatch lists ``--name`` (None: it could not be asked), for a name the data lacks."""
    if not text or not text.strip(_BLANKS):
        return []
    items = []
    for raw in text.split(";"):
        # a line break is never dropped: it is refused, as in a flag's value
        item = raw.strip(_BLANKS)
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = value_checks.sbatch_option(
            key.strip(_BLANKS).lstrip("-"), f"ADDITIONAL_SLURM_PARAMS item {item!r}"
        )
        _refuse_owned(key)
        if not sep:
            _refuse_valued(key, listed)
        _refuse_partial(key, listed)
        if sep and key == "exclusive":
            raise UsageError(
                f"ADDITIONAL_SLURM_PARAMS item {item!r}: {_EXCLUSIVE_VALUE}; {_SHARED}. A bare "
                f"'exclusive' is what llmb writes already."
            )
        if sep and (name := checked_option(key)):
            where = f"ADDITIONAL_SLURM_PARAMS item {key}" + (
                "" if key == name else f" (sbatch's --{name})"
            )
            items.append((key, str(CHECKED[name](value, where))))  # as the option's flag is checked
            continue
        if sep and any(c in value for c in "\n\r\0"):
            raise UsageError(
                f"ADDITIONAL_SLURM_PARAMS item {key!r}: a value cannot contain a line break."
            )
        items.append((key, value.strip(_BLANKS) if sep else None))
    return items


# The sbatch options llmb has a setting of its own for, and the check of the setting's kind
# (llmb.install.cluster_settings): an item for one of them is checked as its flag is.
CHECKED = {
    "account": value_checks.names,
    "partition": value_checks.names,
    "time": value_checks.time_limit,
    "nodelist": value_checks.hostlist,
    "exclude": value_checks.hostlist,
    "reservation": value_checks.names,
    "qos": value_checks.names,
    "constraint": value_checks.features,
    "gres": value_checks.gres,
    "segment": value_checks.segment,
}


def checked_option(key: str) -> str | None:
    """The option of ``CHECKED`` sbatch reads ``--key`` as (its name, an alias, an unambiguous
    abbreviation), or None."""
    # newer: segment
    meanings = {sbatch_options.canonical(name) for name in sbatch_options.resolve(key)} or {key}
    name = next(iter(meanings)) if len(meanings) == 1 else None
    return name if name in CHECKED else None


def _refuse_owned(key: str) -> None:
    """UsageError when sbatch could take ``--key`` for an option llmb sets or one that breaks
    its bookkeeping (``REFUSED``), or ``key`` is an older sbatch's name for one."""
    if key in sbatch_options.FORMER and sbatch_options.FORMER[key] in REFUSED:
        now = sbatch_options.FORMER[key]
        raise UsageError(
            f"ADDITIONAL_SLURM_PARAMS item {key!r} is older sbatch's name for --{now}; "
            f"{REFUSED[now]}."
        )
    meanings = sbatch_options.resolve(key)
    owned = [
        sbatch_options.canonical(name)
        for name in meanings
        if sbatch_options.canonical(name) in REFUSED
    ]
    if not owned:
        return
    name = owned[0]
    if len(meanings) > 1:
        raise UsageError(
            f"ADDITIONAL_SLURM_PARAMS item {key!r} abbreviates several sbatch options "
            f"({', '.join('--' + m for m in meanings)}), which sbatch refuses as ambiguous, among "
            f"them --{name}; {REFUSED[name]}. Give the whole name of the option you mean."
        )
    if key == name:
        how = ""
    elif key == meanings[0]:
        how = " (another name sbatch has for it)"
    else:
        how = " (sbatch takes any unambiguous abbreviation of an option)"
    raise UsageError(
        f"ADDITIONAL_SLURM_PARAMS item {key!r} is sbatch's --{name}{how}; {REFUSED[name]}."
    )


def _refuse_partial(key: str, listed: Callable[[str], bool | None] | None) -> None:
    """UsageError when ``key`` is not the whole name of an sbatch option: an abbreviation, or a
    word neither the data (Slurm 22.05's sbatch) nor the installed sbatch's ``--help`` knows."""
    if sbatch_options.whole(key):
        return
    meanings = sbatch_options.resolve(key)
    where = f"ADDITIONAL_SLURM_PARAMS item {key!r}"
    if len(meanings) == 1:
        raise UsageError(
            f"{where} abbreviates sbatch's --{meanings[0]}: give an option's whole name "
            f"({meanings[0]}), as a later sbatch may read an abbreviation as another option."
        )
    if meanings:
        raise UsageError(
            f"{where} abbreviates several sbatch options ({', '.join('--' + m for m in meanings)}), "
            f"which sbatch refuses as ambiguous: give the whole name of the one you mean."
        )
    if listed is not None and listed(key):
        return  # a newer sbatch's option: the installed one lists it
    close = difflib.get_close_matches(key, sorted(sbatch_options.OPTIONS - set(REFUSED)), n=3)
    raise UsageError(
        f"{where} is no sbatch option (Slurm 22.05's sbatch has none by that name, and this "
        f"machine's sbatch does not list it)"
        + (f"; did you mean {', '.join(close)}?" if close else "")
        + " Give an sbatch long option's whole name, as sbatch --help lists them, e.g. constraint=gpu."
    )


def _refuse_valued(key: str, listed: Callable[[str], bool | None] | None) -> None:
    """UsageError when a bare ``key`` is not an option sbatch takes without a value (an
    abbreviation is left to ``_refuse_partial``; a newer sbatch's option, which the data cannot
    tell about, to that sbatch)."""
    name = sbatch_options.canonical(key)
    if name in sbatch_options.FLAGS:
        return
    if sbatch_options.whole(key):
        what = f"sbatch's --{name}, which takes a value"
    elif sbatch_options.resolve(key) or (listed is not None and listed(key)):
        return
    else:
        what = "no sbatch option"
    raise UsageError(
        f"ADDITIONAL_SLURM_PARAMS item {key!r} has no '=value' and is {what}; give key=value, or one of "
        f"the options that take none ({', '.join(sorted(sbatch_options.FLAGS - set(REFUSED)))}). Items "
        f"are separated by ';', so no value can hold one."
    )


# sbatch options llmb has a setting of its own for (--nodelist, --exclude, ..., --gres, --segment).
DEDICATED = ("nodelist", "exclude", "reservation", "qos", "constraint", "gres", "segment")


def dedicated(
    items: list[tuple[str, str | None]],
) -> tuple[dict[str, str], list[tuple[str, str | None]]]:
    """The items sbatch reads as an option llmb has a setting for (by that option's name; one
    each, or UsageError), and the others, in order. Their values passed the setting's own check
    in ``parse``."""
    found: dict[str, str] = {}
    rest = []
    for key, value in items:
        meanings = {sbatch_options.canonical(name) for name in sbatch_options.resolve(key)} or {key}
        name = next(iter(meanings)) if len(meanings) == 1 else None
        if name not in DEDICATED or value is None:
            rest.append((key, value))
            continue
        if name in found:
            raise UsageError(
                f"ADDITIONAL_SLURM_PARAMS gives --{name} twice ({found[name]!r} and {value!r}); "
                f"give it once."
            )
        found[name] = value
    return found, rest
