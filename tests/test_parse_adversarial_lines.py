"""Every log reader's work is linear in the length of a line, whatever the
line holds (issue 32): a line of the wrong shape (a long word after
torchtitan's ``step:``, many digits in a Megatron iteration line, spaces
inside NCCL's ``Using network`` line, `` via NET/x`` repeated) must cost
about what an ordinary line of the same length costs, never the square of
its length.

The readers are every ``LogParser`` the plugin host has registered (the
core's and any plugin's), so a new reader is attacked without this file
changing. The attacks on a reader are made from what it reads:

* bases: the lines of the real logs (``tests/real_logs``), of ``loggen`` and a
  few samples that change what the reader finds (with the lines before them
  in their log, so that a traceback's exception line is read as one), and an
  example of every regular expression its code uses (from the expression
  itself: ``example``);
* at up to ``CUTS`` separator positions of each base, the filler a naive
  pattern backtracks over (digits, spaces, a long word), with and without the
  rest of the base after it, and the base's head up to that position
  repeated (before its tail, and after it).

Each attack's CPU time is compared with the same reader's on a plain line
of the same length (the base with prose in place of the filler): a ratio,
never a wall-clock bound. Every combination is screened on lines of
``SCREEN`` bytes, where a quadratic reader is already hundreds of times over;
the worst attacks of each reader are then run at the scanner's limit, lines
of 1 MiB. A run that passes the ratio is cut short (a timer), so a
quadratic reader fails in seconds instead of hanging.
"""

from __future__ import annotations

import re
import signal
import sys
import time
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402
from llmb.plugins.host import PluginHost  # noqa: E402
from llmb.results.scan import MAX_LINE, as_chunk, scan  # noqa: E402

try:  # Python 3.11+
    import re._constants as _sre
    import re._parser as _sre_parse
except ImportError:  # Python 3.10
    import sre_constants as _sre  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

RATIO = 20  # an attack may cost this many times the plain line of its length
FULL = MAX_LINE - 1  # the longest line the scanner hands to the readers (with its newline)
SCREEN = 64 << 10
CUTS = 24  # separator positions of a base attacked (evenly chosen where it has more)
BASES = 8  # real lines per reader, of distinct shapes
WORST = 6  # attacks per reader run again at FULL
WALL = 4  # a busy machine's wall time over CPU time, at most (see ``cost``)
MIN_WAIT = 0.05  # seconds
ENOUGH = 8  # attacks over the ratio that condemn a reader (the rest are not made)
TRIES = 4  # an attack over the ratio is measured again (the machine may be busy), this often
PROSE = b"the quick brown fox jumps over the lazy dog "
SEPARATORS = b" |:/,=([]"
REAL_LOGS = Path(__file__).resolve().parent / "real_logs"
CONTEXT = 6  # lines before a real line fed with it

# Formats the real logs lack: NCCL's set-up lines (docs/results.md, the nccl_transport row).
SAMPLES = (
    "node1:2211:2211 [0] NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA Plugin v8 (v8)",
    "node1:2211:2211 [0] NCCL INFO Using network IBext_v8",
    "node1:2211:2290 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IBext_v8/0/GDRDMA",
    "node1:4410:4472 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
    "node1:4410:4472 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct",
    "node1:4410:4472 [0] NCCL INFO CollNet 00/0 : 0 [send] via COLLNET/SHARP/0",
)


READERS = PluginHost().log_parsers()


# ------------------------------------------------------------------------------- what a reader reads


