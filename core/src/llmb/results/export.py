"""Results as rows: the columns of the tool llmb replaces, then llmb's own.

The first seven CSV columns are ``parse_train_timing_mbridge.sh``'s header
(field-facts §2), in its order and units, so scripts reading them keep
working. CSV is written with the csv module and JSON with json, so both stay
valid whatever a log contained (a reason with commas, quotes or newlines).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Iterator
from typing import Any

from llmb.results.experiments import JobIds
from llmb.results.records import RunResult

LEGACY_COLUMNS = (
    "filename",
    "status",
    "time_mean_ms",
    "time_std_dev_ms",
    "tflops_per_gpu_mean",
    "tflops_per_gpu_std_dev",
    "max_iteration",
)
COLUMNS = LEGACY_COLUMNS + (
    "workload",
    "variant",
    "size",
    "gpu",
    "gpu_source",
    "dtype",
    "gpus",
    "scaling",
    "proxy",
    "window",
    "samples_in_window",
    "tflops_source",
    "tokens_per_s",
    "mfu_pct",
    "mfu_bf16_pct",
    "days_to_train_1t",
    "checkpoint_save_s",
    "checkpoint_load_s",
    "reference_step_time_ms",
    "reference_tokens_per_s",
    "reference_mfu_pct",
    "reference_mfu_bf16_pct",
    "reference_delta_pct",
    "reference_source",
    "doubts",
    "failure_reason",
    "failure_hint",
    "tuned",
    "job_id",
    "run_id",
    "log",
)


def _round(value: float | None, digits: int) -> float | None:
    """``digits`` decimals, or four significant digits below 1 (a CPU proxy's
    TFLOP/s would otherwise round to 0)."""
    if value is None or not math.isfinite(value):
        return None
    if 0 < abs(value) < 1:
        return float(f"{value:.4g}")
    return round(value, digits)


def row(
    result: RunResult, *, name: str, run_id: int | None = None, job_ids: JobIds | None = None
) -> dict[str, Any]:
    """The run's row (``COLUMNS``); ``job_ids``: the listing's, where it has many rows (its job ids are
    then looked up once)."""
    s, c = result.stats, result.context
    return {
        "filename": name,
        "status": result.status,
        "time_mean_ms": _round(s.time_mean_ms, 3) if s else None,
        "time_std_dev_ms": _round(s.time_std_ms, 3) if s else None,
        "tflops_per_gpu_mean": _round(s.tflops_mean, 2) if s else None,
        "tflops_per_gpu_std_dev": _round(s.tflops_std, 2) if s else None,
        "max_iteration": result.max_iteration,
        "workload": c.workload,
        "variant": c.variant,
        "size": c.size,
        "gpu": c.gpu,
        "gpu_source": c.gpu_source,  # recipe | provenance (what the run recorded) | --gpu | cluster file
        "dtype": c.dtype,
        "gpus": c.gpus,
        "scaling": c.scaling,
        "proxy": c.proxy,
        "window": f"{result.window[0]}-{result.window[1]}",
        "samples_in_window": s.count if s else 0,
        "tflops_source": s.tflops_source if s else None,
        "tokens_per_s": _round(result.tokens_per_s, 1),
        "mfu_pct": _round(result.mfu_pct, 2),  # against the run dtype's peak
        "mfu_bf16_pct": _round(result.mfu_bf16_pct, 2),  # against the BF16 peak
        "days_to_train_1t": _round(result.days_1t, 2),
        "checkpoint_save_s": _round(result.checkpoint.save_s, 3),
        "checkpoint_load_s": _round(result.checkpoint.load_s, 3),
        "reference_step_time_ms": _round(result.reference_step_time_ms, 3),
        "reference_tokens_per_s": _round(result.reference_tokens_per_s, 1),
        "reference_mfu_pct": _round(result.reference_mfu_pct, 2),
        "reference_mfu_bf16_pct": _round(result.reference_mfu_bf16_pct, 2),
        "reference_delta_pct": _round(result.reference_delta_pct, 2),
        # the document, table, row and container of the figure the one reference policy chose
        "reference_source": result.reference_source,
        # why no verdict is reached for it (llmb.results.identity): its log, records and name disagree,
        # or a record holds an impossible value; None where nothing is in doubt
        "doubts": "; ".join(c.doubts) or None,
        "failure_reason": result.reason,
        "failure_hint": result.failure.hint if result.failure else None,
        # --set: the settings that differ from the official configuration, whose published figure it is compared with
        "tuned": c.tuned,
        # the llmb job that ran it, as the table's JOB column and llmb status --json's job_id name it (a
        # script joins the two on it); None where llmb knows no job of it (a foreign log)
        "job_id": (job_ids or JobIds()).accepted(c.job_id),
        "run_id": run_id,
        "log": result.log,
    }


def to_csv(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in r.items()})
    return buffer.getvalue()


def json_array(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """The JSON array of ``rows`` in pieces, one row a line, made as each row comes: a listing of many
    runs never holds all its rows, nor their JSON, at once (and one line a run is what grep and a
    reader scan)."""
    opening = "[\n  "
    for r in rows:
        yield opening + json.dumps(r, allow_nan=False)
        opening = ",\n  "
    yield "[]" if opening == "[\n  " else "\n]"


MAX_ROWS_FILE = 256 << 20  # bytes: a results file of a hundred thousand runs is far less

# What a row read back must hold, field by field (absent or null is always allowed: a failed run has no step
# time). A value of another type, or out of its range, is a corrupt or hand-made row: it is skipped, so no
# verdict, plot or table is ever made from it.
_TEXT_FIELDS = (
    "filename",
    "status",
    "workload",
    "variant",
    "size",
    "gpu",
    "gpu_source",
    "dtype",
    "scaling",
    "window",
    "tflops_source",
    "reference_source",
    "doubts",
    "failure_reason",
    "failure_hint",
    "tuned",
    "job_id",
    "log",
)
_STEP_TIME_FIELDS = ("time_mean_ms", "reference_step_time_ms")  # what verdicts divide by
MIN_STEP_MS = 1e-3  # a microsecond a step: less is a corrupt number, not a measurement
# The other figures: finite, and no larger than this (a larger one is a corrupt number; float() of a
# 400-digit JSON integer would not even be a float).
MAX_FIGURE = 1e15
_FIGURE_FIELDS = (
    "time_std_dev_ms",
    "tflops_per_gpu_mean",
    "tflops_per_gpu_std_dev",
    "tokens_per_s",
    "mfu_pct",
    "mfu_bf16_pct",
    "days_to_train_1t",
    "checkpoint_save_s",
    "checkpoint_load_s",
    "reference_tokens_per_s",
    "reference_mfu_pct",
    "reference_mfu_bf16_pct",
    "reference_delta_pct",
)
_COUNT_FIELDS = ("max_iteration", "samples_in_window", "run_id")
MAX_WARNED_ROWS = 10  # skipped rows named one by one; the rest are counted in one line


def _kind(value: Any) -> str:
    """A value as a message may show it: short, and never a whole nested structure."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:40] + "...")
    if isinstance(value, int) and abs(value) > 10**20:
        return f"a {len(str(abs(value)))}-digit integer"
    return repr(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def row_problem(item: Any) -> str | None:
    """Why ``item`` is not a usable result row (None: it is one). Comparisons with ``int`` stay exact, so a
    huge JSON integer is refused, never converted."""
    from llmb.recipes.gpus import MAX_GPUS
    from llmb.results.analyze import MAX_STEP_MS

    for field in _TEXT_FIELDS:
        value = item.get(field)
        if value is not None and not isinstance(value, str):
            return f"{field} is {_kind(value)}, not text"
    gpus = item.get("gpus")
    whole = isinstance(gpus, int) or (isinstance(gpus, float) and gpus.is_integer())
    if gpus is not None and not (_is_number(gpus) and whole and 1 <= gpus <= MAX_GPUS):
        return f"gpus is {_kind(gpus)}, not a GPU count from 1 to {MAX_GPUS:,}"
    for field in _STEP_TIME_FIELDS:
        value = item.get(field)
        if value is not None and not (_is_number(value) and MIN_STEP_MS <= value <= MAX_STEP_MS):
            return f"{field} is {_kind(value)}, not a step time in ms from {MIN_STEP_MS:g} to {MAX_STEP_MS:.0e}"
    for field in _FIGURE_FIELDS:
        value = item.get(field)
        if value is not None and not (_is_number(value) and -MAX_FIGURE <= value <= MAX_FIGURE):
            return f"{field} is {_kind(value)}, not a finite number of at most {MAX_FIGURE:.0e}"
    for field in _COUNT_FIELDS:
        value = item.get(field)
        if value is not None and not (
            isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2**53
        ):
            return f"{field} is {_kind(value)}, not a count"
    proxy = item.get("proxy")
    if proxy is not None and not isinstance(proxy, bool):
        return f"proxy is {_kind(proxy)}, not true or false"
    return None


def read_rows(path: str, what: str) -> list[dict[str, Any]]:
    """The rows of a file written by ``llmb results --format json`` (a list of rows, or one row); ``what``
    names the file in errors ("the baseline"). Each row is checked field by field (``row_problem``): one
    that fails is skipped with a warning naming it and why; a file with rows but none usable is refused."""
    from llmb.errors import UsageError
    from llmb.log import warn
    from llmb.results.scan import read_regular

    try:  # a regular file only, and bounded: a FIFO or a device must not hang the command
        data = json.loads(read_regular(path, MAX_ROWS_FILE + 1))
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror or exc}.") from None
    except RecursionError:  # arrays or objects nested thousands deep: no results file is
        raise UsageError(
            f"{what} {path} is not a results file (its JSON is nested too deeply); write one with "
            f"llmb results --format json > results.json, a new file."
        ) from None
    except ValueError as exc:  # also a file cut at the bound, and bytes that are not UTF-8
        raise UsageError(
            f"{what} {path} is not a results file (not valid JSON: {exc}); write one with "
            f"llmb results --format json > results.json, a new file."
        ) from None
    rows = data if isinstance(data, list) else [data]
    for index, item in enumerate(rows):
        if not isinstance(item, dict) or "time_mean_ms" not in item:
            raise UsageError(
                f"{what} {path} entry {index + 1} is not a result row "
                f"(expected the output of llmb results --format json)."
            )
    usable, skipped = [], []
    for index, item in enumerate(rows):
        problem = row_problem(item)
        if problem is None:
            usable.append(item)
        else:
            skipped.append(f"entry {index + 1}: {problem}")
    if skipped and not usable:
        more = f" (and {len(skipped) - 1} more entries like it)" if len(skipped) > 1 else ""
        raise UsageError(
            f"{what} {path} has no usable result row: {skipped[0]}{more}; write one with "
            f"llmb results --format json > results.json, a new file."
        )
    for problem in skipped[:MAX_WARNED_ROWS]:
        warn(f"{what} {path}: {problem}; that row is skipped.")
    if len(skipped) > MAX_WARNED_ROWS:
        warn(f"{what} {path}: {len(skipped) - MAX_WARNED_ROWS} more unusable rows are skipped.")
    return usable


def nccl_rows(result: RunResult) -> list[dict[str, Any]]:
    return [
        {
            "collective": c.name,
            "calls": c.calls,
            "elements": c.elements,
            "bytes": c.bytes,
            "communicator_sizes": {str(k): v for k, v in c.communicator_sizes.items()},
            "unknown_datatypes": c.unknown_datatypes,
        }
        for c in result.nccl
    ]


def nccl_transport_row(result: RunResult) -> dict[str, Any] | None:
    """The transports NCCL's set-up lines name (None: the log has none), and whether the
    run's nodes talked over TCP sockets."""
    t = result.nccl_transport
    if t is None:
        return None
    return {
        "channels": dict(t.channels),
        "networks": list(t.networks),
        "plugins": list(t.plugins),
        "hosts": t.hosts,
        "over_sockets": t.over_sockets(result.context.nodes),
    }
