"""A framework's per-release performance summary, as published figures (``--reference summary``).

The data file (a workload's ``performance_summary``, e.g. Llama 3.1's
``performance_summary.yaml``) copies the document's tables cell for cell, one
table per release and section. This module turns the rows a run can be judged
against into ``ReferenceResult`` records:

* pre-training rows only (``task: pretrain``), at the published sequence length;
* the GPU type from the row's or table's system (``DGX-H100`` -> ``h100``);
* the precision as printed: ``BF16``, ``FP8``/``FP8-CS`` (current scaling, llmb's
  ``fp8``), ``NVFP4``; ``MXFP8``/``FP8-MX`` rows and tables that print no precision
  are left out, since llmb's ``fp8`` is current scaling and an unprinted precision
  is a reading, not a figure (unless the file maps them, ``precisions: {MXFP8: fp8}``,
  for a workload whose fp8 runs as MXFP8 where they were measured). A cell ``a (b)``
  under ``FP8-CS (FP8-MX)`` is ``a``;
* where several releases publish the same size, GPU type, precision and GPU
  count, the newest release wins (its container and date are the figure's);
* the step time is derived: GBS x sequence length / (tokens/s per GPU x GPUs).
"""

from __future__ import annotations

import re
from typing import Any

from llmb.recipes.records import Provenance, ReferenceResult

_SYSTEM = re.compile(r"^DGX-([A-Z0-9]+)$")
_FIRST_NUMBER = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)")
_PRECISIONS = {
    "BF16": "bf16",
    "FP8": "fp8",
    "FP8-CS": "fp8",
    "FP8-CS (FP8-MX)": "fp8",
    "NVFP4": "nvfp4",
}


def _number(cell: Any) -> float | None:
    """``37556`` or ``"37556 (36108)"`` -> 37556.0; ``"n/a"`` -> None."""
    if isinstance(cell, (int, float)) and not isinstance(cell, bool):
        return float(cell)
    m = _FIRST_NUMBER.match(str(cell))
    return float(m.group(1)) if m else None


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", release))


def _date(table: dict[str, Any]) -> str | None:
    """When the document published the figures as they are now: the last revision that changed a
    throughput cell (a row's last two: tokens/s and TFLOP/s per GPU), else the first publication."""
    revisions = [r for r in table.get("revisions") or () if r.get("rows_before")]
    states = [r["rows_before"] for r in revisions] + [table["rows"]]
    date = (table.get("first_published") or {}).get("date")
    for index, revision in enumerate(revisions):
        if [row[-2:] for row in states[index]] != [row[-2:] for row in states[index + 1]]:
            date = revision.get("date")
    return None if date is None else str(date)


def _rows(
    table: dict[str, Any], document: str, gpu_types: set[str], precisions: dict[str, str]
) -> list[ReferenceResult]:
    columns = list(table["columns"])
    if table.get("task") != "pretrain" or "Precision" not in columns:
        return []
    out = []
    for index, cells in enumerate(table["rows"]):
        row = dict(zip(columns, cells, strict=True))
        system = _SYSTEM.match(str(row.get("System") or table.get("system") or ""))
        gpu = system.group(1).lower() if system else None
        dtype = precisions.get(str(row["Precision"]))
        gpus, gbs, seq = (_number(row.get(k)) for k in ("#-GPUs", "GBS", "Sequence Length"))
        per_gpu, tflops = (
            _number(row.get("Tokens / sec / GPU")),
            _number(row.get("Model TFLOP / sec / GPU")),
        )
        if gpu not in gpu_types or dtype is None or not (gpus and gbs and seq and per_gpu):
            continue
        where = f"{document}, {table['section']}, row {index + 1}"
        out.append(
            ReferenceResult(
                variant="",
                size=str(table["size"]),
                gpu=gpu,
                dtype=dtype,
                gpus=int(gpus),
                step_time_s=gbs * seq / (per_gpu * gpus),
                tokens_per_s=per_gpu * gpus,
                mfu_pct=None,
                days_1t=None,
                provenance=Provenance(
                    seed=table.get("path", ""), table=None, rows=(index,), title=document
                ),
                tflops_per_gpu=tflops,
                note=where,
                gbs=int(gbs),
                container=str(table.get("container") or ""),
                date=_date(table),
            )
        )
    return out


def summary_from_dict(raw: dict[str, Any], gpu_types: set[str]) -> tuple[ReferenceResult, ...]:
    """The figures of a performance-summary data file, newest release first for each configuration."""
    document = str(raw["source"]["document"])
    # A workload whose fp8 runs as MXFP8 where the figures were measured (its production rule, e.g.
    # Qwen3 on Blackwell) says so: ``precisions: {MXFP8: fp8}`` makes those rows its fp8 figures.
    precisions = {
        **_PRECISIONS,
        **{str(k): str(v) for k, v in (raw.get("precisions") or {}).items()},
    }
    tables = sorted(
        raw.get("tables") or (), key=lambda t: _release_key(str(t["release"])), reverse=True
    )
    chosen: dict[tuple, ReferenceResult] = {}
    for table in tables:
        for ref in _rows(table, document, gpu_types, precisions):
            chosen.setdefault((ref.size, ref.gpu, ref.dtype, ref.gpus), ref)
    return tuple(chosen.values())
