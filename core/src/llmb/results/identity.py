"""What ran: a run's identity, established before any verdict, and every doubt about it.

A run is known from three sources, strongest first:

1. what its log states (``llmb.results.formats.statements``, and the iteration lines' own ``global
   batch size``): GPU count, global and micro batch, sequence length, precision, layers, layout;
2. what llmb recorded for it (``recipe.json``; ``provenance.json`` adds the GPU type);
3. what its experiment's name says (llmb-run's ``pretrain_llama3_8b_fp8_gpus8_tp1_..._mbs2_gbs128``).

A value no source states but one assumes (the sequence length a name implies through its workload's
recipe) is replaced by the log's without a doubt. Any two sources that state different values for a
field are a *doubt*, in words that name both and where each comes from; so is a record field that holds
no possible value (``llmb.results.record_values``), and a log that states two values for one field.
Every doubt withholds every verdict (``llmb.results.references.unknown``): what the log proves and what
the run claims to be disagree, so which published figure would judge it is not known.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from llmb.results.records import RunContext, Statement

# How each field is named in a doubt.
WORDS = {
    "gpus": "GPU count",
    "gbs": "global batch size",
    "mbs": "micro batch size",
    "seq_len": "sequence length",
    "dtype": "precision",
    "layers": "layer count",
    "tp": "tensor parallel size",
    "pp": "pipeline parallel size",
    "cp": "context parallel size",
    "ep": "expert parallel size",
}
CONTEXT_FIELDS = (
    "gpus",
    "gbs",
    "seq_len",
    "dtype",
    "layers",
)  # RunContext's own; the rest: its layout
LAYOUT_FIELDS = ("tp", "pp", "cp", "ep", "mbs")
ITERATION_LINES = "its iteration lines' 'global batch size'"
_WHENCE = {"recipe": "its recipe.json", "name": "its experiment's name"}


def iteration_statements(batches: list[int | None]) -> list[Statement]:
    """The global batch sizes the iteration lines print (each distinct one once, the commonest first)."""
    counted = Counter(b for b in batches if b)
    return [Statement("gbs", gbs, ITERATION_LINES) for gbs, _ in counted.most_common()]


def recorded(context: RunContext, field: str):
    """What the run's records (or its name) give for ``field``; None where they give nothing. A name
    gives no sequence length: the one a name-only context holds is its recipe's, assumed."""
    if field == "seq_len" and context.source != "recipe":
        return None
    if field in CONTEXT_FIELDS:
        return getattr(context, field)
    return (context.layout or {}).get(field)


def same(field: str, a, b) -> bool:
    """Whether two values of ``field`` say the same: no expert parallelism is EP None or 1."""
    if field == "ep":
        return (a or 1) == (b or 1)
    return a == b


def establish(
    context: RunContext, statements: tuple[Statement, ...] | list[Statement]
) -> RunContext:
    """The context with what the log states where it states it (the log is what measured the run:
    its figures are derived from its values), and ``doubts`` grown by every disagreement (the
    module's docstring says which)."""
    doubts = list(context.doubts)
    by_field: dict[str, list[Statement]] = {}
    for statement in statements:
        by_field.setdefault(statement.field, []).append(statement)
    whence = _WHENCE.get(context.source, "its records")
    changes = {}
    for field, said in by_field.items():
        values = list(dict.fromkeys(s.value for s in said))
        words = WORDS.get(field, field)
        if len(values) > 1:
            if all(s.line == ITERATION_LINES for s in said):
                shown = ", ".join(str(v) for v in values[:-1]) + f" and {values[-1]}"
                doubts.append(f"the log's iteration lines state more than one {words}: {shown}")
            else:
                shown = " and ".join(f"{s.value} ({_where(s.line)})" for s in said[:2])
                doubts.append(f"the log states two {words}s: {shown}")
            continue
        value, line = values[0], said[0].line
        have = recorded(context, field)
        if have is not None and not same(field, have, value):
            doubts.append(f"the log's {words} is {value} ({_where(line)}) but {whence} says {have}")
        if field in CONTEXT_FIELDS:
            changes[field] = value  # the log's, for every figure derived from it
    return replace(context, **changes, doubts=tuple(dict.fromkeys(doubts)))


def _where(line: str) -> str:
    """Where the log states a value: its iteration lines, or the quoted line."""
    return "its iteration lines" if line == ITERATION_LINES else f"'{line}'"


def against_name(context: RunContext, named: RunContext) -> tuple[str, ...]:
    """Where a run's recipe.json and its experiment's name disagree (workload, size, precision, GPU
    count, global batch, layout): its doubts. None for a reduced run (a proxy, a shallow or fitted
    slice), whose name is the official configuration's and whose records say what ran."""
    if context.proxy or named.proxy or named.workload is None:
        return ()
    found = []
    for field in ("workload", "size", "dtype", "gpus", "gbs"):
        mine, theirs = getattr(context, field), getattr(named, field)
        if mine is not None and theirs is not None and mine != theirs:
            words = WORDS.get(field, field)
            found.append(
                f"its recipe.json's {words} is {mine} but its experiment's name says {theirs}"
            )
    for field in LAYOUT_FIELDS:
        mine, theirs = (context.layout or {}).get(field), (named.layout or {}).get(field)
        if (
            field in (context.layout or {})
            and field in (named.layout or {})
            and not same(field, mine, theirs)
        ):
            found.append(
                f"its recipe.json's {WORDS[field]} is {mine} but its experiment's name says {theirs}"
            )
    return tuple(found)
