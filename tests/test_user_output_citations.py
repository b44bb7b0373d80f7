"""What users are shown cites public documents by name, and a published
figure that an erratum corrects is shown corrected, marked, with the printed
one beside it: in plan, in plan --json and in the report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INTERNAL = re.compile(r"seeds/|field[- ]facts|shared/|\.\./shared")


def _series_requests(host):
    for workload in host.workloads().values():
        for variant in workload.variants:
            for series in variant.series:
                for dtype in series.dtypes:
                    yield (
                        workload.name,
                        "--variant",
                        variant.name,
                        "--size",
                        series.size,
                        "--gpu",
                        series.gpu,
                        "--dtype",
                        dtype,
                        "--gpus",
                        str(series.min_gpus),
                        *(["--strong-scaling"] if series.scaling == "strong" else []),
                    )


def test_no_output_cites_a_file_users_do_not_have(cli, host):
    outputs = []
    for workload in host.workloads():
        outputs += [cli("list", workload), cli("list", workload, "--json")]
    for request in _series_requests(host):
        outputs += [cli("plan", *request), cli("plan", *request, "--json")]
    outputs += [cli("plugins"), cli("plugins", "--json"), cli("--help"), cli("run", "--help")]
    assert len(outputs) > 100
    leaks = {
        m.group(0)
        for r in outputs
        for m in re.finditer(r".{0,40}(?:" + INTERNAL.pattern + r").{0,20}", r.out + r.err)
    }
    assert not leaks


def test_sources_name_the_public_recipe_document(cli):
    plan = cli(
        "plan",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "b200",
        "--dtype",
        "fp8",
        "--gpus",
        "8",
        "--json",
    ).json()
    assert re.fullmatch(
        r"Llama 3\.1 Megatron-Bridge recipe \(NVIDIA LLM Benchmarking Collection, nemo:25\.11\.01\) "
        r"table \d+, rows? [\d, ]+",
        plan["source"],
    )
    assert (
        plan["model_flops_formula"]
        == "Llama 3.1 NeMo 2 recipe (NVIDIA LLM Benchmarking Collection, "
        "nemo:25.02.01), Notes"
    )


def test_readme_and_docs_link_only_inside_the_repository():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)", page.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            resolved = (page.parent / target).resolve()
            assert resolved.is_relative_to(ROOT), (page.name, target)
            assert resolved.exists(), (page.name, target)


LLAMA4_GB200_BF16_128 = ("plan", "llama4", "--gpu", "gb200", "--dtype", "bf16", "--gpus", "128")


def test_the_llama4_erratum_figure_is_shown_corrected_and_marked(cli):
    text = cli(*LLAMA4_GB200_BF16_128).out
    assert "MFU 37.43% (corrected, erratum [llama4-mfu-peak]; printed 18.71%)" in text
    expected = cli(*LLAMA4_GB200_BF16_128, "--json").json()["expected"]
    assert expected["mfu_pct"] == 37.43 and expected["printed_mfu_pct"] == 18.71
    assert expected["erratum"] == "llama4-mfu-peak"
    # a figure no erratum touches is shown as printed, unmarked
    fp8 = cli(
        "plan", "llama4", "--gpu", "gb200", "--dtype", "fp8", "--gpus", "128", "--json"
    ).json()["expected"]
    assert fp8["mfu_pct"] == 23.9 and fp8["printed_mfu_pct"] is None


def test_corrections_are_llmbs_own_formula_at_the_published_step_time(host):
    """The erratum texts' own numbers: 37.43% for Llama 4 at 7.781 s; 54.97% for the 405B at 512 GPUs."""
    corrected = {
        (w.name, r.size, r.gpu, r.dtype, r.gpus): (r.mfu_pct, r.printed_mfu_pct)
        for w in host.workloads().values()
        for r in w.references
        if r.printed_mfu_pct is not None
    }
    assert corrected[("llama4", "400b", "gb200", "bf16", 128)] == (37.43, 18.71)
    assert corrected[("llama31", "405b", "h100", "bf16", 512)] == (54.97, 55.47)
    assert all(w == "llama31" and "405b" in s or w == "llama4" for w, s, *_ in corrected)


def test_the_report_plots_and_names_the_corrected_figure(llmb_proc, tmp_path):
    pytest.importorskip("matplotlib", reason="llmb report draws with matplotlib")
    rows = [
        {
            "filename": f"r{n}",
            "status": "success",
            "time_mean_ms": 7800.0,
            "workload": "llama4",
            "variant": "nemo2",
            "size": "400b",
            "gpu": "gb200",
            "dtype": "bf16",
            "gpus": n,
            "scaling": "weak",
            "proxy": False,
            "tokens_per_s": 1.0e6,
            "mfu_pct": 37.0,
        }
        for n in (128, 256)
    ]
    source = tmp_path / "rows.json"
    source.write_text(json.dumps(rows))
    out = tmp_path / "report"
    result = llmb_proc("report", str(source), "--out", str(out))
    assert result.code == 0, result.err
    page = (out / "index.html").read_text()
    assert "at 128 GPUs: 37.43% (corrected, erratum [llama4-mfu-peak]; printed 18.71%)" in page
    assert not INTERNAL.search(page)
