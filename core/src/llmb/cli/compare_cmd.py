"""``llmb compare``: results against the published numbers and a baseline."""

from __future__ import annotations

import click

from llmb.cli import get_host
from llmb.cli.output import emit_json, render_table, terminal_safe
from llmb.cli.results_cmd import display_name, open_store, select, selection_options
from llmb.errors import UsageError


def _fmt(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _mfu(at_dtype: float | None, at_bf16: float | None, dtype: str | None) -> str:
    """``MFU 41.20%``, and against the BF16 peak where the dtype is another (``20.60% of the BF16 peak``)."""
    text = f"MFU {_fmt(at_dtype, 2)}%"
    if dtype != "bf16" and at_bf16 is not None:
        text += f" ({_fmt(at_bf16, 2)}% of the BF16 peak)"
    return text


def _baselines(ctx, spec: str | None, db_path: str | None):
    """``--baseline RUN`` (a run id in the results database) or ``FILE``."""
    from llmb.results.compare import Baseline, key_of, load_baselines

    if spec is None:
        return None
    if spec.isdigit():
        store = open_store(db_path, required=True)
        stored = store.get(int(spec))
        if stored is None:
            raise UsageError(f"--baseline {spec}: no run {spec} in the results database "
                             f"(llmb results --from-db lists the ids).")
        result = stored.result
        if result.status != "success" or not result.stats or not result.stats.time_mean_ms:
            raise UsageError(f"--baseline {spec}: run {spec} did not succeed ({result.status}); pick a successful run.")
        return [Baseline(key_of(result), result.stats.time_mean_ms, f"run {spec}")]
    return load_baselines(spec)


@click.command("compare")
@selection_options
@click.option("--baseline", "baseline_spec", metavar="RUN|FILE",
              help="A run id from the results database, or a JSON file from llmb results --format json.")
@click.option("--threshold", type=click.FloatRange(0, 1, min_open=True), default=0.95, show_default=True,
              help="Pass when throughput is at least this fraction of the reference's.")
@click.option("--full-names", is_flag=True, help="Show each run's full log path instead of its short name.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def compare_command(ctx, dirs, window_text, workload, gpu, dtype, since, from_db, db_path, rescan,
                    baseline_spec, threshold, full_names, as_json):
    """Compare each run with the seeds' published step time for its exact
    configuration (workload, size, GPU type, dtype, GPU count, scaling) and,
    with --baseline, with a saved baseline. A run passes at --threshold of
    the reference's throughput (default 95%, the cluster-acceptance rule of
    the tool llmb replaces). Exits 1 when any run regresses or failed, so it
    can gate a pipeline; proxy runs are never compared with published figures."""
    from llmb.results.compare import compare, regressed

    get_host(ctx)
    baselines = _baselines(ctx, baseline_spec, db_path)
    picked = select(ctx, dirs, window_text, workload, gpu, dtype, since, from_db, db_path, rescan)
    report, any_regression = [], False
    for where, result, run_id in picked:
        verdicts = compare(result, baselines, threshold)
        any_regression |= regressed(verdicts)
        report.append((display_name(where, full_names), result, run_id, verdicts))
    if as_json:
        emit_json([
            {
                "filename": name, "run_id": run_id, "status": result.status,
                "time_mean_ms": result.stats.time_mean_ms if result.stats else None,
                "tokens_per_s": result.tokens_per_s, "mfu_pct": result.mfu_pct, "mfu_bf16_pct": result.mfu_bf16_pct,
                "published": None if result.reference_step_time_ms is None else {
                    "step_time_ms": result.reference_step_time_ms, "tokens_per_s": result.reference_tokens_per_s,
                    "mfu_pct": result.reference_mfu_pct, "mfu_bf16_pct": result.reference_mfu_bf16_pct,
                    "source": result.reference_source,
                },
                "verdicts": [
                    {"against": v.against, "outcome": v.outcome, "ratio": v.ratio, "reference_ms": v.reference_ms,
                     "detail": v.detail}
                    for v in verdicts
                ],
            }
            for name, result, run_id, verdicts in report
        ])
    elif not report:
        click.echo("No runs found.")
    else:
        click.echo(terminal_safe(_render(report, threshold)))
    ctx.exit(1 if any_regression else 0)


def _render(report: list, threshold: float) -> str:
    """The comparison table, what was measured against what was published, and the tally."""
    rows = []
    for name, result, _, verdicts in report:
        for v in verdicts:
            step = result.stats.time_mean_ms if result.stats and result.stats.time_mean_ms else None
            rows.append([
                name, v.against, v.outcome.upper(),
                "-" if step is None else f"{step:,.1f}",
                "-" if v.reference_ms is None else f"{v.reference_ms:,.1f}",
                "-" if v.ratio is None else f"{v.ratio:.1%}", v.detail,
            ])
    parts = [render_table(["EXPERIMENT", "AGAINST", "OUTCOME", "STEP (ms)", "REFERENCE (ms)", "THROUGHPUT",
                           "DETAIL"], rows)]
    for name, result, _, _ in report:
        if result.reference_step_time_ms is not None and result.stats and result.stats.time_mean_ms:
            dtype = result.context.dtype
            parts.append(
                f"\n{name}: measured {_fmt(result.tokens_per_s, 0)} tokens/s, "
                f"{_mfu(result.mfu_pct, result.mfu_bf16_pct, dtype)}; "
                f"published {_fmt(result.reference_tokens_per_s, 0)} tokens/s, "
                f"{_mfu(result.reference_mfu_pct, result.reference_mfu_bf16_pct, dtype)} ({result.reference_source})"
            )
    total = sum(len(v) for *_, v in report)
    from llmb.results.compare import regressed

    bad = sum(1 for *_, vs in report for v in vs if regressed([v]))
    parts.append(f"\n{bad} of {total} comparisons regressed or had no result to compare (threshold {threshold:.0%}).")
    return "\n".join(parts)
