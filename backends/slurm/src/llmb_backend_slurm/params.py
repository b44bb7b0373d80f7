"""``ADDITIONAL_SLURM_PARAMS``: the seeds' extra sbatch parameters.

Semicolon-separated items, each ``key=value`` or a bare flag; values may
hold commas (``nodelist=node001,node002;constraint=gpu&memory;exclusive``),
which is why the separator is a semicolon. Each item becomes one
``#SBATCH --key=value`` (or ``#SBATCH --flag``) line. A bare word must be
one of sbatch's options that take no value (``sbatch_options.FLAGS``):
``qos=x;y`` is refused, never read as ``--y``.

sbatch takes any unambiguous abbreviation of an option (``outpu`` is
``output``), so an item is refused when sbatch could read it as an option
llmb sets itself (``OWNED``: the script's own lines, ``script.OWNED_OPTIONS``,
and what its submission depends on), whatever its spelling.

An item for an option llmb has a setting of its own for (``nodelist=``,
``qos=``, ``gres=``, ``account=``, ``time=``, ...; ``CHECKED``), under
whatever spelling sbatch reads as that option, passes the same check as
the setting's flag, variable and cluster file key (``llmb.install.value_checks``).
"""

from __future__ import annotations

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


def parse(text: str | None) -> list[tuple[str, str | None]]:
    """``[(key, value or None), ...]``; UsageError naming the bad item."""
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
            _refuse_valued(key)
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
    """UsageError when sbatch could take ``--key`` for an option llmb sets."""
    meanings = sbatch_options.resolve(key)
    owned = [
        sbatch_options.canonical(name)
        for name in meanings
        if sbatch_options.canonical(name) in OWNED
    ]
    if not owned:
        return
    name = owned[0]
    if len(meanings) > 1:
        raise UsageError(
            f"ADDITIONAL_SLURM_PARAMS item {key!r} abbreviates several sbatch options "
            f"({', '.join('--' + m for m in meanings)}), among them --{name}; {OWNED[name]}. "
            f"Spell the option you mean in full."
        )
    if key == name:
        how = ""
    elif key == meanings[0]:
        how = " (another name sbatch has for it)"
    else:
        how = " (sbatch takes any unambiguous abbreviation of an option)"
    raise UsageError(
        f"ADDITIONAL_SLURM_PARAMS item {key!r} is sbatch's --{name}{how}; {OWNED[name]}."
    )


def _refuse_valued(key: str) -> None:
    """UsageError when a bare ``key`` is not an option sbatch takes without a value."""
    meanings = {sbatch_options.canonical(name) for name in sbatch_options.resolve(key)}
    if len(meanings) == 1 and meanings <= sbatch_options.FLAGS:
        return
    what = (
        f"sbatch's --{next(iter(meanings))}, which takes a value"
        if len(meanings) == 1
        else "no sbatch option"
        if not meanings
        else f"an abbreviation of several sbatch options ({', '.join('--' + m for m in sorted(meanings))})"
    )
    raise UsageError(
        f"ADDITIONAL_SLURM_PARAMS item {key!r} has no '=value' and is {what}; give key=value, or one of "
        f"the options that take none ({', '.join(sorted(sbatch_options.FLAGS - set(OWNED)))}). Items "
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
