"""Users read the published recipe's own words: no "seed" for a recipe document.

Internally llmb calls NVIDIA's published recipe documents (the per-workload
READMEs of the LLM Benchmarking Collection) "seeds"; users know them as the
published recipe or the recipe README. This test runs what a user runs
(``--help`` of every command, ``list``, ``plan`` and ``plan --json`` for every
published row, ``results`` and ``compare`` on logs, and the README and docs)
and refuses the word anywhere it is not the random seed (``--seed``,
``seed=1234``, "random seed"). It also checks that the run summary says in
words where its TFLOP/s/GPU come from, not a bare ``(log)`` / ``(computed)``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import click
import pytest
from experiment_dirs import make_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

SEED = re.compile(r"\bseed(?:s|ed|ing)?\b", re.I)
# The random seed, in the few forms users meet it: the option, "random seed", a value (seed=1234,
# seed 1234, "seed": 1234 in JSON), and the run option's name in a sweep file's list of keys.
RANDOM_SEED = re.compile(
    r"--seed\b"
    r"|\brandom seeds?\b"
    r"|\bseed\"?\s*[=:]?\s*\d+"
    r"|\bseed=|\bseeded (?:per|by)\b"
    r"|\bseed \(the random seed\)",
    re.I,
)

NH = "pretrain_nemotronh_56b_fp8_gpus256_tp8_pp1_cp1_vpNone_mbs1_gbs768"
MB = "pretrain_llama3_8b_fp8_gpus8_tp1_pp1_cp1_vpNone_ep1_etpNone_mbs2_gbs128"
NEMO2 = "pretrain_llama3.1_8b_fp8_8"  # llmb-run's NeMo 2 name: no GPU type


def seed_words(text: str) -> list[str]:
    """Each "seed" in ``text`` that is not the random seed, with its context."""
    allowed = [m.span() for m in RANDOM_SEED.finditer(text)]
    return [
        text[max(0, m.start() - 50) : m.end() + 30].replace("\n", " ")
        for m in SEED.finditer(text)
        if not any(a <= m.start() and m.end() <= b for a, b in allowed)
    ]


def test_the_word_check_tells_the_random_seed_from_a_recipe_document():
    assert seed_words("--seed N: the seed of weights and data") == [
        "--seed N: the seed of weights and data"
    ]
    assert not seed_words(
        '--seed 7, random seed, seed=1234, "seed": 1234, PYTHONHASHSEED, seed_table'
    )
    assert seed_words("the seed publishes no figures") and seed_words("Seed errata of llama4")
    assert seed_words("in the seeds' layout") and seed_words("seeds/llama31-nemo2.md")


def _commands(group: click.Group, ctx: click.Context, path: tuple[str, ...] = ()):
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        yield (*path, name)
        if isinstance(command, click.Group):
            yield from _commands(
                command, click.Context(command, parent=ctx, info_name=name), (*path, name)
            )


def _published_rows(host):
    """A plan request for every published row: each series at each GPU count it lists (both ends of a
    range), and each published figure."""
    requests = set()
    for workload in host.workloads().values():
        for variant in workload.variants:
            for series in variant.series:
                counts = {series.min_gpus, series.max_gpus, *series.listed_gpus}
                for dtype in series.dtypes:
                    for gpus in counts:
                        requests.add(
                            (
                                workload.name,
                                variant.name,
                                series.size,
                                series.gpu,
                                dtype,
                                gpus,
                                series.scaling,
                            )
                        )
        for ref in workload.references:
            for dtype in ref.dtype.split("/"):
                requests.add(
                    (workload.name, ref.variant, ref.size, ref.gpu, dtype, ref.gpus, ref.scaling)
                )
    for workload, variant, size, gpu, dtype, gpus, scaling in sorted(requests):
        yield (
            workload,
            "--variant",
            variant,
            "--size",
            size,
            "--gpu",
            gpu,
            "--dtype",
            dtype,
            "--gpus",
            str(gpus),
            *(["--strong-scaling"] if scaling == "strong" else []),
        )


def _leaks(outputs: dict[str, str]) -> dict[str, list[str]]:
    return {where: found for where, text in outputs.items() if (found := seed_words(text))}


def test_help_of_every_command_says_recipe_not_seed(cli):
    from llmb.cli import cli as group

    outputs = {"--help": cli("--help").out}
    for path in _commands(group, click.Context(group, info_name="llmb")):
        result = cli(*path, "--help")
        assert result.code == 0, (path, result.err)
        outputs[" ".join(path)] = result.out
    assert {"plan", "run", "results", "compare", "certify status", "config show"} <= set(outputs)
    assert _leaks(outputs) == {}


def test_list_and_plan_of_every_published_row_say_recipe_not_seed(cli, host):
    outputs = {
        "list": cli("list").out,
        "list --json": cli("list", "--json").out,
        "plugins": cli("plugins").out,
        "plugins --json": cli("plugins", "--json").out,
    }
    for workload in host.workloads():
        outputs[f"list {workload}"] = cli("list", workload).out
        outputs[f"list {workload} --json"] = cli("list", workload, "--json").out
    for request in _published_rows(host):
        for extra in ((), ("--json",)):
            result = cli("plan", *request, *extra)
            assert result.code == 0, (request, result.err)
            outputs[" ".join(("plan", *request, *extra))] = result.out + result.err
    assert len(outputs) > 200
    assert _leaks(outputs) == {}


@pytest.fixture
def experiments(tmp_path, monkeypatch):
    """$LLMB_INSTALL with a run of each status and kind: a successful, a failed and a log-less run, NeMo 2
    and Megatron-Bridge logs, and a run in llmb-run's NeMo 2 layout that names no GPU type."""
    root = tmp_path / "install"
    monkeypatch.setenv("LLMB_INSTALL", str(root))
    monkeypatch.setenv("LLMB_LOG_FORMAT", "json")
    nh = root / "workloads" / "nemotronh" / "experiments"
    llama = root / "workloads" / "llama31" / "experiments"
    make_run(
        nh,
        NH,
        loggen.nemo2_lines(range(0, 50), step_s=dict.fromkeys(range(50), 15.892), gbs=768),
        recipe={
            "workload": "nemotronh",
            "size": "56b",
            "gpu": "h100",
            "dtype": "fp8",
            "gpus": 256,
            "gbs": 768,
            "seq_len": 8192,
        },
    )
    make_run(nh, NH, [*loggen.nemo2_lines(range(0, 20), gbs=768), loggen.OOM], stamp="1766139999")
    make_run(llama, MB, loggen.megatron_bridge_lines(range(1, 51)))
    make_run(llama, MB, None, stamp="1766140000")
    make_run(
        llama,
        NEMO2,
        loggen.nemo2_lines(range(50), step_s=dict.fromkeys(range(50), 10.08)),
        stamp="20251106101010",
    )
    return root


