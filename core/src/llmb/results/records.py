"""What a log says, as typed records that round-trip through JSON.

``RunResult`` is the record DESIGN.md names: status, per-iteration samples,
window statistics, checkpoint timings, failure reason, derived metrics. The
smaller records are what the individual log parsers find.
"""

from __future__ import annotations

import copy
import functools
import operator
from dataclasses import dataclass, field, fields
from typing import Any

from llmb.recipes.records import FAILURE_KINDS  # noqa: F401 - part of the results vocabulary too

# The statuses of the tool being replaced, then llmb's own: ``failed`` (the log
# says why), ``invalid_step_time`` (an inf, nan or absurd step time in the window),
# ``unreadable`` (the log is not a regular file, or reading it failed),
# ``too_short`` (the run's final iteration is before the statistics window's end),
# ``cancelled`` (its job was cancelled) and ``implausible`` (its figures are impossible for
# the GPU type it is said to have run on: above the dense peak, or far beyond every
# published figure; ``llmb.results.plausibility``). One vocabulary: llmb run's summary,
# status, results, compare and report all say these words for a run's result.
STATUSES = (
    "success",
    "incomplete",
    "invalid_grad_norm",
    "no_data",
    "no_log",
    "failed",
    "invalid_step_time",
    "unreadable",
    "too_short",
    "cancelled",
    "implausible",
)


# The version of what llmb derives from a log; bump it when a change adds or alters a result's
# fields (2: MFU against both peaks, NCCL transports; 3: the first real error in log order is the
# failure, new failure kinds, torchtitan logs, unusable step times; 4: implausible figures, one reference
# policy with the figure's source and batch; 5: torchrun's root cause and Slurm's cancels are read, Step
# Time lines without iteration lines, a failure after training finished no longer fails the run; 6: a
# GPU type that runs another's recipes is judged by the other's figures and peaks: an H200 by the
# H100's; 7: what the log states is held against the run's name and records (doubts withhold every
# verdict), record values are checked, the sample count is that of the step times, a launcher's own signal
# and a worker's CUDA error are causes), so stored results are computed again.
ANALYSIS = 7


_ATOMIC = frozenset((type(None), bool, int, float, complex, str, bytes))