def example(pattern: re.Pattern) -> bytes:
    """A short text the bytes ``pattern`` matches (lookarounds and anchors left
    out): each repeat once, each alternation's first branch, a class's first
    member among a few ordinary characters."""

    def member(items) -> bytes:
        negate = any(op is _sre.NEGATE for op, _ in items)
        for c in [*b"a1 .", *range(33, 127)]:
            if _in(items, c) != negate:
                return bytes([c])
        return b"a"

    def text(items) -> bytes:
        out = b""
        for op, av in items:
            if op is _sre.LITERAL:
                out += bytes([av])
            elif op is _sre.NOT_LITERAL or op is _sre.ANY:
                out += b"b" if av == ord("a") else b"a"
            elif op is _sre.IN:
                out += member(av)
            elif op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, getattr(_sre, "POSSESSIVE_REPEAT", None)):
                low, high, sub = av
                out += text(sub) * max(low, 1 if high else 0)
            elif op is _sre.SUBPATTERN:
                out += text(av[-1])
            elif op is _sre.BRANCH:
                out += text(av[1][0])
            elif op is getattr(_sre, "ATOMIC_GROUP", None):
                out += text(av)
        return out

    return text(_sre_parse.parse(pattern.pattern, pattern.flags))


def _in(items, c: int) -> bool:
    ch = chr(c)
    word = ch.isalnum() or ch == "_"
    categories = {
        _sre.CATEGORY_DIGIT: ch.isdigit(),
        _sre.CATEGORY_NOT_DIGIT: not ch.isdigit(),
        _sre.CATEGORY_SPACE: ch.isspace(),
        _sre.CATEGORY_NOT_SPACE: not ch.isspace(),
        _sre.CATEGORY_WORD: word,
        _sre.CATEGORY_NOT_WORD: not word,
    }
    for op, av in items:
        if op is _sre.LITERAL and av == c:
            return True
        if op is _sre.RANGE and av[0] <= c <= av[1]:
            return True
        if op is _sre.CATEGORY and categories.get(av, False):
            return True
    return False


def _code_of(thing) -> list[tuple[types.CodeType, dict]]:
    """(code, the globals it runs with) of a function, or of every method of a class."""
    if isinstance(thing, type):
        return [c for member in vars(thing).values() for c in _code_of(member)]
    if isinstance(thing, (staticmethod, classmethod)):
        return _code_of(thing.__func__)
    if isinstance(thing, property):
        return [c for f in (thing.fget, thing.fset) if f for c in _code_of(f)]
    code = getattr(thing, "__code__", None)
    names = getattr(thing, "__globals__", {})
    return [(code, names)] if isinstance(code, types.CodeType) else []


def _ours(value) -> bool:
    """A function or class of llmb's log reading (the readers' modules and the prefix stage they share)."""
    return str(getattr(value, "__module__", "")).startswith("llmb.results.")


def patterns_of(start) -> list[re.Pattern]:
    """The bytes regular expressions the reader's code uses: named in the code of its class (or
    function) and of the functions and classes of llmb's results package that code names (the prefix
    stage's among them), transitively."""
    found: dict[int, re.Pattern] = {}
    seen: set[int] = set()
    todo = _code_of(start)
    while todo:
        code, names = todo.pop()
        if id(code) in seen:
            continue
        seen.add(id(code))
        todo += [(c, names) for c in code.co_consts if isinstance(c, types.CodeType)]
        for name in code.co_names:
            value = names.get(name)
            if isinstance(value, re.Pattern) and isinstance(value.pattern, bytes):
                found.setdefault(id(value), value)
            elif _ours(value):
                todo += _code_of(value)
    return list(found.values())


def corpus() -> list[tuple[bytes, bytes]]:
    """(the lines before, a line) of every real log, ``loggen``'s lines and ``SAMPLES``."""
    pairs = []
    for path in sorted(REAL_LOGS.rglob("*")):
        if path.is_file() and path.suffix in (".log", ".out", ".txt"):
            lines = path.read_bytes().splitlines()
            for i, line in enumerate(lines):
                if line.strip():
                    pairs.append(
                        (b"".join(x + b"\n" for x in lines[max(0, i - CONTEXT) : i]), line)
                    )
    made = [
        *loggen.megatron_bridge_lines(range(1, 3)),
        *loggen.nemo2_lines(range(0, 2)),
        *loggen.nccl_lines(2),
        loggen.CHECKPOINT_MEGATRON,
        loggen.CHECKPOINT_NEMO_SAVE,
        loggen.CHECKPOINT_NEMO_LOAD,
        loggen.WATCHDOG,
        loggen.OOM,
        loggen.NODE_FAILURE,
        *SAMPLES,
    ]
    traceback = "".join(line + "\n" for line in loggen.TRACEBACK[:-1]).encode()
    pairs += [(b"", line.encode()) for line in made]
    pairs.append((traceback, loggen.TRACEBACK[-1].encode()))
    return pairs


