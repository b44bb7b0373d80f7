"""What a log states of the run it is: its GPU count, global and micro batch, sequence length,
precision, parallel layout and layers, where the tool prints them.

Read, per field, from these lines (whatever launcher prefix they carry):

* Megatron-LM's arguments block, ``  global_batch_size ............................... 128`` (every
  argument, rank 0, before training), and its ``using world size: 8, data-parallel size: 8,
  context-parallel size: 1, ... tensor-model-parallel size: 2, pipeline-model-parallel size: 1``;
* Megatron-Bridge's configuration summary, ``Configuration Summary (Non-Default Values vs Megatron
  Core)`` then ``  key: value`` lines up to its closing rule (its ``[train]``, ``[model]`` and
  ``[dataset]`` sections);
* torchtitan's ``Trainer is initialized with local batch size 8, global batch size 64, ...,
  sequence length 8192, ...``, ``Building 2-D device mesh with ['dp_shard', 'tp'], [4, 2]`` and
  ``Float8 training active with recipe rowwise`` (FP8);
* Lightning's ``Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/16`` (NeMo 2);
* AMD Primus's ``Applying CLI overrides: {'num_layers': 8, ..., 'global_batch_size': 8, ...}`` and
  ``ThroughputAverageExtension initialized with seq_len: 4096 world_size: 8``.

The precision is stated where the log names an FP4 or FP8 recipe (``fp4``, ``fp8`` not None:
``nvfp4``, ``fp8``), or, in Megatron-LM's full arguments block (which prints ``fp8`` as None), BF16
without either. Megatron-Bridge's summary prints only what differs from Megatron-Core's defaults, so
it states FP8 and FP4 but never BF16 alone.

The iteration lines' own ``global batch size`` is read with the iterations (``IterationLog``);
``llmb.results.identity`` holds both against the run's name and records.
"""

from __future__ import annotations

import re

from llmb.results.lines import find_lines, split
from llmb.results.records import STATED_FIELDS, Statement

MAX_STATEMENTS = 64  # distinct (field, value) pairs kept: a log that states more is no one run
MAX_SHOWN = 120  # characters of the stating line kept to quote it

# Megatron's argument names -> llmb's fields (whole numbers)
_COUNTS = {
    b"global_batch_size": "gbs",
    b"micro_batch_size": "mbs",
    b"seq_length": "seq_len",
    b"sequence_length": "seq_len",
    b"encoder_seq_length": "seq_len",
    b"world_size": "gpus",
    b"num_layers": "layers",
    b"tensor_model_parallel_size": "tp",
    b"pipeline_model_parallel_size": "pp",
    b"context_parallel_size": "cp",
    b"expert_model_parallel_size": "ep",
}
_PRECISION = (b"fp4", b"fp8", b"bf16")
# "  global_batch_size ............................... 128": a name, dots, the value (Megatron's print_args)
_ARGUMENT = re.compile(rb"\s{0,8}([a-z][a-z0-9_]{0,63}) \.{2,64} ([^\s].{0,255})")
# "using world size: 8, data-parallel size: 8, context-parallel size: 1, hierarchical context-parallel
# sizes: None, tensor-model-parallel size: 1, encoder-tensor-model-parallel size: 0, pipeline-model-parallel
# size: 1, ..." (Megatron-LM's validate_args; the encoder's sizes are not the model's)
_WORLD = {
    "gpus": re.compile(rb"using world size: (\d{1,12})"),
    "cp": re.compile(rb"(?<![\w-])context-parallel size: (\d{1,12})"),
    "tp": re.compile(rb"(?<![\w-])tensor-model-parallel size: (\d{1,12})"),
    "pp": re.compile(rb"(?<![\w-])pipeline-model-parallel size: (\d{1,12})"),
}
_SUMMARY = b"Configuration Summary (Non-Default Values vs Megatron Core)"
_SUMMARY_ITEM = re.compile(rb"\s{1,8}([a-z][a-z0-9_]{0,63}): ([^\s].{0,255})")
_SUMMARY_LINES = 2000  # a summary longer than this is not one
_RULE = b"=" * 20
_TITAN_INIT = re.compile(
    rb"Trainer is initialized with [^\n]{0,256}?global batch size (\d{1,12})[^\n]{0,256}?"
    rb"sequence length (\d{1,12})"
)
_MESH = re.compile(rb"Building \d{1,2}-D device mesh with \[[^\]\n]{0,512}\], \[([\d, ]{1,256})\]")
_LIGHTNING = re.compile(
    rb"Initializing distributed: GLOBAL_RANK: \d{1,12}, MEMBER: \d{1,12}/(\d{1,12})"
)
_NONE = (b"none", b"false", b"null", b"''", b'""')
# AMD Primus: "[Primus:Runtime] Applying CLI overrides: {'num_layers': 8, ..., 'global_batch_size': 8, ...}"
# and its "ThroughputAverageExtension initialized with seq_len: 4096 world_size: 8"
_PRIMUS_OVERRIDES = b"Applying CLI overrides: {"
_PRIMUS_ITEM = re.compile(rb"'([a-z][a-z0-9_]{0,63})': (\d{1,18})[,}]")
_PRIMUS_THROUGHPUT = re.compile(rb"initialized with seq_len: (\d{1,12}) world_size: (\d{1,12})")