def plain(obj: Any) -> Any:
    """``dataclasses.asdict`` (the same dicts, lists and tuples), without
    its deep copies of numbers and strings, which are immutable: most of the
    time of storing a parsed run went there."""
    kind = type(obj)
    if kind in _ATOMIC:
        return obj
    if hasattr(kind, "__dataclass_fields__"):
        return {f.name: plain(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a named tuple
        return kind(*[plain(value) for value in obj])
    if isinstance(obj, (list, tuple)):
        return kind(plain(value) for value in obj)
    if isinstance(obj, dict):
        return kind((plain(key), plain(value)) for key, value in obj.items())
    return copy.deepcopy(obj)


@dataclass(frozen=True)
class Sample:
    """One training iteration as logged (step time in milliseconds). The last
    three are torchtitan's own figures (None for the other formats): tokens per
    second per GPU, MFU in percent of the peak torchtitan assumes, and the peak
    reserved GPU memory in GiB."""

    iteration: int
    step_time_ms: float | None
    tflops_per_gpu: float | None = None
    loss: float | None = None
    grad_norm: float | None = None
    global_batch_size: int | None = None
    tokens_per_s_per_gpu: float | None = None
    mfu_pct: float | None = None
    memory_gib: float | None = None


SAMPLE_FIELDS = tuple(f.name for f in fields(Sample))
_SAMPLE_VALUES = operator.attrgetter(*SAMPLE_FIELDS)


def samples_to_columns(samples: tuple[Sample, ...]) -> dict[str, Any]:
    """``{"columns": SAMPLE_FIELDS, "rows": [[iteration, step time, ...], ...]}``: a result's iterations
    as stored, without each field's name repeated on every iteration (they were most of a stored
    result, and most of the time to write one)."""
    return {"columns": list(SAMPLE_FIELDS), "rows": [_SAMPLE_VALUES(s) for s in samples]}


def samples_from_columns(stored: Any) -> tuple[Sample, ...]:
    """The samples ``samples_to_columns`` stored, or those of an older store (a list of dicts)."""
    if isinstance(stored, dict):
        names = stored["columns"]
        if names == list(SAMPLE_FIELDS):
            return tuple(Sample(*row) for row in stored["rows"])
        return tuple(Sample(**dict(zip(names, row, strict=True))) for row in stored["rows"])
    return tuple(Sample(**s) for s in stored)


@dataclass
class IterationLog:
    """The iteration lines one log format found, keyed by printed iteration.

    ``last`` is the denominator of ``iteration i/N`` (the final iteration's
    number in that format). A repeated iteration keeps its last occurrence
    (a restarted run appends to its log) and is counted in ``duplicates``.
    """

    format: str
    samples: dict[int, Sample] = field(default_factory=dict)
    last: int | None = None
    duplicates: int = 0
    nan_grad_norm: list[int] = field(default_factory=list)
    dropped: int = 0  # samples not kept because the log had implausibly many


@dataclass(frozen=True)
class CheckpointTimings:
    save_s: float | None = None
    load_s: float | None = None
    save_iteration: int | None = None


@dataclass(frozen=True)
class Collective:
    """One NCCL collective type over the traced steps."""

    name: str
    calls: int
    elements: int
    bytes: int
    communicator_sizes: dict[int, int]  # nranks -> calls
    unknown_datatypes: int = 0  # calls whose datatype code llmb does not know (no bytes counted)


@dataclass(frozen=True)
class NcclTransport:
    """How the run's NCCL communicators connected, from ``NCCL_DEBUG=INFO``'s
    set-up lines: ``Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA``,
    ``Using network IB``, ``NET/Plugin: Loaded net plugin ...``."""

    # transport (NET/IB, NET/Socket, P2P/IPC, SHM, COLLNET/...) -> connections logged
    channels: dict[str, int]
    networks: tuple[str, ...] = ()  # "Using network X": IB, Socket, or a net plugin's name
    plugins: tuple[str, ...] = ()  # net plugins NCCL loaded
    hosts: int = 0  # distinct hosts that wrote NCCL INFO lines

    def over_sockets(self, nodes: int | None = None) -> bool:
        """Whether ranks on different nodes talked over TCP sockets: a channel via NET/Socket, or
        Socket the only network on a run of more than one node (``nodes``, or the hosts NCCL named)."""
        multi_node = self.hosts > 1 or (nodes or 1) > 1
        return "NET/Socket" in self.channels or (multi_node and self.networks == ("Socket",))


@dataclass(frozen=True)
class Statement:
    """Something the log states of the run it is (``llmb.results.formats.statements``): ``field`` is one
    of ``STATED_FIELDS``, ``value`` what the log prints (a whole number, or a dtype's name), ``line`` the
    words of the first line that states it (to quote where it disagrees with the run's records)."""

    field: str
    value: int | str
    line: str


# What a log may state of its run: the fields that change the work it measured (or its layout).
STATED_FIELDS = ("gpus", "gbs", "mbs", "seq_len", "dtype", "layers", "tp", "pp", "cp", "ep")


@dataclass(frozen=True)
class Failure:
    """Why a run failed, from its log: a kind, the error text that says so, and
    where it starts: the byte offset in the text the failures parser read, which
    is the log less the NCCL collective-trace lines the ``nccl`` parser took out
    (so it orders failures in log order; in a log without such a trace it is
    the file offset). ``analyze`` names the reason (its docstring says how)."""

    kind: str  # one of FAILURE_KINDS
    message: str
    hint: str | None = None
    offset: int | None = None


# The failure kinds are the recipes' (their failure hints name them), causes first. The last three are
# symptoms: what a launcher or Slurm says once something else failed (analyze never names one while the
# log holds a cause).
SYMPTOMS = ("task_exit", "child_failed", "signal")
# What a launcher says of the worker that failed first, when that worker said nothing itself (torchrun's
# "failed (exitcode: -6) local_rank: 6" and its "Root Cause (first observed failure)" block: the rank, its
# exit code or signal): a reason over every symptom (the SIGTERMs torchrun then sends the other workers),
# never over a cause a worker or Slurm named.
LAUNCHER_CAUSES = ("worker_failed",)


@dataclass(frozen=True)
class RunContext:
    """What is known about the run besides its log: from the recipe llmb
    saved beside it, else from the experiment's name, else nothing."""

    experiment: str
    source: str  # "recipe" | "name" | "none"
    workload: str | None = None
    variant: str | None = None
    size: str | None = None
    gpu: str | None = None
    dtype: str | None = None
    gpus: int | None = None
    # a name that counts nodes (``..._64nodes_...``); gpus follows from the GPU type
    nodes: int | None = None
    gbs: int | None = None
    seq_len: int | None = None
    layers: int | None = None  # fewer than the model's for a proxy run
    scaling: str = "weak"
    proxy: bool = False
    job_id: str | None = None
    job_state: str | None = None  # the llmb job's end state (CANCELLED, ...), when llmb ran it
    # where an llmb engine run computed: cpu | cuda (None: a cluster's GPUs)
    device: str | None = None
    # of the model that ran (proxies differ from the full size)
    flops_per_sample: float | None = None
    # Where ``gpu`` came from (GPU_SOURCES): what the run recorded, or what this command assumed for it.
    gpu_source: str | None = None
    # the NeMo container release the run used (``26.04.01``), when recorded
    container: str | None = None
    # A run tuned with --set: the settings that differ from the official configuration (``tp 4 -> 8, mbs
    # 1 -> 2``), from its recipe.json; its published figure is the official configuration's.
    tuned: str | None = None
    # The parallel layout and micro batch its records give (tp, pp, cp, ep, mbs): recipe.json's, else its
    # name's; a part neither gives is left out.
    layout: dict[str, int | None] | None = None
    # Why its identity is in doubt (``llmb.results.identity``): a record field that holds no possible value,
    # or two sources (its log, records, name) that state different values. Any doubt withholds every verdict.
    doubts: tuple[str, ...] = ()


# Where a run's GPU type can come from, strongest first: the run's own records, then what a command assumes.
GPU_SOURCES = ("recipe", "provenance", "--gpu", "cluster file")
ASSUMED_GPU_SOURCES = ("--gpu", "cluster file")

# Where a run's TFLOP/s/GPU came from (``WindowStats.tflops_source``), in the words a summary shows beside
# the figure: the framework's own log lines, or llmb's GBS * model FLOPs / step time / GPUs where the log
# has none or its figure is invalid (Nemotron-H).
TFLOPS_SOURCES = {"log": "from the log", "computed": "from model FLOPs"}


def tflops_source_words(source: str | None) -> str:
    """``(from the log)``'s words for a ``tflops_source``; ``-`` when there is none."""
    return TFLOPS_SOURCES.get(source, source) if source else "-"


@dataclass(frozen=True)
class WindowStats:
    first: int
    last: int
    count: int
    time_mean_ms: float | None
    time_std_ms: float | None
    tflops_mean: float | None
    tflops_std: float | None
    tflops_source: str | None  # "log" | "computed" | None
    # ``count`` is the number of step times the time figures were computed from; this, of TFLOP/s values
    tflops_count: int = 0


@dataclass(frozen=True)
class RunResult:
    """A parsed run: status, statistics over the window, derived metrics."""

    log: str | None
    context: RunContext
    status: str
    reason: str | None
    format: str | None
    window: tuple[int, int]
    stats: WindowStats | None
    max_iteration: int | None
    last_iteration: int | None
    samples: tuple[Sample, ...] = ()
    tokens_per_s: float | None = None
    mfu_pct: float | None = None  # against the dense peak of the run's dtype
    mfu_bf16_pct: float | None = None  # against the BF16 dense peak (mfu_pct for a BF16 run)
    days_1t: float | None = None
    checkpoint: CheckpointTimings = CheckpointTimings()
    failure: Failure | None = None
    nccl: tuple[Collective, ...] = ()
    nccl_transport: NcclTransport | None = None
    reference_step_time_ms: float | None = None
    reference_tokens_per_s: float | None = None
    reference_mfu_pct: float | None = None
    reference_mfu_bf16_pct: float | None = None
    reference_delta_pct: float | None = None
    reference_source: str | None = None
    # the published figure the run is judged against (``llmb.recipes.references.Figure`` as a dict: its
    # source, label, document, GPU count and batch), as the one reference policy chose it; None: none
    reference: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()
    bytes_read: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    analysis: int = ANALYSIS  # what computed it; a stored result of another is computed again

    def to_dict(self) -> dict[str, Any]:
        """The result as stored: plain data, its samples as columns (``samples_to_columns``)."""
        data = {f.name: plain(getattr(self, f.name)) for f in fields(self) if f.name != "samples"}
        data["samples"] = samples_to_columns(self.samples)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, samples: bool = True) -> RunResult:
        """The result ``to_dict`` gave (or an older llmb's, its samples a list of dicts); without
        ``samples`` its iterations are left out: a listing of many runs needs only their figures."""
        values = dict(data)
        stored_samples = values.pop("samples", ())
        values.setdefault("analysis", 1)  # stored before the analysis was versioned
        context = dict(values["context"])
        context["doubts"] = tuple(context.get("doubts") or ())
        values["context"] = RunContext(**context)
        values["window"] = tuple(values["window"])
        values["stats"] = WindowStats(**values["stats"]) if values.get("stats") else None
        if samples:
            values["samples"] = samples_from_columns(stored_samples)
        values["checkpoint"] = CheckpointTimings(**values.get("checkpoint") or {})
        values["failure"] = Failure(**values["failure"]) if values.get("failure") else None
        values["nccl"] = tuple(
            Collective(
                **{
                    **c,
                    "communicator_sizes": {int(k): v for k, v in c["communicator_sizes"].items()},
                }
            )
            for c in values.get("nccl", ())
        )
        if values.get("nccl_transport"):
            transport = values["nccl_transport"]
            values["nccl_transport"] = NcclTransport(
                channels=dict(transport["channels"]),
                networks=tuple(transport.get("networks", ())),
                plugins=tuple(transport.get("plugins", ())),
                hosts=transport.get("hosts", 0),
            )
        values["notes"] = tuple(values.get("notes", ()))
        known = _field_names(cls)
        return cls(**{k: v for k, v in values.items() if k in known})


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    """A dataclass's field names, looked up once: ``from_dict`` runs for every stored run listed."""
    return frozenset(f.name for f in fields(cls))
