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
from typing import Any

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
    "failure_reason",
    "failure_hint",
    "tuned",
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


def row(result: RunResult, *, name: str, run_id: int | None = None) -> dict[str, Any]:
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
        "failure_reason": result.reason,
        "failure_hint": result.failure.hint if result.failure else None,
        # --set: the settings that differ from the official configuration, whose published figure it is compared with
        "tuned": c.tuned,
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


def to_json(rows: list[dict[str, Any]]) -> str:
    return json.dumps(rows, indent=2, allow_nan=False)


MAX_ROWS_FILE = 256 << 20  # bytes: a results file of a hundred thousand runs is far less


def read_rows(path: str, what: str) -> list[dict[str, Any]]:
    """The rows of a file written by ``llmb results --format json`` (a list of
    rows, or one row); ``what`` names the file in errors ("the baseline")."""
    from llmb.errors import UsageError
    from llmb.results.scan import read_regular

    try:  # a regular file only, and bounded: a FIFO or a device must not hang the command
        data = json.loads(read_regular(path, MAX_ROWS_FILE + 1))
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror or exc}.") from None
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
    return rows


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