def _text(value: bytes) -> bytes:
    """A printed value without its quotes and a summary's ``(Mcore default: ...)``."""
    value = value.split(b"  (Mcore default:", 1)[0].strip()
    return value.strip(b"'\"")


class StatementsReader:
    """Every (field, value) the log states, each with the first line that states it (``Statement``),
    in log order; a field stated twice with two values keeps both (the log is of more than one run, or
    contradicts itself). None where the log states nothing."""

    def __init__(self) -> None:
        # (field, value) -> (where its first line starts in the text read, the statement)
        self.found: dict[tuple[str, object], tuple[int, Statement]] = {}
        self.precision: dict[bytes, tuple[bytes, bytes, int]] = {}  # b"fp8" -> (value, line, where)
        self.offset = 0  # of the chunk being read, in the text this reader reads
        self.full_arguments = False  # Megatron-LM's block printed fp8 (as None or a recipe)
        self.summary = 0  # lines of a Megatron-Bridge summary read; 0: not inside one
        self.summary_rules = 0

    def feed(self, chunk: bytes) -> None:
        self._read(chunk)
        self.offset += len(chunk)

    def _read(self, chunk: bytes) -> None:
        if self.summary or _SUMMARY in chunk:
            self._summary(chunk)
        if b" ..." in chunk:
            for line in find_lines(chunk, b" ..."):
                if (m := _ARGUMENT.fullmatch(line.body)) is not None:
                    self._item(m.group(1), m.group(2), line.body, line.start, arguments=True)
        if b"using world size:" in chunk:
            for line in find_lines(chunk, b"using world size:"):
                for field, pattern in _WORLD.items():
                    if (m := pattern.search(line.body)) is not None:
                        self._state(field, int(m.group(1)), line.body, line.start)
        if b"Trainer is initialized with" in chunk:
            for line in find_lines(chunk, b"Trainer is initialized with"):
                if (m := _TITAN_INIT.search(line.body)) is not None:
                    self._state("gbs", int(m.group(1)), line.body, line.start)
                    self._state("seq_len", int(m.group(2)), line.body, line.start)
        if b"device mesh with" in chunk:
            for line in find_lines(chunk, b"device mesh with"):
                if (m := _MESH.search(line.body)) is not None:
                    sizes = [int(s) for s in m.group(1).split(b",") if s.strip()]
                    product = 1
                    for size in sizes:
                        product *= size
                    if sizes and 0 < product < 1 << 40:
                        self._state("gpus", product, line.body, line.start)
        if _PRIMUS_OVERRIDES in chunk:
            for line in find_lines(chunk, _PRIMUS_OVERRIDES):
                for name, value in _PRIMUS_ITEM.findall(line.body):
                    if name in _COUNTS:
                        self._state(_COUNTS[name], int(value), line.body, line.start)
        if b"initialized with seq_len:" in chunk:
            for line in find_lines(chunk, b"initialized with seq_len:"):
                if (m := _PRIMUS_THROUGHPUT.search(line.body)) is not None:
                    self._state("seq_len", int(m.group(1)), line.body, line.start)
                    self._state("gpus", int(m.group(2)), line.body, line.start)
        if b"Float8 training active" in chunk:  # torchtitan's float8 converter
            for line in find_lines(chunk, b"Float8 training active"):
                self._state("dtype", "fp8", line.body, line.start)
        if b"Initializing distributed:" in chunk:
            for line in find_lines(chunk, b"Initializing distributed:"):
                if (m := _LIGHTNING.search(line.body)) is not None:
                    self._state("gpus", int(m.group(1)), line.body, line.start)

    def _summary(self, chunk: bytes) -> None:
        """Megatron-Bridge's summary: from its title to the second rule after it."""
        position = 0
        if not self.summary:
            at = chunk.find(_SUMMARY)
            position = chunk.find(b"\n", at) + 1 if chunk.find(b"\n", at) >= 0 else len(chunk)
            self.summary, self.summary_rules = 1, 0
        while position < len(chunk) and self.summary:
            end = chunk.find(b"\n", position)
            end = len(chunk) if end < 0 else end
            body, start = split(chunk[position:end]).body, position
            position = end + 1
            self.summary += 1
            if _RULE in body:
                self.summary_rules += 1
                if self.summary_rules >= 2:
                    self.summary = 0
            elif (m := _SUMMARY_ITEM.fullmatch(body)) is not None:
                self._item(m.group(1), m.group(2), body, start, arguments=False)
            if self.summary > _SUMMARY_LINES:
                self.summary = 0

    def _item(self, name: bytes, value: bytes, line: bytes, start: int, arguments: bool) -> None:
        value = _text(value)
        if name in _COUNTS:
            if value.isdigit() and len(value) <= 18:
                self._state(_COUNTS[name], int(value), line, start)
        elif name in _PRECISION:
            if arguments and name == b"fp8":
                self.full_arguments = True
            self.precision.setdefault(name, (value, line, self.offset + start))

    def _state(
        self, field: str, value: object, line: bytes, start: int, absolute: bool = False
    ) -> None:
        """Keep the first line (in log order) that states ``field``'s ``value``; ``start`` is where the
        line starts in the chunk being read (``absolute``: in the text this reader reads)."""
        at = start if absolute else self.offset + start
        known = self.found.get((field, value))
        if known is not None and known[0] <= at:
            return
        if known is None and len(self.found) >= MAX_STATEMENTS:
            return
        shown = line.strip()[: 4 * MAX_SHOWN].decode("utf-8", "replace")[:MAX_SHOWN]
        self.found[(field, value)] = (at, Statement(field, value, shown))

    def finish(self) -> tuple[Statement, ...] | None:
        dtype = self._dtype()
        if dtype is not None:
            self._state("dtype", dtype[0], dtype[1], dtype[2], absolute=True)
        # in log order, however the log was cut into chunks (one line's statements in the fields' order)
        order = {field: i for i, field in enumerate(STATED_FIELDS)}
        ranked = sorted(
            self.found.values(),
            key=lambda f: (f[0], order.get(f[1].field, len(order)), str(f[1].value)),
        )
        return tuple(statement for _, statement in ranked) or None

    def _dtype(self) -> tuple[str, bytes, int] | None:
        stated = {
            name: found for name, found in self.precision.items() if found[0].lower() not in _NONE
        }
        if b"fp4" in stated:
            return "nvfp4", *stated[b"fp4"][1:]
        if b"fp8" in stated:
            return "fp8", *stated[b"fp8"][1:]
        bf16 = stated.get(b"bf16")
        if self.full_arguments and bf16 is not None and bf16[0].lower() == b"true":
            return "bf16", *bf16[1:]
        return None
