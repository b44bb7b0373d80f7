"""The gates a certification run must pass, each judged from its ``RunResult``.

1. ``status``: the run succeeded (``llmb results``' vocabulary: the final
   iteration and the whole statistics window are in its log).
2. ``loss``: every logged loss is a finite number, and the mean over the
   last ``LOSS_WINDOW`` iterations is below the mean over the first (a
   quarter of the iterations each when fewer than 4 x ``LOSS_WINDOW`` were
   logged): the model trained.
3. ``tflops``: the window's TFLOP/s per GPU is above 0.
4. ``step_cv``: the step time's coefficient of variation (sample standard
   deviation / mean over the statistics window) is below ``MAX_STEP_CV``.
   5%: the performance gate allows 5% below the published figure, so a
   window whose own spread is as large as that whole margin is no stable
   figure to certify; on a healthy cluster the steady-state step time
   varies by about 1%, and more points at stragglers, throttled GPUs,
   contended links or noisy neighbours.
5. ``performance``: at least 95% of the published performance
   (step time <= published / 0.95), the NVIDIA DGX Cloud Benchmarking
   Exemplar validation guide's threshold (``llmb compare``'s default).

A proxy run (``--proxy``, ``--layers``) has no published figure: its
performance gate is "n/a (proxy)". Nor is its step time a measure of the
cluster (a CPU proxy's timing is how busy the host's cores are; a tiny
model on a GPU measures launch overhead), so its CV gate shows the value
and is "n/a (proxy)" too. Neither fails: a proxy suite tests the workflow,
and certifying a real cluster needs full-size runs, so a proxy run that
meets every gate is "exercised", never "pass" (``verdict``). A full-size
run is judged against its own recipe's figure, else another public
document's for exactly its configuration (Llama 3.1 Megatron-Bridge rows:
the NeMo 2 recipe's, else Megatron-Bridge's performance summary), and the
gate's detail names it; only where no document publishes one is it
"n/a (not published)".
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from llmb.recipes.references import Figure, Missing
from llmb.results.compare import DEFAULT_THRESHOLD, NOT_COMPARED, compare
from llmb.results.records import RunResult, tflops_source_words

PASS, FAIL, NA = "pass", "fail", "n/a"
LOSS_WINDOW = 10  # iterations at each end of the run whose mean losses are compared
MAX_STEP_CV = 0.05
PERFORMANCE = DEFAULT_THRESHOLD  # of the published throughput
GATES = ("status", "loss", "tflops", "step_cv", "performance")


@dataclass(frozen=True)
class Gate:
    name: str  # one of GATES
    outcome: str  # pass | fail | n/a
    value: str  # what the table shows
    detail: str = ""

    @property
    def cell(self) -> str:
        if self.outcome == NA:
            return self.value if self.value == "-" else f"{self.value} (n/a)"
        return f"{self.value} {self.outcome.upper()}"

    def to_dict(self) -> dict:
        return {"outcome": self.outcome, "value": self.value, "detail": self.detail}


def status_gate(result: RunResult) -> Gate:
    if result.status == "success":
        return Gate("status", PASS, "success")
    return Gate("status", FAIL, result.status, result.reason or "")


def loss_gate(result: RunResult) -> Gate:
    logged = [(s.iteration, s.loss) for s in result.samples if s.loss is not None]
    bad = [i for i, loss in logged if not math.isfinite(loss)]
    if bad:
        return Gate(
            "loss",
            FAIL,
            "not finite",
            f"the loss is not a finite number at iteration {bad[0]}"
            + (f" and {len(bad) - 1} more" if len(bad) > 1 else ""),
        )
    if len(logged) < 2:
        return Gate("loss", FAIL, "-", f"{len(logged)} loss values logged; at least 2 are needed")
    ends = max(1, min(LOSS_WINDOW, len(logged) // 4))
    first = statistics.fmean(loss for _, loss in logged[:ends])
    last = statistics.fmean(loss for _, loss in logged[-ends:])
    value = f"{first:.4g}->{last:.4g}"
    detail = f"mean loss of the first {ends} logged iterations {first:.6g}, of the last {ends} {last:.6g}"
    return Gate(
        "loss",
        PASS if last < first else FAIL,
        value,
        detail + ("" if last < first else ": not falling"),
    )


def tflops_gate(result: RunResult) -> Gate:
    tflops = result.stats.tflops_mean if result.stats else None
    if tflops is None or not math.isfinite(tflops):
        return Gate("tflops", FAIL, "-", "no TFLOP/s/GPU in the statistics window")
    return Gate(
        "tflops",
        PASS if tflops > 0 else FAIL,
        f"{tflops:.3g}",
        f"{tflops:g} TFLOP/s/GPU ({tflops_source_words(result.stats.tflops_source or 'log')})",
    )


def cv_gate(result: RunResult) -> Gate:
    stats = result.stats
    if not stats or not stats.time_mean_ms or stats.time_std_ms is None:
        outcome = NA if result.context.proxy else FAIL
        return Gate("step_cv", outcome, "-", "fewer than 2 step times in the statistics window")
    cv = stats.time_std_ms / stats.time_mean_ms
    value = f"{cv:.1%}"
    if result.context.proxy:
        return Gate("step_cv", NA, value, "proxy run: its step time does not measure the cluster")
    return Gate(
        "step_cv",
        PASS if cv < MAX_STEP_CV else FAIL,
        value,
        f"step time {stats.time_mean_ms:.1f} ms +- {stats.time_std_ms:.1f} ms over iterations "
        f"{stats.first}-{stats.last}; bound {MAX_STEP_CV:.0%}",
    )


def performance_gate(result: RunResult, figure: Figure | Missing | None = None) -> Gate:
    """Against ``figure``; None: the figure the run's analysis chose by the one reference policy (its own
    recipe's, else another document's for exactly its configuration and batch, named in the detail), the
    one ``results`` and ``compare`` show."""
    if result.context.proxy:
        return Gate("performance", NA, "proxy", "proxy run: not compared with published figures")
    verdict = compare(result, None, PERFORMANCE, figure)[0]
    if verdict.against == "run":  # no step time to compare
        return Gate("performance", FAIL, "-", verdict.detail)
    if verdict.outcome == NOT_COMPARED:
        return Gate("performance", NA, "not published", verdict.detail)
    return Gate(
        "performance",
        PASS if verdict.outcome == "pass" else FAIL,
        f"{verdict.ratio:.1%}",
        f"step time {result.stats.time_mean_ms:.1f} ms"
        + (f", published {verdict.reference_ms:.1f} ms" if verdict.reference_ms is not None else "")
        + f": {verdict.detail}",
    )


def judge(result: RunResult, figure: Figure | Missing | None = None) -> list[Gate]:
    """Every gate, in ``GATES`` order. A run that did not succeed fails its status gate; the gates its log
    has no data for are then shown "-" without failing again."""
    gates = [
        status_gate(result),
        loss_gate(result),
        tflops_gate(result),
        cv_gate(result),
        performance_gate(result, figure),
    ]
    if gates[0].outcome == FAIL:
        gates[1:] = [Gate(g.name, NA, "-", g.detail) if g.value == "-" else g for g in gates[1:]]
    return gates


def passed(gates: list[Gate]) -> bool:
    """No gate failed ("n/a" does not fail)."""
    return all(g.outcome != FAIL for g in gates)
