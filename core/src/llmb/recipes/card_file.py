"""A framework's model verification cards, as published figures (``--reference card``).

A model verification card (Megatron-Bridge's ``examples/model_verification_cards/<model>/card.yaml``)
records one verified run per GPU type of a model's performance recipe: the command, the framework
commit and container it ran with, the date, and the averages of its last ten steps (step time,
model TFLOP/s per GPU, tokens/s per GPU). The data file (a workload's ``verification_cards``, e.g.
DeepSeek-V3's ``verification_cards.yaml``) copies those cells with the configuration the card's
text states (GPU count, global batch, sequence length, layout) and the card's own words beside them.
This module turns its entries into ``ReferenceResult`` records:

* only entries the card marks ``verified``, of a precision llmb runs (``precisions:`` maps the
  card's ``fp8_mx`` to llmb's ``fp8`` where the workload's fp8 runs as MXFP8 there);
* the step time is the card's own (``last_10_steps_step_time_ms_avg``), the tokens/s the card's per
  GPU times the GPU count, the TFLOP/s the card's;
* the container is the card's ``verification_environment.base_container`` (an entry may name its
  own), the date its ``last_verified``.

A card's run is one run, not a release's benchmark table: it is judged like any other figure, by
step time at the same GPU count and global batch, and across containers never by TFLOP/s
(``llmb.results.compare.judge_published``).
"""

from __future__ import annotations

from typing import Any

from llmb.recipes.records import Provenance, ReferenceResult

_PRECISIONS = {"bf16": "bf16", "fp8": "fp8", "fp8_cs": "fp8", "nvfp4": "nvfp4"}
STEP_TIME = "last_10_steps_step_time_ms_avg"
TFLOPS = "last_10_steps_model_tflops_per_gpu_avg"
TOKENS = "last_10_steps_tokens_per_second_per_gpu_avg"


def _entry(
    card: dict[str, Any], entry: dict[str, Any], gpu_types: set[str], precisions: dict[str, str]
) -> ReferenceResult | None:
    gpu = str(entry["gpu"]).lower()
    dtype = precisions.get(str(entry["precision"]).lower())
    metrics = entry["metrics"]
    if entry.get("status") != "verified" or gpu not in gpu_types or dtype is None:
        return None
    gpus, step_ms = int(entry["gpus"]), float(metrics[STEP_TIME])
    per_gpu = float(metrics[TOKENS]) if metrics.get(TOKENS) is not None else None
    where = f"{card['document']}, {entry['item']}, verified {entry['last_verified']}"
    return ReferenceResult(
        variant="",
        size=str(entry["size"]),
        gpu=gpu,
        dtype=dtype,
        gpus=gpus,
        step_time_s=step_ms / 1000.0,
        tokens_per_s=None if per_gpu is None else per_gpu * gpus,
        mfu_pct=None,
        days_1t=None,
        provenance=Provenance(seed=str(card["path"]), table=None, rows=(), title=card["document"]),
        tflops_per_gpu=float(metrics[TFLOPS]) if metrics.get(TFLOPS) is not None else None,
        note=where,
        gbs=int(entry["gbs"]),
        container=str(entry.get("container") or card["container"]),
        date=str(entry["last_verified"]),
    )


def cards_from_dict(raw: dict[str, Any], gpu_types: set[str]) -> tuple[ReferenceResult, ...]:
    """The figures of a verification-card data file, one per size, GPU type, precision and GPU count
    (the first entry the file lists for it)."""
    precisions = {
        **_PRECISIONS,
        **{str(k).lower(): str(v) for k, v in (raw.get("precisions") or {}).items()},
    }
    chosen: dict[tuple, ReferenceResult] = {}
    for card in raw.get("cards") or ():
        for entry in card.get("entries") or ():
            ref = _entry(card, entry, gpu_types, precisions)
            if ref is not None:
                chosen.setdefault((ref.size, ref.gpu, ref.dtype, ref.gpus), ref)
    return tuple(chosen.values())
