"""``llmb results``: parse runs' logs and show what they achieved."""

from __future__ import annotations

import functools
import os
import re
import sys
from datetime import datetime, timedelta, timezone

import click

from llmb.cli import get_host
from llmb.cli.output import render_table, terminal_safe
from llmb.errors import UsageError

_RELATIVE = re.compile(r"^(\d+)\s*([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_window(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*[:-]\s*(\d+)\s*", text)
    if not m or int(m.group(1)) > int(m.group(2)):
        raise UsageError(
            f"bad --window {text!r}: expected FIRST:LAST iterations, e.g. 35:44 (FIRST <= LAST)."
        )
    return int(m.group(1)), int(m.group(2))


def parse_since(text: str | None) -> datetime | None:
    """``2026-11-01``, ``2026-11-01T12:00``, or ``30m``/``12h``/``7d``/``2w`` ago; UTC."""
    if text is None:
        return None
    now = datetime.now(timezone.utc)
    if m := _RELATIVE.match(text.strip().lower()):
        return now - timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(
            f"bad --since {text!r}: expected a date (2026-11-01), a date and time (2026-11-01T12:00) "
            f"or an age (30m, 12h, 7d, 2w)."
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def selection_options(func):
    """Options that choose runs: directories, filters, window, database."""
    for option in reversed(
        [
            click.argument("dirs", nargs=-1, type=click.Path()),
            click.option(
                "--window",
                "window_text",
                metavar="A:B",
                help="Iterations to average (inclusive); default: the workload's own (35:44, or 11:44).",
            ),
            click.option("--workload", help="Only this workload."),
            click.option(
                "--gpu",
                help="Only this GPU type (logs that do not say, such as the replaced tool's, "
                "are taken to be this type).",
            ),
            click.option("--dtype", help="Only this precision."),
            click.option(
                "--since",
                help="Only runs recorded (or logs written) since: a date, or an age like 7d.",
            ),
            click.option(
                "--from-db",
                is_flag=True,
                help="List the runs in the results database instead of scanning.",
            ),
            click.option(
                "--db",
                "db_path",
                type=click.Path(dir_okay=False),
                help="Results database (default: $LLMB_INSTALL/results.sqlite).",
            ),
            click.option(
                "--rescan", is_flag=True, help="Parse every log again and update the database."
            ),
        ]
    ):
        func = option(func)
    return func


def warn(message: str) -> None:
    from llmb.log import warn as say

    say(message)  # plain, or JSON where asked; once per command


def open_store(db_path: str | None, required: bool):
    """The results database. ``required`` (--from-db, a baseline run id):
    its failure is the command's (StoreError: the file and the cause);
    otherwise a warning, and the results are computed from the logs."""
    from llmb.results.store import ResultStore, open_or_none

    return ResultStore(db_path) if required else open_or_none(db_path, warn)


@functools.lru_cache(maxsize=4)
def _is_terminal(stream) -> bool:
    """``stream.isatty()``, asked once a stream: the call releases the interpreter's lock, and a first
    scan of 10,000 runs, asking once a run while the pool's thread held it, waited a second on it."""
    return stream.isatty()


def _progress(index: int, total: int, location) -> None:
    if total > 1 and _is_terminal(sys.stderr):
        size = os.path.getsize(location.log) if location.log and os.path.exists(location.log) else 0
        from llmb.cli.output import output_width, shorten
        from llmb.runs.experiment import compact_name

        name = terminal_safe(compact_name(location.short_name)).replace("\n", " ")
        head, tail = f"parsing {index + 1}/{total} ", f" ({size / 1e6:.0f} MB)"
        name = shorten(
            name, max(8, (output_width(sys.stderr) or 80) - 1 - len(head) - len(tail)), "middle"
        )
        click.echo(f"\r{head}{name}{tail}\x1b[K", err=True, nl=False)
        if index + 1 == total:
            click.echo("\r\x1b[K", err=True, nl=False)


def gpu_assumption(gpu: str | None) -> tuple[str | None, str]:
    """The GPU type to take for runs that record none, and who says so: ``--gpu``, else the cluster
    file's ``gpu`` (a broken cluster file is a warning here: results never need it)."""
    if gpu:
        return gpu.lower(), "--gpu"
    from llmb.install import cluster_config

    try:
        config = cluster_config.load()
    except UsageError as exc:
        warn(f"{exc} Its gpu is not used for runs that do not record their GPU type.")
        return None, "cluster file"
    return (config.gpu if config else None), "cluster file"


def select(ctx, dirs, window_text, workload, gpu, dtype, since, from_db, db_path, rescan):
    """The (location, result, run id) triples the options ask for: where each run was found (for a stored
    run, where it was when stored), so that a scan and --from-db name runs alike."""
    from llmb.paths import experiments_dirs
    from llmb.results.collect import Collector
    from llmb.results.experiments import stored_location

    window = parse_window(window_text)
    since_at = parse_since(since)
    if from_db:
        if dirs:
            raise UsageError("--from-db lists the database; do not also give directories.")
        store = open_store(db_path, required=True)
        rows = store.query(
            workload,
            gpu,
            dtype,
            since_at.isoformat(timespec="seconds") if since_at else None,
            samples=False,
        )
        return [
            (
                _named(stored_location(r.key or r.result.log or "", r.result), r.result),
                r.result,
                r.id,
            )
            for r in rows
        ]
    paths = list(dirs) or experiments_dirs()
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise UsageError(f"no such file or directory: {', '.join(missing)}.")
    collector = Collector(get_host(ctx), lambda: open_store(db_path, required=False), warn)
    assumed, assumed_by = gpu_assumption(gpu)
    collected = collector.collect(
        paths,
        window=window,
        rescan=rescan,
        assume_gpu=assumed,
        gpu_source=assumed_by,
        progress=_progress,
        samples=False,  # a listing shows figures, never iterations: thousands of runs stay small
    )
    picked = []
    for item in collected:
        c = item.result.context
        if workload and c.workload != workload.lower():
            continue
        if gpu and c.gpu != gpu.lower():
            continue
        if dtype and c.dtype != dtype.lower():
            continue
        if since_at and item.location.log and _mtime(item.location.log) < since_at:
            continue
        picked.append((_named(item.location, item.result), item.result, item.run_id))
    return picked


def _named(location, result):
    """The location, keeping in its short name the parts that say how the run differs from its recipe."""
    from dataclasses import replace

    from llmb.results.experiments import differing_settings

    return replace(location, kept_parts=differing_settings(result.context))


def _mtime(path: str) -> datetime:
    try:
        return datetime.fromtimestamp(os.stat(path).st_mtime, timezone.utc)
    except OSError:
        return datetime.min.replace(tzinfo=timezone.utc)


def display_name(where, full_names: bool) -> str:
    """A run's name in rows (``filename`` in CSV and JSON): its run directory's name, or with --full-names
    its log's path."""
    if isinstance(where, str):
        return where
    return (where.log or where.run_dir) if full_names else where.short_name


def table_name(where, full_names: bool) -> str:
    """A run's name in a table: the experiment name's short form (the JOB column tells its runs apart),
    which keeps the parts that differ from its recipe's layout, or with --full-names its log's path,
    shown from $LLMB_INSTALL or ~."""
    from llmb.runs.experiment import compact_name

    if isinstance(where, str):
        return where
    if full_names:
        from llmb.paths import shown_path

        return shown_path(where.log or where.run_dir)
    return compact_name(where.experiment, getattr(where, "kept_parts", ()))


def job_label(result, where=None, job_ids=None) -> str:
    """The job that produced a run, by an id ``llmb logs`` and ``llmb compare --baseline`` both take: the
    llmb job id (``llmb status`` lists them), also for a foreign log named for a Slurm job of an llmb
    job; '-' where llmb knows no job of it (a foreign log's directory ends with a timestamp, which
    names no job, and two runs started in the same second share it)."""
    from llmb.results.experiments import JobIds

    return (job_ids or JobIds()).accepted(result.context.job_id) or "-"


def note_labels(
    names: list[str], results: list, places: list, jobs: list[str] | None = None
) -> list[str]:
    """What each run's notes under a table start with: its JOB column's id where it has one (short, and
    unique); else its name in the table, or where several runs share that name, its run directory's.
    ``jobs``: each run's ``job_label``, where the caller has them already."""
    from collections import Counter

    from llmb.results.experiments import JobIds

    shared = {name for name, count in Counter(names).items() if count > 1}
    job_ids = JobIds()
    jobs = jobs or [
        job_label(result, where, job_ids) for result, where in zip(results, places, strict=True)
    ]
    labels = []
    for name, run, where in zip(names, jobs, places, strict=True):
        if run == "-":
            run = display_name(where, False) if name in shared and where is not None else name
        labels.append(run)
    return labels


def _f(value, digits: int) -> str:
    from llmb.figures import figure

    return figure(value, digits)


def results_columns(full_names: bool = False):
    """The results table's columns, in order; a narrow terminal leaves out the highest ``drop`` first.
    What tells the runs apart (the name's workload, size, dtype, GPU count and tuning; the job) and what
    judges them (STATUS, VS PUBLISHED, then MFU %) go last; a name is cut at its end, a --full-names path
    the table cannot hold marked and printed whole under it."""
    from llmb.cli.output import Column, experiment_column

    return [
        experiment_column(full_names),
        Column("JOB"),
        Column("STATUS"),
        Column("WINDOW", drop=7),
        Column("STEP ms"),
        Column("STD ms", drop=9),
        Column("TFLOPS/GPU", drop=3),
        Column("STD", drop=8),
        Column("TOKENS/S", drop=4),
        Column("MFU %", drop=2),
        Column("MFU BF16 %", drop=6),
        Column("DAYS/1T", drop=5),
        Column("VS PUBLISHED", drop=1),
    ]


def grouped_notes(pairs: list[tuple[str, str]]) -> list[str]:
    """``(run, note)`` pairs as lines: a note said of several runs is one line naming them."""
    runs_of: dict[str, dict[str, None]] = {}  # each note's runs, in order, once each
    for run, note in pairs:
        runs_of.setdefault(note, {})[run] = None
    lines = []
    for note, once in runs_of.items():
        runs = list(once)
        if len(runs) == 1:
            lines.append(f"{runs[0]}: {note}")
        else:
            lines.append(f"{note} ({len(runs)} runs: {', '.join(runs)})")
    return lines


def render(
    rows: list[dict],
    results: list,
    searched: list[str] | None = None,
    names: list[str] | None = None,
    full_names: bool = False,
    places: list | None = None,
) -> str:
    from llmb.cli.output import fit_text

    if not rows:
        if searched == []:
            from llmb.paths import install_dir

            return (
                f"No runs found: there are no experiments under {install_dir()}/workloads. "
                f"Give directories (llmb results DIR ...) or set LLMB_INSTALL."
            )
        return "No runs found."
    names = names or [r["filename"] for r in rows]
    places = places or [None] * len(rows)
    table = [
        [
            name,
            r["job_id"] or "-",  # job_label's: the row names the job once (export.row)
            r["status"],
            r["window"],
            _f(r["time_mean_ms"], 1),
            _f(r["time_std_dev_ms"], 1),
            _f(r["tflops_per_gpu_mean"], 2),
            _f(r["tflops_per_gpu_std_dev"], 2),
            _f(r["tokens_per_s"], 0),
            _f(r["mfu_pct"], 2),
            _f(r["mfu_bf16_pct"], 2),
            _f(r["days_to_train_1t"], 1),
            "-" if r["reference_delta_pct"] is None else f"{r['reference_delta_pct']:+.1f}%",
        ]
        for name, r, result, where in zip(names, rows, results, places, strict=True)
    ]
    text = render_table(results_columns(full_names), table)
    notes = []
    labels = note_labels(names, results, places, [r["job_id"] or "-" for r in rows])
    for label, r, result in zip(labels, rows, results, strict=True):
        run = label
        if r["failure_reason"]:
            notes.append((run, f"{r['status']}: {r['failure_reason']}"))
        # another document's figure, or another GPU type's (an H200 run: the H100's, "published (h100)")
        borrowed = result.reference and (
            result.reference.get("source") != "recipe" or result.reference.get("of_gpu")
        )
        if result.context.tuned:
            notes.append(
                (
                    run,
                    f"tuned ({result.context.tuned}); VS PUBLISHED is against the official "
                    f"configuration's published figure",
                )
            )
        if borrowed and r["reference_delta_pct"] is not None:
            # its own recipe publishes none: say whose figure VS PUBLISHED is against
            notes.append(
                (
                    run,
                    f"VS PUBLISHED is against {result.reference['label']} ({result.reference_source})",
                )
            )
        notes += [(run, n) for n in result.notes]
        if result.nccl:
            total = sum(c.bytes for c in result.nccl)
            calls = sum(c.calls for c in result.nccl)
            parts = ", ".join(
                f"{c.name} {c.calls} calls {c.bytes / 2**30:.2f} GiB" for c in result.nccl[:4]
            )
            notes.append((run, f"NCCL trace: {calls} calls, {total / 2**30:.2f} GiB ({parts})"))
        if (transport := result.nccl_transport) is not None:
            used = (
                ", ".join(f"{kind} {count}" for kind, count in transport.channels.items())
                or "no channel lines"
            )
            extra = "".join(
                f"; {what} {', '.join(found)}"
                for what, found in (
                    ("network", transport.networks),
                    ("net plugin", transport.plugins),
                )
                if found
            )
            notes.append((run, f"NCCL transport: {used}{extra}"))
    if notes:
        text += "\n\n" + fit_text("\n".join(grouped_notes(notes)))
    return text


@click.command("results")
@selection_options
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
)
@click.option(
    "--full-names",
    is_flag=True,
    help="Show each run's log path instead of its experiment's short name.",
)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.pass_context
def results_command(
    ctx,
    dirs,
    window_text,
    workload,
    gpu,
    dtype,
    since,
    from_db,
    db_path,
    rescan,
    fmt,
    full_names,
    as_json,
):
    """Parse the logs of the runs under DIRS (default: every workload's
    experiments directory in $LLMB_INSTALL) and show step time and
    TFLOP/s/GPU over the window (mean and sample standard deviation),
    tokens/s, MFU (against the run dtype's peak and against the BF16 peak),
    days to train 1T tokens, checkpoint timings, the published step time and
    how far off it the run is, why a run failed, and the transports NCCL used
    (a warning when nodes talked over TCP sockets). Every parsed run is
    stored in the results database."""
    from llmb.results.experiments import JobIds
    from llmb.results.export import json_array, nccl_rows, nccl_transport_row, row, to_csv

    picked = select(ctx, dirs, window_text, workload, gpu, dtype, since, from_db, db_path, rescan)
    job_ids = JobIds()
    fmt = "json" if as_json else fmt
    if fmt == "json":
        from llmb.runs.provenance import of_log

        def full_row(where, result, run_id) -> dict:
            r = row(result, name=display_name(where, full_names), run_id=run_id, job_ids=job_ids)
            r["notes"] = list(result.notes)
            r["nccl"] = nccl_rows(result)
            r["nccl_transport"] = nccl_transport_row(result)
            # the run directory's provenance.json (docs/provenance.md)
            r["provenance"] = of_log(result.log)
            return r

        # written row by row: the JSON of thousands of runs (with their provenance) is never held at once
        for piece in json_array(full_row(*item) for item in picked):
            click.echo(piece, nl=False)
        click.echo()
        return
    rows = [
        row(result, name=display_name(where, full_names), run_id=run_id, job_ids=job_ids)
        for where, result, run_id in picked
    ]
    if fmt == "csv":
        click.echo(terminal_safe(to_csv(rows)), nl=False)
    else:
        from llmb.paths import experiments_dirs

        searched = list(dirs) or (None if from_db else experiments_dirs())
        names = [table_name(where, full_names) for where, _, _ in picked]
        click.echo(
            terminal_safe(
                render(
                    rows,
                    [result for _, result, _ in picked],
                    searched,
                    names,
                    full_names,
                    [where for where, _, _ in picked],
                )
            )
        )