def findings(parser, text: bytes):
    reader = parser.start()
    if text:
        reader.feed(as_chunk(text))
    return reader.finish()


def bases(parser) -> list[tuple[bytes, bytes]]:
    """(context, line) pairs the reader reads: real lines (of distinct shapes)
    whose findings differ from those of their context alone, and an example of
    each of its patterns."""
    chosen: dict[bytes, tuple[bytes, bytes]] = {}
    for context, line in corpus():
        if len(chosen) >= BASES:
            break
        shape = re.sub(rb"\d+", b"0", line)[:40]
        if shape in chosen:
            continue
        try:
            if findings(parser, context + line + b"\n") != findings(parser, context):
                chosen[shape] = (context, line)
        except Exception:  # noqa: BLE001, S112 - a reader that raises on a line is not this test's concern
            continue
    examples = [(b"", example(p)) for p in patterns_of(parser.start)]
    return list(chosen.values()) + [e for e in examples if e[1]]


def cuts(line: bytes) -> list[int]:
    positions = sorted({0, len(line)} | {i + 1 for i, c in enumerate(line) if c in SEPARATORS})
    if len(positions) > CUTS:
        step = len(positions) / CUTS
        positions = sorted({positions[int(i * step)] for i in range(CUTS)} | {len(line)})
    return positions