def test_results_and_compare_say_recipe_not_seed(cli, experiments, tmp_path):
    runs = sorted(str(p.parent.parent) for p in experiments.rglob("log-*.out"))
    baseline = tmp_path / "baseline.json"
    outputs = {}
    for args in (
        ("results",),
        ("results", "--gpu", "h100"),
        ("results", "--format", "json"),
        ("results", "--format", "csv"),
        ("compare", *runs),
        ("compare", *runs, "--gpu", "h100"),
        ("compare", *runs, "--json"),
        ("compare", *runs, "--gpu", "h100", "--json"),
    ):
        result = cli(*args)
        outputs[" ".join(args)] = result.out + result.err
    baseline.write_text(cli("results", "--gpu", "h100", "--json").out)
    result = cli("compare", *runs, "--gpu", "h100", "--baseline", str(baseline))
    outputs["compare --baseline"] = result.out + result.err
    assert _leaks(outputs) == {}
    rows = json.loads(outputs["results --format json"])
    assert {r["status"] for r in rows} >= {"success", "failed", "no_log"}
    assert "REGRESS" in outputs["compare --baseline"] or "PASS" in outputs["compare --baseline"]


def test_the_run_summary_says_where_its_tflops_come_from():
    """Not a bare ``(log)`` / ``(computed)``: words a reader understands, which the README explains."""
    from llmb.lifecycle.follow import summary
    from llmb.runs.jobs import Job, JobStatus

    job = Job(
        id="local-1",
        backend="local",
        workload="nemotronh",
        experiment="x",
        run_dir="/r",
        log="/r/log",
        ranks=8,
        submitted_at="2026-11-23T00:00:00Z",
    )
    row = {
        "status": "success",
        "window": "11-44",
        "samples_in_window": 34,
        "time_mean_ms": 1000.0,
        "time_std_dev_ms": 1.0,
        "tokens_per_s": 1e6,
        "tflops_per_gpu_mean": 900.0,
        "days_to_train_1t": 11.6,
        "dtype": "bf16",
        "mfu_pct": 45.48,
    }
    shown = {
        source: summary(
            JobStatus(job, "SUCCEEDED", None, None, {"result": {**row, "tflops_source": source}})
        )
        for source in ("log", "computed")
    }
    assert "900.00 TFLOP/s/GPU (from the log)" in shown["log"]
    assert "900.00 TFLOP/s/GPU (from model FLOPs)" in shown["computed"]
    assert not re.search(r"\((?:log|computed)\)", "".join(shown.values()))
    readme = (ROOT / "README.md").read_text()
    assert (
        "`(from the log)`, the framework's own" in readme
        and "`(from model FLOPs)`, llmb's" in readme
    )


def test_readme_and_docs_say_recipe_not_seed():
    pages = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted(ROOT.glob("plugins/*/README.md")),
    ]
    assert len(pages) > 10
    assert _leaks({str(p.relative_to(ROOT)): p.read_text() for p in pages}) == {}
