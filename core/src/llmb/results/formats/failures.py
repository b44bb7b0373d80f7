"""The lines that say why a run stopped, and where each is in the log (so that the first real error can
be told from what followed it); and Megatron's ``[after training is done]`` line.

Every line is taken through the prefix stage (``llmb.results.lines.split``): a message is quoted without
its rank prefixes, and a traceback is followed on its own writer's lines (``Line.key``), whatever other
ranks print between them.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable

from llmb.results.lines import MAX_MESSAGE, Line, line_at, lines_from, split
from llmb.results.records import SYMPTOMS, Failure

# The words of each failure kind (records.FAILURE_KINDS). Real wording: PyTorch's "torch.OutOfMemoryError:
# CUDA out of memory."; NCCL's "NCCL WARN Cuda failure 'out of memory'" (newer NCCL: "Cuda failure 2 'out of
# memory'"); Megatron-Core's NaN checks (megatron/core/rerun_state_machine.py: "Unexpected result nan ...
# (message='found NaN in local grad norm ...')"); Slurm's "*** JOB 123 ON node CANCELLED AT ... DUE TO TIME
# LIMIT ***" and "srun: error: node: task 3: Exited with exit code 1"; torchrun's "closing signal SIGTERM".
# A Slurm cancel that names no cause ("*** JOB 123 ON node CANCELLED AT 2025-03-01T10:00:00 ***", the same
# for "*** STEP 123.0 ON ..."): scancel, by a user, an administrator or a tool.
_OOM = (
    b"CUDA out of memory",
    b"CUDA error: out of memory",
    b"Cuda failure 'out of memory'",
    b"Cuda failure 2 'out of memory'",
)
_NAN = (
    b"Unexpected result nan",
    b"Unexpected result inf",
    b"Unexpected result tensor(nan",
    b"Unexpected result tensor(inf",
    b"found NaN in",
    b"found Inf in",
)
_WATCHDOG = (b"Watchdog caught collective operation timeout",)
# A worker's own account of a CUDA fault: "CUDA error: an illegal memory access was encountered" (a
# RuntimeError, or c10::Error's "what():" as the process aborts), "unspecified launch failure",
# "uncorrectable ECC error encountered"; out of memory is cuda_oom.
_CUDA_ERROR = (b"CUDA error: ",)
# torchrun's agent itself received a signal (torch/distributed/elastic/agent/server/api.py: "Received 15
# death signal, shutting down workers"; multiprocessing/api.py's SignalException: "Process 4042 got
# signal: 15"): the job was ended from outside (scancel, a time limit, a node drain, the OOM killer).
_KILLED = (b"death signal, shutting down workers", b"got signal: ")
_SIGNAL_NUMBER = re.compile(rb"(?:Received (\d{1,3}) death signal|got signal: (\d{1,3}))")
# kind -> (literals one of which every such line holds, the literals that mark the line). Each literal is a
# pass over every chunk: kinds share them (found once per chunk), the rarest words stand for the rest.
_FAILURE_NEEDLES = {
    "cuda_oom": ((b"out of memory",), _OOM),
    "cuda_error": (_CUDA_ERROR, _CUDA_ERROR),
    "killed": ((b"death signal", b"got signal: "), _KILLED),
    "nccl_timeout": ((b"Watchdog caught",), _WATCHDOG),
    "nan_loss_or_grad": ((b"Unexpected result",), _NAN[:4]),
    "node_failure": (
        (b"CANCELLED AT", b"srun: error:"),
        (b"DUE TO NODE FAILURE", b"Node failure on"),
    ),
    "time_limit": ((b"CANCELLED AT",), (b"DUE TO TIME LIMIT",)),
    "preempted": ((b"CANCELLED AT",), (b"DUE TO PREEMPTION",)),
    "cancelled": ((b"CANCELLED AT",), (b"CANCELLED AT",)),
    "task_exit": ((b"srun: error:",), (b": Exited with exit code", b": Terminated")),
    # torch.distributed.elastic's agent: "failed (exitcode: -6) local_rank: 6 (pid: 1234) of binary: ..."
    "worker_failed": ((b"failed (exitcode: ",), (b"failed (exitcode: ",)),
}
_SLURM_CANCEL = re.compile(rb"\*\*\* (?:JOB|STEP) \S{1,64} ON \S{1,256} CANCELLED AT \S{1,64}")
_SLURM_CAUSES = (b"DUE TO TIME LIMIT", b"DUE TO PREEMPTION", b"DUE TO NODE FAILURE")
_WORKER_FAILED = re.compile(rb"failed \(exitcode: (-?\d{1,9})\) local_rank: \d{1,9}")
# A kind's line must also pass this test (the others: their words are enough).
_ACCEPT = {
    "cancelled": lambda line: (
        _SLURM_CANCEL.search(line) is not None and not any(c in line for c in _SLURM_CAUSES)
    ),
    "worker_failed": lambda line: _WORKER_FAILED.search(line) is not None,
    "cuda_error": lambda line: not any(words in line for words in _OOM),
}
# torch/distributed/elastic/multiprocessing/errors: ChildFailedError's report ends with the failure it
# observed first, "Root Cause (first observed failure):" then "[0]:" and "  key : value" lines (time, host,
# rank, exitcode, error_file, traceback: "Signal 6 (SIGABRT) received by PID 1234" for a signalled worker).
_ROOT_CAUSE = b"Root Cause (first observed failure):"
_ROOT_FIELD = re.compile(rb"(time|host|rank|exitcode|error_file|traceback)\s{0,32}:\s?(.{0,400})")
_ROOT_LINES = 12  # lines of a root-cause block read at most
# Read in the log's last TAIL bytes only, where they are: the last words of a launcher, and llmb's own
# note on an attempt that Slurm ended (a retry's log names its predecessor's end differently).
TAIL = 1 << 20
_TAIL_NEEDLES = {
    "node_failure": (b"ended: NODE_FAIL",),
    "preempted": (b"ended: PREEMPTED",),
    "signal": (b"SIGTERM", b"Killing subprocess"),
}
# An exception's kind, by its words (first match); any other exception is a python_exception.
_EXCEPTION_KINDS = (
    ("cuda_oom", (*_OOM, b"OutOfMemoryError")),
    ("cuda_error", _CUDA_ERROR),
    ("nan_loss_or_grad", _NAN),
    ("nccl_timeout", _WATCHDOG),
    ("child_failed", (b"ChildFailedError",)),  # torchrun's summary of a worker that failed
    ("killed", (b"SignalException", b"got signal: ")),  # torchrun itself, signalled from outside
)
_TRACEBACK = b"Traceback (most recent call last):"
# A logger's record, which a rank may print between the lines of its own traceback (torchtitan's
# "[titan] 2026-05-19 14:50:13,750 - root - INFO - ..."; a timestamped or glog-style "W0519 14:50:14.958000"
# line): never an exception's line, so it does not end the traceback.
_LOG_RECORD = re.compile(
    rb"(?:\[titan\] |\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d|[IWEF]\d{4} \d\d:\d\d:\d\d)"
)
_EXCEPTION = re.compile(rb"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure|Warning)\b")
# tqdm's bar, "Training:  12%|█▏   | 6/50 [00:30<03:40, 1.23it/s]", and what ranks put before a line.
_BAR = re.compile(rb"\d{1,3}%\|[^|\n]{0,2048}\|[^|\[\n]{0,256}\[[^\]\n]{0,256}\]")
_BAR_SPAN = 8192  # a bar is looked for in this much text before the error, however long the line
# bytes of a line's error text cleaned at most: room for the message (MAX_MESSAGE characters, four bytes
# each at most) behind prefixes and colour codes
_CLEAN_SPAN = 64 << 10
# lines after an exception's that may carry its message on (torch's NCCL errors do)
_CONTINUATION = 4


def _clean(line: bytes, at: int | None = None) -> bytes:
    """The error text alone: the ``\\r``-separated segment of ``line`` that holds
    ``at`` (None: the last one with text; a progress bar redraws its line after a
    ``\\r``), less a progress bar before it and what the prefix stage takes off (colour codes, rank
    prefixes: ``[rank3]:``, ``0:``, ``job/3``)."""
    if at is None:
        segments = [s for s in line.split(b"\r") if s.strip()]
        text = segments[-1] if segments else b""
        low, high = 0, min(len(text), _BAR_SPAN)  # the bar leads the segment
    else:
        start = line.rfind(b"\r", 0, at) + 1
        end = line.find(b"\r", at)
        text = line[start : end if end >= 0 else len(line)]
        low, high = max(0, at - start - _BAR_SPAN), at - start
    bars = list(_BAR.finditer(text, low, high))
    if bars:
        text = text[bars[-1].end() :]
    # the message is the text's start (``_shown``): what lies beyond ``_CLEAN_SPAN`` is never shown, and
    # taking colour codes out of a megabyte of them would cost twenty times a plain line's reading
    return split(text[:_CLEAN_SPAN]).body


def _shown(text: bytes) -> str:
    """``text`` decoded and stripped, at most ``MAX_MESSAGE`` characters: only
    what can be shown is decoded (a line may be a megabyte)."""
    return text.lstrip()[: 4 * MAX_MESSAGE].decode("utf-8", "replace").strip()[:MAX_MESSAGE]


def _message(text: bytes, detail: bytes = b"") -> str:
    message = _shown(text)
    if detail:
        more = f" ({_shown(detail)})"
        return message[: max(0, MAX_MESSAGE - len(more))] + more
    return message


def _signal_name(exitcode: bytes) -> bytes:
    """The signal a worker's negative exit code stands for (torch's ``-6``: ``SIGABRT``), else b""."""
    try:
        return signal.Signals(-int(exitcode)).name.encode() if int(exitcode) < 0 else b""
    except ValueError:
        return b""


def _killed(text: bytes) -> str:
    """torchrun's words on the signal it received, with the signal's name (``got signal: 15 (SIGTERM)``)."""
    number = _SIGNAL_NUMBER.search(text)
    digits = number.group(1) or number.group(2) if number else None
    return _message(text, _signal_name(b"-" + digits) if digits else b"")


def _root_cause_message(fields: dict[bytes, bytes]) -> str:
    """One line of a root-cause block's fields: who failed and how, in torch's words."""
    rank, host = fields.get(b"rank"), fields.get(b"host")
    code, trace = fields.get(b"exitcode", b""), fields.get(b"traceback", b"")
    text = _ROOT_CAUSE + b" rank " + (rank or b"?")
    text += b" on " + host if host else b""
    text += b", exitcode " + code if code else b""
    if trace.startswith(b"Signal "):  # "Signal 6 (SIGABRT) received by PID 1234"
        return _message(text + b": " + trace)
    number = re.match(rb"-?\d{1,9}", code)
    return _message(text, _signal_name(number.group(0)) if number else b"")


def _kind_of(text: bytes) -> str:
    return next(
        (kind for kind, words in _EXCEPTION_KINDS if any(w in text for w in words)),
        "python_exception",
    )


def _writer(head: bytes) -> tuple[bytes, bytes]:
    """Who wrote a traceback (``Line.key``) and the blanks its lines start with after the prefixes
    (``[rank3]: Traceback``: one), from the text before ``Traceback`` on its first line (the segment a
    progress bar's redraw leaves)."""
    line = split(head[head.rfind(b"\r") + 1 :])
    lead = line.body if not line.body.strip(b" \t") else b""
    return line.key, lead


def _body(line: Line, lead: bytes) -> bytes:
    """A traceback line's text less the blanks its first line had."""
    return line.body[len(lead) :] if lead and line.body.startswith(lead) else line.body


def _first_line(
    chunk: bytes,
    marks: tuple[bytes, ...],
    words: tuple[bytes, ...],
    accept: Callable[[bytes], bool] | None = None,
) -> tuple[int, int] | None:
    """(line start, mark position) of the first line of ``chunk`` that holds one of
    ``marks`` and one of ``words`` (and passes ``accept``), or None."""
    first = None
    for mark in marks:
        position = chunk.find(mark)
        while position >= 0 and (first is None or position < first[1]):
            start, line = line_at(chunk, position)
            if any(word in line for word in words) and (accept is None or accept(line)):
                first = (start, position)
                break
            position = chunk.find(mark, start + len(line))
    return first


class FailureReader:
    """The lines that say why a run stopped, each kind's first in log order with
    its offset (``Failure``): CUDA out of memory (PyTorch's and NCCL's words),
    a NaN or Inf found by Megatron-Core's checks, an NCCL watchdog timeout, a
    node failure, a Slurm time limit, preemption or cancel (Slurm's words), the
    exception that ends a Python traceback (the first that is not a symptom:
    later ranks usually fail because the first did; an exception's kind follows
    its words, so ``torch.OutOfMemoryError`` is ``cuda_oom``), torchrun's
    account of the worker that failed first (``worker_failed``: its agent's
    ``failed (exitcode: -6) local_rank: 6`` line, in the words of the first
    ``Root Cause (first observed failure)`` block where there is one: rank,
    host, exit code, signal), and the symptoms that follow a failure (srun's
    task exits, torchrun's ``ChildFailedError`` and its signals: SIGTERM ones
    are looked for in the log's last ``TAIL`` bytes). ``analyze`` picks the
    reason among them."""

    def __init__(self) -> None:
        self.found: dict[str, tuple[int, str]] = {}  # kind -> (offset, message) of its first
        self.offset = 0  # of the chunk being read, in the text this parser reads
        self.cause = False  # a traceback ended in a cause: later tracebacks follow from it
        # (writer, offset) of a traceback that crossed a chunk end
        self.open: tuple[tuple[bytes, bytes], int] | None = None
        # the last chunks, holding the last TAIL bytes (joined once, at the end)
        self.tail: list[bytes] = []
        # torchrun's first root-cause block: (offset, fields) while its lines are read, then (offset, message)
        self.reading: tuple[int, dict[bytes, bytes], int] | None = None
        self.root_cause: tuple[int, str] | None = None

    def _record(self, kind: str, offset: int, message: str) -> None:
        if kind not in self.found or offset < self.found[kind][0]:
            self.found[kind] = (offset, message)

    def feed(self, chunk: bytes) -> None:
        self._needles(chunk)
        if self.reading is not None or (self.root_cause is None and _ROOT_CAUSE in chunk):
            self._root_causes(chunk)
        position = 0
        if self.open is not None:
            writer, at = self.open
            position = self._follow(chunk, 0, writer, at)
        while (
            not self.cause and self.open is None and (at := chunk.find(_TRACEBACK, position)) >= 0
        ):
            line_start = chunk.rfind(b"\n", 0, at) + 1
            line_end = chunk.find(b"\n", at)
            position = self._follow(
                chunk,
                len(chunk) if line_end < 0 else line_end + 1,
                _writer(chunk[line_start:at]),
                self.offset + line_start,
            )
        self.tail.append(chunk)
        while len(self.tail) > 1 and sum(map(len, self.tail[1:])) >= TAIL:
            del self.tail[0]
        self.offset += len(chunk)

    def _needles(self, chunk: bytes) -> None:
        present: dict[bytes, bool] = {}

        def has(literal: bytes) -> bool:
            if literal not in present:
                present[literal] = literal in chunk
            return present[literal]

        for kind, (cheap, marks) in _FAILURE_NEEDLES.items():
            if kind in self.found or not any(has(literal) for literal in cheap):
                continue
            if found := _first_line(chunk, marks, cheap, _ACCEPT.get(kind)):
                start, at = found
                line = line_at(chunk, at)[1]
                # worker_failed: from torch's words on (the logger's prefix says nothing)
                if kind == "worker_failed":
                    text = line[at - start :]
                    code = _WORKER_FAILED.search(text)
                    message = _message(text, _signal_name(code.group(1) if code else b""))
                elif kind == "killed":
                    message = _killed(_clean(line, at - start))
                else:
                    message = _message(_clean(line, at - start))
                self._record(kind, self.offset + start, message)

    def _root_causes(self, chunk: bytes) -> None:
        """The first root-cause block of torchrun's report, its fields read on however many chunks."""
        position = self._root_fields(chunk, 0) if self.reading is not None else 0
        if self.root_cause is None and self.reading is None:
            if (at := chunk.find(_ROOT_CAUSE, position)) >= 0:
                start = chunk.rfind(b"\n", 0, at) + 1
                end = chunk.find(b"\n", at)
                self.reading = (self.offset + start, {}, 0)
                if end >= 0:
                    self._root_fields(chunk, end + 1)

    def _root_fields(self, chunk: bytes, position: int) -> int:
        """Read a root-cause block's ``key : value`` lines from ``position``; the position after them."""
        offset, fields, seen = self.reading
        while position < len(chunk):
            end = chunk.find(b"\n", position)
            end = len(chunk) if end < 0 else end
            text = _clean(chunk[position:end]).strip()
            position, seen = end + 1, seen + 1
            if (m := _ROOT_FIELD.match(text)) is not None:
                fields[m.group(1)] = m.group(2).strip()
            elif not (text.startswith(b"[") and text.endswith(b"]:")):  # "[0]:" opens the entry
                seen = _ROOT_LINES  # "=====": the block's end
            if b"traceback" in fields or seen >= _ROOT_LINES:
                self.reading, self.root_cause = None, (offset, _root_cause_message(fields))
                return position
        self.reading = (offset, fields, seen)
        return position

    def _follow(self, chunk: bytes, position: int, writer: tuple[bytes, bytes], at: int) -> int:
        """Walk the traceback's lines (its writer's) to the exception; the position after where it
        stopped."""
        self.open = None
        while position < len(chunk):
            end = chunk.find(b"\n", position)
            end = len(chunk) if end < 0 else end
            line = split(chunk[position:end])
            position = end + 1
            if writer[0] and line.key != writer[0]:
                continue  # another rank's line, interleaved (a traceback without a prefix takes any)
            body = _body(line, writer[1])
            if not body.strip() or body[:1] in (b" ", b"\t") or body.startswith(_TRACEBACK):
                continue
            if body.startswith((b"During handling", b"The above exception")):
                continue
            if _LOG_RECORD.match(body):
                continue  # the same rank's logger, printing between the traceback's lines
            if _EXCEPTION.match(text := _clean(body)):
                self._exception(text, chunk, position, writer, at)
            return position  # the exception, or not a traceback after all
        self.open = (writer, at)
        return position

    def _exception(
        self, text: bytes, chunk: bytes, position: int, writer: tuple[bytes, bytes], at: int
    ) -> None:
        """Record the exception by its kind; a python_exception whose next lines
        name a kind (torch's NCCL errors end in "Last error: Cuda failure 'out of
        memory'") is of that kind, and quotes that line."""
        kind, detail = _kind_of(text), b""
        if kind == "python_exception":
            for raw in lines_from(chunk, position, _CONTINUATION):
                line = split(raw)
                if not line.body.strip() or (writer[0] and line.key != writer[0]):
                    break
                if (found := _kind_of(line.body)) != "python_exception":
                    kind, detail = found, _clean(_body(line, writer[1]))
                    break
        self._record(kind, at, _killed(text) if kind == "killed" else _message(text, detail))
        self.cause = kind not in SYMPTOMS

    def finish(self) -> list[Failure]:
        tail = b"".join(self.tail)[-TAIL:]
        start = self.offset - len(tail)
        for kind, marks in _TAIL_NEEDLES.items():
            if found := _first_line(tail, marks, marks):
                line_start, at = found
                self._record(
                    kind,
                    start + line_start,
                    _message(_clean(line_at(tail, at)[1], at - line_start)),
                )
        if self.reading is not None:  # a block cut off by the end of the log
            self.root_cause = (self.reading[0], _root_cause_message(self.reading[1]))
        if self.root_cause is not None:
            # torchrun's own account of the worker that failed first names more than its agent's
            # "failed (exitcode: ...)" line (the rank, the host, the signal): its words, the earlier place
            offset, message = self.root_cause
            if (line := self.found.get("worker_failed")) is not None:
                offset = min(offset, line[0])
            self.found["worker_failed"] = (offset, message)
        return [
            Failure(kind=kind, message=message, offset=offset)
            for kind, (offset, message) in sorted(self.found.items(), key=lambda item: item[1][0])
        ]


# Megatron-LM's and Megatron-Bridge's pretrain() print it on rank 0 once the training loop returned after its
# last iteration (an early exit, by signal, duration or interval, leaves by sys.exit before it).
_TRAINING_DONE = b"[after training is done] datetime: "


class TrainingDoneReader:
    """Where Megatron's ``[after training is done] datetime: 2025-12-03 14:45:03``
    is, in the text the failures parser reads (so ``analyze`` can tell a failure
    that came after training finished, a hang at exit until Slurm's time limit,
    from one that ended training), and its words: ``{"offset": ..., "line": ...}``
    or None. It must be registered just before that parser: both then read the
    same chunks, the NCCL trace lines taken out."""

    def __init__(self) -> None:
        self.offset = 0
        self.found: dict | None = None

    def feed(self, chunk: bytes) -> None:
        if self.found is None and _TRAINING_DONE in chunk:
            at = chunk.find(_TRAINING_DONE)
            start, line = line_at(chunk, at)
            self.found = {"offset": self.offset + start, "line": _message(_clean(line, at - start))}
        self.offset += len(chunk)

    def finish(self) -> dict | None:
        return self.found