def _fill(pattern: bytes, size: int) -> bytes:
    return (pattern * (size // max(1, len(pattern)) + 1))[:size] if size > 0 else b""


def attacks(line: bytes, size: int):
    """(name, attack, plain) lines of ``size`` bytes made from ``line``."""
    for cut in cuts(line):
        head, tail = line[:cut], line[cut:]
        room = size - len(line)
        if room <= 0:
            continue
        plain = head + _fill(PROSE, room) + tail
        for label, filler in (("digits", b"1"), ("spaces", b" "), ("a word", b"a")):
            yield f"{label} at {cut}", head + _fill(filler, room) + tail, plain
            yield f"{label} at {cut}, no tail", head + _fill(filler, room + len(tail)), plain
        if head:
            repeated = _fill(head, size - len(tail))
            yield f"head to {cut} repeated", repeated + tail, plain
            yield f"tail, then head to {cut} repeated", tail + repeated, plain


# ------------------------------------------------------------------------------- timing


def _copy(chunk: bytes) -> float:
    start = time.thread_time()
    chunk[1:]  # noqa: B018 - the copy is what is timed
    return time.thread_time() - start


class _OverTime(BaseException):  # not an Exception: the scanner would take it for a reader's error
    pass


_ARMED = [False]


def _alarm(signum, frame):
    if _ARMED[0]:
        raise _OverTime


def cost(parser, chunk: bytes, limit: float | None = None) -> float:
    """CPU seconds (this thread's) to read ``chunk``: start, feed, finish (see ``timed``)."""

    def read() -> None:
        reader = parser.start()
        reader.feed(chunk)
        reader.finish()

    return timed(read, limit)


def timed(work, limit: float | None = None) -> float:
    """CPU seconds (this thread's) that ``work()`` takes. With ``limit``, it is
    cut short once ``WALL`` times that (at least ``MIN_WAIT``) has passed on
    the clock, and ``limit`` is returned: the timer only keeps a quadratic
    reader from running for hours, the CPU time decides. (A clock timer: a
    process CPU timer would make the kernel sample ``time.process_time`` by
    ticks for good.)"""
    previous = signal.signal(signal.SIGALRM, _alarm) if limit else None
    start = time.thread_time()
    try:
        if limit:
            _ARMED[0] = True
            signal.setitimer(signal.ITIMER_REAL, max(MIN_WAIT, limit * WALL))
        work()
        _ARMED[0] = False
    except _OverTime:
        return max(limit, time.thread_time() - start)
    except Exception:  # noqa: BLE001, S110 - the scan switches such a reader off (and says so): its cost counts
        pass
    finally:
        _ARMED[0] = False
        if limit:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    return time.thread_time() - start


class Reference:
    """The cost an attack is compared with: the largest of the plain line's,
    that of the base's own line repeated as a log of the same length (a line of
    repeated fragments may hold as many findings as such a log, and cost as
    much) and that of one copy of the line, plus what reading the base line
    alone costs (the reader's fixed cost: calls, a message made). Without the
    last two, a reader that rejects the plain line at once would be held to
    microseconds, where a ratio measures only noise. The log and the line
    alone are measured once per base, and again when an attack is."""

    def __init__(self, parser, context: bytes, line: bytes, size: int):
        self.parser = parser
        self.honest = as_chunk(context + (line + b"\n") * max(1, size // (len(line) + 1)))
        self.alone = as_chunk(context + line + b"\n")
        self.honest_cost, self.alone_cost = self.measure()

    def measure(self) -> tuple[float, float]:
        return (
            min(cost(self.parser, self.honest) for _ in range(2)),
            min(cost(self.parser, self.alone) for _ in range(3)),
        )

    def again(self) -> None:
        honest, alone = self.measure()
        self.honest_cost, self.alone_cost = (
            min(honest, self.honest_cost),
            min(alone, self.alone_cost),
        )


def ratio(parser, context: bytes, attack: bytes, plain: bytes, reference: Reference) -> float:
    """The attack's cost over the reference's (see ``Reference``), the best of
    ``TRIES``: a ratio above ``RATIO`` is measured again, the run cut short
    just past it."""
    attack = as_chunk(context + attack + b"\n")
    plain = as_chunk(context + plain + b"\n")
    best = float("inf")
    for attempt in range(TRIES):
        if attempt:
            reference.again()
        base = reference.alone_cost + max(
            min(cost(parser, plain) for _ in range(3)),
            reference.honest_cost,
            min(_copy(attack) for _ in range(3)),
        )
        best = min(best, cost(parser, attack, limit=base * RATIO * 1.5) / base)
        if best <= RATIO:
            break
    return best


def screen(parser, size: int = SCREEN) -> list[tuple[float, str, bytes, bytes, str]]:
    """(ratio, what, context, line, attack's name) of every attack on ``parser``,
    worst first; once ``ENOUGH`` attacks are over the ratio, no more are made."""
    out = []
    for context, line in bases(parser):
        reference = Reference(parser, context, line, size)
        for what, attack, plain in attacks(line, size):
            r = ratio(parser, context, attack, plain, reference)
            out.append((r, f"{line[:60]!r}: {what}", context, line, what))
            if sum(r > RATIO for r, *_ in out) >= ENOUGH:
                return sorted(out, key=lambda item: -item[0])
    return sorted(out, key=lambda item: -item[0])


def full_size(line: bytes, what: str) -> tuple[bytes, bytes]:
    """The attack ``what`` on ``line`` at ``FULL`` bytes."""
    for name, attack, plain in attacks(line, FULL):
        if name == what:
            return attack, plain
    raise AssertionError(what)


# ------------------------------------------------------------------------------- tests


def test_every_registered_reader_is_attacked():
    names = [parser.name for parser in READERS]
    core = {"nccl", "nccl_transport", "megatron_bridge", "step_time_lines", "nemo2", "torchtitan"}
    assert core | {"statements", "checkpoint", "training_done", "failures"} <= set(names)
    for parser in READERS:  # something to attack each with: a line it reads, or a pattern it uses
        assert bases(parser), parser.name


def test_the_examples_match_their_patterns():
    import importlib
    import pkgutil

    from llmb.results import formats, lines

    modules = [lines] + [
        importlib.import_module(f"{formats.__name__}.{m.name}")
        for m in pkgutil.iter_modules(formats.__path__)
    ]
    patterns = [p for module in modules for p in vars(module).values() if isinstance(p, re.Pattern)]
    assert len(patterns) > 20
    for pattern in patterns:
        text = example(pattern)
        assert not text or pattern.search(text), pattern.pattern


@pytest.mark.parametrize("parser", READERS, ids=lambda parser: parser.name)
def test_a_reader_costs_about_the_same_on_any_line_of_a_length(parser):
    screened = screen(parser)
    over = [f"{r:,.0f}x {what}" for r, what, *_ in screened if r > RATIO]
    assert not over, f"{parser.name}: {len(over)} attacks over {RATIO}x: " + "; ".join(over[:8])
    worst = []
    for _, what, context, line, name in screened[:WORST]:
        attack, plain = full_size(line, name)
        assert len(attack) == len(plain) == FULL
        reference = Reference(parser, context, line, FULL)
        worst.append((ratio(parser, context, attack, plain, reference), what))
    over = [f"{r:,.0f}x {what}" for r, what in worst if r > RATIO]
    assert not over, f"{parser.name}, 1 MiB lines: " + "; ".join(over)


def test_the_scanner_reads_an_attack_of_1_mib_as_fast_as_a_plain_line(tmp_path):
    """The whole scan (every reader, in turn) on the readers' worst shapes."""
    lines = [
        b"[titan] 2025-04-03 16:32:20,143 - root - INFO - step:  1  " + _fill(b"a", FULL - 80),
        b" iteration 1/ 50 | elapsed time per iteration (ms): 1.0 | " + _fill(b"1", FULL - 80),
        b"n:1:2 [0] NCCL INFO Using network IB" + _fill(b" ", FULL - 80) + b"x",
        _fill(b"n:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/x", FULL),
    ]
    plain = tmp_path / "plain.log"
    plain.write_bytes(b"".join(_fill(PROSE, FULL) + b"\n" for _ in lines))
    attack = tmp_path / "attack.log"
    attack.write_bytes(b"".join(line[:FULL] + b"\n" for line in lines))

    def read(path):
        report = scan(str(path), READERS)
        assert report.long_lines == 0 and not report.errors, report

    reference = min(timed(lambda: read(plain)) for _ in range(3))
    best = min(timed(lambda: read(attack), RATIO * reference) for _ in range(2))
    assert best < RATIO * reference, f"{best / reference:,.0f}x"


if __name__ == "__main__":
    # every reader's worst attacks: python tests/test_parse_adversarial_lines.py [SIZE [NAME ...]]
    size = int(sys.argv[1]) if len(sys.argv) > 1 else SCREEN
    for parser in READERS:
        if len(sys.argv) > 2 and parser.name not in sys.argv[2:]:
            continue
        started = time.perf_counter()
        screened = screen(parser, size)
        print(
            f"{parser.name}: {len(screened)} attacks in {time.perf_counter() - started:.1f} s, "
            f"{sum(r > RATIO for r, *_ in screened)} over {RATIO}x"
        )
        for r, what, *_ in screened[:4]:
            print(f"  {r:10,.1f}x  {what}")


def test_a_number_too_long_for_int_switches_no_reader_off(tmp_path):
    """A 5,000-digit iteration, count or checkpoint iteration is no number of
    theirs (Python's int() refuses it): the line is not read, and the reader
    goes on with the rest of the log."""
    huge = "9" * 5000
    log = tmp_path / "log-x.out"
    lines = [
        f" iteration {huge}/ 50 | elapsed time per iteration (ms): 1.0 |",
        f"Training epoch 0, iteration {huge}/9 | train_step_timing in s: 1.0 |",
        f"n:1:2 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count {huge} datatype 7 "
        "op 0 root 0 comm 0x1 [nranks=8] stream 0x1",
        f"successfully saved checkpoint from iteration {huge} to /x",
        f"[titan] 2025-04-03 16:32:20,143 - root - INFO - step: {huge}  loss: 1.0",
        *loggen.megatron_bridge_lines(range(1, 3), last=2),
        *loggen.nccl_lines(2),
    ]
    log.write_text("\n".join(lines) + "\n")
    report = scan(str(log), READERS)
    assert not report.errors
    assert sorted(report.findings["megatron_bridge"].samples) == [1, 2]
    assert sum(c.calls for c in report.findings["nccl"]) == 2
