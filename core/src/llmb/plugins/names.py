"""Which workload each name means: the names and aliases the registered workloads claim, refereed
once, where the plugin host indexes them (``PluginHost.workloads``).

A name is typed on a command line (``llmb run NAME``) and read as a sweep or bulk file's section,
where ``NAME_SIZE`` is that workload at that size (``llama31_8b:``, ``pretrain_llama3.1_8b:``). So a
workload may not take a name that already means another one:

- a workload's own name beats another's alias: the alias is refused;
- llmb-run's names for llmb's built-in workloads (``data/builtin_workloads.yaml``) belong to the
  workload of that name, installed or not: another workload's claim is refused;
- a name whose part before its last ``_`` is another workload's name or alias (or a built-in's
  llmb-run name) reads as that workload at a size in a sweep file (``llama31_8b``): refused;
- an alias two workloads claim goes to neither: ``llmb run ALIAS`` and a sweep section naming it say
  "claimed by A and B".

A refused alias costs its workload only that alias (one warning naming both owners); a refused
name costs the whole workload (reported as unavailable, as a plugin that failed to load is).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache

from llmb.recipes.records import Workload

BUILTIN_FILE = "builtin_workloads.yaml"


@lru_cache(maxsize=1)
def builtin_names() -> dict[str, str]:
    """Each name of llmb's built-in workloads (their own names and llmb-run's) -> the workload."""
    from llmb.paths import packaged_data
    from llmb.yamlio import load_yaml_file

    table = load_yaml_file(packaged_data(BUILTIN_FILE)) or {}
    names: dict[str, str] = {}
    for workload, aliases in table.items():
        names[str(workload)] = str(workload)
        for alias in aliases or ():
            names[str(alias).strip().lower()] = str(workload)
    return names


def builtin_distribution(workload: str) -> str:
    """The distribution of a built-in workload (``llmb-plugin-llama31``)."""
    return f"llmb-plugin-{workload}"


@dataclass(frozen=True)
class Refusal:
    """One claim refused: ``name``, and the warning that says so, naming both owners."""

    name: str
    text: str


@dataclass
class Refereed:
    workloads: dict[str, Workload]  # the accepted ones, each with the aliases it keeps
    refused: dict[str, str] = field(default_factory=dict)  # workload refused whole -> why
    # a name that no workload is given, though one claimed it -> what to tell whoever types it
    unresolved: dict[str, str] = field(default_factory=dict)
    refusals: list[Refusal] = field(default_factory=list)


def referee(workloads: Mapping[str, Workload], providers: Mapping[str, str]) -> Refereed:
    """The names of ``workloads`` (name -> record, each name registered once) refereed;
    ``providers``: workload name -> who registered it, as users are shown it
    (``llmb-plugin-foo 0.3.0``)."""
    builtins = builtin_names()

    def who(name: str) -> str:
        if builtins.get(name) == name:
            shown = providers[name] if name in providers else builtin_distribution(name)
            return f"{name} ({shown}, llmb's built-in workload)"
        return f"{name} ({providers.get(name, 'unknown plugin')})"

    def holders(name: str, besides: str) -> list[str]:
        """The workloads other than ``besides`` that ``name`` already means: its own name's workload, the
        built-in whose llmb-run name it is (neither can be taken by an alias), else those that claim it
        as an alias."""
        if name in workloads:
            return [] if name == besides else [name]
        if (b := builtins.get(name)) is not None:
            return [] if b == besides else [b]
        return [w for w, record in workloads.items() if w != besides and name in record.aliases]

    def sweep_reading(name: str, besides: str) -> str | None:
        """How a sweep file reads ``name`` when it is another workload's section at a size."""
        prefix, sep, size = name.rpartition("_")
        others = holders(prefix, besides) if sep and prefix and size else []
        if not others:
            return None
        other = others[0] if prefix == others[0] else f"{prefix}, that is {others[0]}"
        return f"a sweep file reads the section {name}: as {who(others[0]).replace(others[0], other, 1)} at size {size}"

    out = Refereed(workloads={})
    # 1. Names: a workload whose own name is a built-in's llmb-run name, or reads as another workload at
    # a size in a sweep file, is refused whole.
    accepted: dict[str, Workload] = {}
    for name, record in workloads.items():
        b = builtins.get(name)
        if b is not None and b != name:
            why = f"its name is llmb-run's name for {who(b)}"
        elif (reading := sweep_reading(name, name)) is not None:
            why = reading
        else:
            accepted[name] = record
            continue
        why += "; rename it (docs/writing-a-workload.md, Names)"
        out.refused[name] = why
        out.refusals.append(
            Refusal(name, f"the workload {name!r} of {providers.get(name, '?')} is refused: {why}")
        )
    # 2. Aliases, against the names accepted, the built-ins' and each other.
    claims: dict[str, list[str]] = {}
    for name, record in accepted.items():
        for alias in record.aliases:
            claims.setdefault(alias, []).append(name)
    kept: dict[str, list[str]] = {name: [] for name in accepted}
    for alias, claimants in claims.items():
        left = []
        for name in claimants:
            if alias in accepted:  # another workload's own name: the name wins
                why = f"it is the name of the workload {who(alias)}"
            elif (b := builtins.get(alias)) is not None and b != name:
                why = f"it is llmb-run's name for {who(b)}"
                if b not in accepted:
                    out.unresolved[alias] = (
                        f"{alias!r} is llmb-run's name for {who(b)}, which is not installed here "
                        f"({who(name)} claims it and is refused it)"
                    )
            elif (reading := sweep_reading(alias, name)) is not None:
                why = reading
            else:
                left.append(name)
                continue
            out.refusals.append(
                Refusal(alias, f"the alias {alias!r} of {who(name)} is refused: {why}")
            )
        if len(left) == 1:
            kept[left[0]].append(alias)
        elif left:
            both = " and ".join(who(name) for name in left)
            out.unresolved[alias] = (
                f"the name {alias!r} is claimed by {both}, so it names neither; use the workload's own "
                f"name ({', '.join(left)})"
            )
            out.refusals.append(
                Refusal(alias, f"the alias {alias!r} is claimed by {both}; it names neither")
            )
    for name, record in accepted.items():
        aliases = tuple(kept[name])
        out.workloads[name] = (
            record if aliases == record.aliases else replace(record, aliases=aliases)
        )
    return out
