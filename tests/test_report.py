"""``llmb report``: series, efficiency, published figures, and the page as a browser shows it."""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from experiment_dirs import make_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loggen  # noqa: E402
from llmb.report.series import build_report, efficiency_curve  # noqa: E402

pytest.importorskip("matplotlib", reason="llmb report draws with matplotlib (./dev.sh installs it)")

EXP = "pretrain_llama3_8b_bf16_gpus{n}_tp1_pp1_cp2_vpNone_mbs1_gbs{gbs}"
STEP_S = {8: (12.40, 12.60), 16: (12.50, 12.70), 32: (12.90, 13.10)}  # two repeats per GPU count


def _recipe(n: int) -> dict:
    return {
        "workload": "llama31",
        "variant": "nemo2",
        "size": "8b",
        "gpu": "h100",
        "dtype": "bf16",
        "gpus": n,
        "gbs": 16 * n,
        "seq_len": 8192,
    }


@pytest.fixture
def experiments(tmp_path):
    """Llama 3.1 8B NeMo 2 H100 BF16 (the seed publishes 8 … 128 GPUs) at 8, 16
    and 32 GPUs, twice each, plus one run that ran out of memory."""
    root = tmp_path / "install" / "workloads" / "llama31" / "experiments"
    for n, repeats in STEP_S.items():
        for index, seconds in enumerate(repeats):
            make_run(
                root,
                EXP.format(n=n, gbs=16 * n),
                loggen.nemo2_lines(
                    range(0, 50),
                    step_s=dict.fromkeys(range(50), seconds),
                    # what NeMo 2 logs for 8b at these step times (loggen's default 1,200 is above
                    # the H100's BF16 peak of 989: an implausible run)
                    tflops=dict.fromkeys(range(50), 610.0),
                    gbs=16 * n,
                ),
                stamp=f"17661{n:03d}{index}",
                recipe=_recipe(n),
            )
    make_run(
        root,
        EXP.format(n=64, gbs=1024),
        [*loggen.nemo2_lines(range(0, 12), gbs=1024), loggen.OOM],
        stamp="1766199999",
        recipe=_recipe(64),
    )
    return tmp_path / "install"


# ------------------------------------------------------------------ series


def test_efficiency_formulas():
    weak = dict(efficiency_curve("weak", [(4, 110.0), (1, 100.0), (2, 125.0)]))
    assert weak == {1: 1.0, 2: 100.0 / 125.0, 4: 100.0 / 110.0}
    strong = dict(efficiency_curve("strong", [(8, 400.0), (16, 250.0)]))
    assert strong == {8: 1.0, 16: (400.0 * 8) / (250.0 * 16)}
    assert efficiency_curve("weak", [(8, 1.0)]) == ()


def test_series_group_repeats_and_carry_the_published_figures(cli, experiments, monkeypatch, host):
    monkeypatch.setenv("LLMB_INSTALL", str(experiments))
    rows = cli("results", "--format", "json").json()
    data = build_report(rows, host.workloads())
    assert data.runs == 7
    [series] = data.series
    assert series.label == "llama31 nemo2 8b h100 bf16, weak scaling"
    assert [p.gpus for p in series.points] == [8, 16, 32]
    base = statistics.fmean(STEP_S[8]) * 1000
    for point in series.points:
        times = [s * 1000 for s in STEP_S[point.gpus]]
        assert point.step_time_ms.mean == pytest.approx(statistics.fmean(times))
        assert point.step_time_ms.std == pytest.approx(statistics.stdev(times))
        assert point.efficiency == pytest.approx(base / statistics.fmean(times))
        assert len(point.runs) == 2
        # the seed's row for this GPU count, and the run's MFU from the seed's formula
        assert point.published.gpus == point.gpus and point.published.variant == "nemo2"
        assert point.mfu_pct.mean is not None
    seed = [(r.gpus, r.step_time_s) for r in series.published]
    assert seed == [(8, 12.27), (16, 12.3), (32, 12.32), (64, 12.33), (128, 12.33)]
    assert dict(series.published_efficiency)[128] == pytest.approx(12.27 / 12.33)
    [failed] = data.unplotted
    assert failed.run.gpus == 64 and "out of memory" in failed.why.lower()


# ------------------------------------------------------------------ the command and the page


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(
                "CI must render the report, but chromium is not installed (./dev.sh installs it)"
            )
        pytest.skip("chromium is not installed here (apt-get install chromium)")
    return found


def _headless(page: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            f"--user-data-dir={tmp_path / 'chromium-profile'}",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=5000",
            *args,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def render(page: Path, tmp_path: Path, *args: str) -> tuple[str, list[str]]:
    """The DOM after load, and the console messages, as headless Chromium sees the file."""
    proc = _headless(page, tmp_path, *args, "--dump-dom")
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return proc.stdout, console


def render_screenshot(page: Path, shot: Path, tmp_path: Path, width: int, height: int) -> None:
    """A PNG of the page as a ``width`` × ``height`` window shows it, at one pixel per CSS pixel."""
    _headless(
        page,
        tmp_path,
        f"--window-size={width},{height}",
        "--force-device-scale-factor=1",
        "--hide-scrollbars",
        f"--screenshot={shot}",
    )
    assert shot.is_file(), f"chromium wrote no screenshot at {shot}"


def _images(dom: str) -> list[dict[str, str]]:
    return [
        dict(re.findall(r'([\w-]+)="([^"]*)"', tag)) for tag in re.findall(r"<img\b[^>]*>", dom)
    ]


def test_render_check_catches_a_broken_page(tmp_path):
    """The browser check below can fail: a console error and an undecodable image are seen."""
    from llmb.report.html import MARK_LOADED

    page = tmp_path / "broken.html"
    page.write_text(
        f"<!DOCTYPE html><html><head><script>{MARK_LOADED}</script></head><body>"
        f'<img src="data:image/png;base64,AAAA" alt="x"><script>console.error("boom")</script>'
        f"</body></html>"
    )
    dom, console = render(page, tmp_path)
    assert any("boom" in line for line in console)
    assert [img.get("data-loaded") for img in _images(dom)] == ["no"]


def test_report_page_loads_cleanly_and_shows_every_plot(llmb_proc, experiments, tmp_path):
    out = tmp_path / "report"
    result = llmb_proc(
        "report", "--out", str(out), "--json", env={"LLMB_INSTALL": str(experiments)}, timeout=120
    )
    assert result.code == 0, result.err
    written = result.json()
    names = [Path(p).name for p in written["plots"]]
    assert names == [
        "step_time.png",
        "tokens_per_s.png",
        "tokens_per_gpu.png",
        "scaling_efficiency.png",
        "mfu.png",
    ]
    for path in written["plots"]:
        assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (written["series"], written["runs"]) == (1, 7)

    dom, console = render(out / "index.html", tmp_path)
    assert console == []
    images = _images(dom)
    assert len(images) == len(names)
    assert all(img.get("data-loaded") == "yes" for img in images), images
    assert all(img["src"].startswith("data:image/png;base64,") for img in images)  # self-contained
    for heading in (
        "Step time vs GPU count",
        "Tokens/s vs GPU count",
        "Tokens/s per GPU vs GPU count",
        "MFU vs GPU count",
        "Scaling efficiency vs GPU count",
        "Runs without a result",
    ):
        assert heading in dom
    assert "12,270.0" in dom  # the seed's 8-GPU step time beside the measured one

    summary = (out / "summary.md").read_text()
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", summary)
    assert linked == names and all((out / n).is_file() for n in linked)
    assert "| 8 | 2 | 12,500.0 ± 141.4 |" in summary
    assert "out of memory" in summary.lower()


def test_report_from_a_results_file_and_a_proxy_without_published_figures(llmb_proc, tmp_path):
    rows = [
        {
            "filename": f"r{n}",
            "status": "success",
            "time_mean_ms": 100.0 + n,
            "workload": "llama31",
            "variant": "megatron-bridge",
            "size": "8b",
            "gpu": "h100",
            "dtype": "bf16",
            "gpus": n,
            "scaling": "strong",
            "proxy": True,
            "tokens_per_s": 1000.0 * n,
            "mfu_pct": None,
        }
        for n in (1, 2, 4)
    ]
    source = tmp_path / "rows.json"
    source.write_text(json.dumps(rows))
    out = tmp_path / "proxy-report"
    result = llmb_proc("report", str(source), "--out", str(out))
    assert result.code == 0, result.err
    page = (out / "index.html").read_text()
    assert "proxy run: not compared with the published figures" in page
    assert "MFU vs GPU count: no run has an MFU" in page
    assert not (out / "mfu.png").exists()
    # strong scaling: T(1)·1 / (T(4)·4)
    assert f"{101.0 / (104.0 * 4):.1%}" in page


def test_gpu_gives_foreign_logs_their_gpu_type_and_mfu(llmb_proc, tmp_path):
    """A log in the replaced tool's layout (``pretrain_llama3.1_8b_fp8_8``: no GPU type in its name) has
    no MFU until --gpu says its GPU type, as for llmb results and llmb compare; the page says where the
    GPU type came from."""
    experiments = tmp_path / "experiments"
    make_run(
        experiments,
        "pretrain_llama3.1_8b_fp8_8",
        loggen.nemo2_lines(range(50), step_s=dict.fromkeys(range(50), 10.08)),
        stamp="20251106101010",
    )
    env = {"LLMB_INSTALL": str(tmp_path / "install")}  # no cluster file: no GPU type from it
    plain = llmb_proc("report", str(experiments), "--out", str(tmp_path / "plain"), env=env)
    assert plain.code == 0, plain.err
    assert "MFU vs GPU count: no run has an MFU" in (tmp_path / "plain" / "index.html").read_text()

    out = tmp_path / "h100"
    given = llmb_proc(
        "report", str(experiments), "--gpu", "h100", "--out", str(out), "--json", env=env
    )
    assert given.code == 0, given.err
    assert str(out / "mfu.png") in json.loads(given.out)["plots"]
    summary = (out / "summary.md").read_text()
    assert "### llama31 nemo2 8b h100 fp8, weak scaling" in summary
    assert "- GPU type h100 taken from --gpu: the logs do not record it" in summary
    # MFU and the published 8-GPU step time (9.33 s) beside the measured 10.08 s
    assert re.search(
        r"\| 8 \| 1 \| 10,080\.0 \| [\d,]+ \| [\d,.]+ \| \d+\.\d\d \| - \| 9,330\.0 \| \+8\.0% \|",
        summary,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sweep", "last", "x.json"], "either --sweep ID or RESULTS"),
        (["--sweep", "sweep-nope"], "sweep-nope"),
        ([], "no runs found"),
    ],
)
def test_report_mistakes_are_usage_errors(llmb_proc, tmp_path, args, message):
    result = llmb_proc(
        "report", *args, "--out", str(tmp_path / "r"), env={"LLMB_INSTALL": str(tmp_path / "empty")}
    )
    assert result.code == 2, result
    assert message in result.err and "Traceback" not in result.err


def test_report_without_matplotlib_says_how_to_install_it(llmb_proc, tmp_path):
    shadow = tmp_path / "shadow" / "matplotlib"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    result = llmb_proc(
        "report", "--out", str(tmp_path / "r"), env={"PYTHONPATH": str(shadow.parent)}
    )
    assert result.code == 2
    assert "pip install 'llmb[report]'" in result.err and "Traceback" not in result.err


@pytest.mark.parametrize("name", ["$\\frac{$", "x" * 20_000])
def test_labels_from_data_are_drawn_as_text_and_bounded(cli, experiments, monkeypatch, host, name):
    from llmb.report.plots import draw_plots

    monkeypatch.setenv("LLMB_INSTALL", str(experiments))
    rows = cli("results", "--format", "json").json()
    for row in rows:  # a results file is anyone's text: a "$" would start matplotlib's math parser
        row.update(workload=name, size=name, gpu=name, dtype=name)
    data = build_report(rows, host.workloads())
    plots, _ = draw_plots(data)
    assert plots and all(
        plot.png.startswith(b"\x89PNG") and len(plot.png) < 2_000_000 for plot in plots
    )
    assert all(len(series.label) < 300 for series in data.series)


def test_a_tuned_run_is_its_own_series_without_the_official_published_curve(host):
    """A run whose layout differs from the recipe's (issue 31) is never drawn as the official configuration."""
    official = {
        "filename": "a",
        "status": "success",
        "workload": "llama31",
        "variant": "nemo2",
        "size": "8b",
        "gpu": "h100",
        "dtype": "bf16",
        "gpus": 8,
        "scaling": "weak",
        "time_mean_ms": 12400.0,
    }
    tuned = {**official, "filename": "b", "tuned": "cp 2 -> 1, mbs 1 -> 4"}
    data = build_report([official, tuned], host.workloads())
    plain, retuned = data.series
    assert (plain.key.tuned, retuned.key.tuned) == (None, "cp 2 -> 1, mbs 1 -> 4")
    assert plain.published and not retuned.published
    assert retuned.label.endswith("tuned (cp 2 -> 1, mbs 1 -> 4)")
    assert any(
        n.startswith("tuned (cp 2 -> 1, mbs 1 -> 4): not the official") for n in retuned.notes
    )


# ------------------------------------------------------------------ tick labels


def _rows(
    points: dict[int, tuple[float, float, float | None]], scaling: str = "weak"
) -> list[dict]:
    """Result rows as a results file holds them: GPUs -> (step time ms, tokens/s, MFU %)."""
    return [
        {
            "filename": f"run{n}",
            "status": "success",
            "workload": "llama31",
            "variant": "megatron-bridge",
            "size": "8b",
            "gpu": "h100",
            "dtype": "bf16",
            "gpus": n,
            "scaling": scaling,
            "proxy": True,
            "time_mean_ms": step_ms,
            "tokens_per_s": tokens,
            "mfu_pct": mfu,
        }
        for n, (step_ms, tokens, mfu) in points.items()
    ]


# tokens/s within one decade (the 6×10³: minor ticks labelled), and over six decades down to
# a CPU proxy's fractions (decade ticks only, some below 1)
ONE_DECADE = _rows(
    {1: (1510.0, 5200.0, 41.3), 2: (1580.0, 6100.0, 40.9), 4: (1660.0, 6900.0, 39.7)}
)
SIX_DECADES = _rows(
    {
        1: (0.9, 0.35, 0.0041),
        4: (14.0, 12.0, 0.021),
        16: (2300.0, 480.0, 0.9),
        64: (41000.0, 9e4, 7.5),
    },
    scaling="strong",
)


def _number(label: str) -> float:
    """A tick label's value: ``6,000`` is 6000, ``95%`` is 0.95, ``−20%`` (matplotlib's minus) is -0.2."""
    text = label.replace(",", "").replace("\N{MINUS SIGN}", "-")
    return float(text[:-1]) / 100 if text.endswith("%") else float(text)


@pytest.mark.parametrize("source", ["experiments", "one decade", "six decades"])
def test_every_tick_label_of_every_plot_is_a_plain_number(
    cli, experiments, monkeypatch, host, source
):
    """Tick labels are drawn as text (math parsing is off), so matplotlib's log formatter showed its
    source, ``$\\mathdefault{6\\times10^{3}}$``: every label of both axes, major and minor, of every plot
    is a plain number, and it is the value of its tick."""
    from llmb.report.plots import PLOT_NAMES, draw_figures, text_as_drawn

    if source == "experiments":
        monkeypatch.setenv("LLMB_INSTALL", str(experiments))
        rows = cli("results", "--format", "json").json()
    else:
        rows = ONE_DECADE if source == "one decade" else SIX_DECADES
    data = build_report(rows, host.workloads())
    seen: dict[tuple[str, str, bool], list[str]] = {}
    with text_as_drawn():
        drawings, _ = draw_figures(data)
        for drawing in drawings:
            drawing.figure.canvas.draw()
            [axes] = drawing.figure.axes
            for name, axis in (("x", axes.xaxis), ("y", axes.yaxis)):
                for minor in (False, True):
                    labels = (axes.get_xticklabels if name == "x" else axes.get_yticklabels)(
                        minor=minor
                    )
                    texts = [label.get_text() for label in labels]
                    assert not [t for t in texts if "$" in t or "\\" in t], (drawing.name, texts)
                    for loc, text in zip(axis.get_ticklocs(minor=minor), texts, strict=True):
                        if text:
                            assert _number(text) == pytest.approx(loc, rel=1e-6), (
                                drawing.name,
                                text,
                            )
                    seen[drawing.name, name, minor] = [t for t in texts if t]
    drawn = {name for name, _, _ in seen}
    assert drawn == set(PLOT_NAMES)
    assert all(seen[name, "x", False] for name in drawn)  # the GPU counts
    assert all(seen[name, "y", False] or seen[name, "y", True] for name in drawn)
    tokens = seen["tokens_per_s", "y", False] + seen["tokens_per_s", "y", True]
    if source == "one decade":
        assert "6,000" in tokens
    if source == "six decades":
        assert {"1", "10", "100", "1,000", "10,000"} <= set(tokens) and "0.1" in tokens
    if source == "experiments":
        assert "100,000" in tokens, tokens


def test_a_linear_axis_starts_at_zero_a_log_one_says_so_and_tokens_are_also_per_gpu(
    cli, experiments, monkeypatch, host
):
    """Issue 43: the y-axes did not start at zero without saying so, and no plot had the per-GPU
    tokens/s NVIDIA's performance summary publishes."""
    from llmb.report.plots import draw_figures, text_as_drawn

    monkeypatch.setenv("LLMB_INSTALL", str(experiments))
    data = build_report(cli("results", "--format", "json").json(), host.workloads())
    with text_as_drawn():
        drawings, _ = draw_figures(data)
        axes = {d.name: d.figure.axes[0] for d in drawings}
        for name, ax in axes.items():
            if ax.get_yscale() == "log":
                assert "log scale" in ax.get_ylabel(), name
            else:
                assert ax.get_ylim()[0] == 0, (name, ax.get_ylim())
        assert axes["tokens_per_s"].get_yscale() == "log"
        # each point per GPU is the total over the GPUs, measured and published alike
        total, per_gpu = _curves(axes["tokens_per_s"]), _curves(axes["tokens_per_gpu"])
        assert total.keys() == per_gpu.keys() and any("published" in label for label in total)
        for label, (gpus, values) in total.items():
            assert list(per_gpu[label][0]) == list(gpus)
            expected = [v / n for v, n in zip(values, gpus, strict=True)]
            assert list(per_gpu[label][1]) == pytest.approx(expected), label


def _curves(ax) -> dict[str, tuple]:
    """Each curve of a plot by its legend label: (x, y) of its line (an error bar's data line)."""
    curves = {}
    for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
        line = handle.lines[0] if hasattr(handle, "lines") else handle
        curves[label] = (line.get_xdata(), line.get_ydata())
    return curves


# ------------------------------------------------------------------ the page at 1280 px

DATA_PATH = (  # within the 400 characters a failure's reason keeps
    "/lustre/fsw/coreai_dlalgo_llm/llmb_workloads/llama31_pretrain/datasets/slimpajama_627b_llama3/"
    "train_split_000017_of_000128/text_document.idx-"
    + "0123456789abcdef"
    * 8  # a token no rule breaks
)
MISSING_DATA = [
    "[rank0]: Traceback (most recent call last):",
    '[rank0]:   File "/opt/NeMo/nemo/collections/llm/gpt/data/pre_training.py", line 212, in build',
    f"[rank0]: FileNotFoundError: [Errno 2] No such file or directory: '{DATA_PATH}'",
]
# what makes a page wider than its window, measured once it has loaded: the document's scroll width
# and client width, the right edge of the widest table, the most any cell's content overflows its cell
PROBE = (
    'addEventListener("load",function(){var d=document.documentElement,r=0,o=0;'
    'for(var t of document.querySelectorAll("table"))r=Math.max(r,t.getBoundingClientRect().right);'
    'for(var c of document.querySelectorAll("td,th"))o=Math.max(o,c.scrollWidth-c.clientWidth);'
    'd.setAttribute("data-scroll-width",d.scrollWidth);d.setAttribute("data-client-width",d.clientWidth);'
    'd.setAttribute("data-scroll-height",d.scrollHeight);'
    'd.setAttribute("data-table-right",Math.ceil(r));d.setAttribute("data-cell-overflow",o)})'
)
WINDOW_WIDTH = 1280


def _probed(page: Path, out: Path) -> Path:
    """A copy of ``page`` that measures itself (``PROBE``), its own Content-Security-Policy kept and
    allowing the probe by its hash, as it allows the page's own script."""
    import base64
    import hashlib

    digest = base64.b64encode(hashlib.sha256(PROBE.encode()).digest()).decode()
    text = page.read_text()
    assert text.count("script-src ") == 1 and text.count("</head>") == 1
    # the policy is an attribute's value: its quotes are written &#x27;
    text = text.replace("script-src ", f"script-src &#x27;sha256-{digest}&#x27; ").replace(
        "</head>", f"<script>{PROBE}</script>\n</head>"
    )
    out.write_text(text)
    return out


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def test_report_page_fits_a_1280_px_window(llmb_proc, experiments, tmp_path):
    """The table of runs without a result was wider than a 1280-px window, its reason column off-screen:
    the page's tables wrap long cells (a path, a run name) inside the page, and a screenshot at that
    width shows it."""
    root = experiments / "workloads" / "llama31" / "experiments"
    make_run(
        root,
        EXP.format(n=128, gbs=2048),
        [*loggen.nemo2_lines(range(0, 3), gbs=2048), *MISSING_DATA],
        stamp="1766200000",
        recipe=_recipe(128),
    )
    out = tmp_path / "report"
    result = llmb_proc("report", "--out", str(out), env={"LLMB_INSTALL": str(experiments)})
    assert result.code == 0, result.err
    page = out / "index.html"
    # the whole reason is on the page, not cut (<wbr>: where a path may break first)
    assert DATA_PATH in page.read_text().replace("<wbr>", "")

    dom, console = render(
        _probed(page, tmp_path / "probed.html"), tmp_path, f"--window-size={WINDOW_WIDTH},900"
    )
    assert console == []
    measured = {
        key: int(value)
        for key, value in re.findall(
            r'data-(scroll-width|client-width|scroll-height|table-right|cell-overflow)="(\d+)"', dom
        )
    }
    assert len(measured) == 5, dom[:500]
    # the window is 1280 px wide (less a vertical scroll bar, where it takes room)
    assert WINDOW_WIDTH - 20 <= measured["client-width"] <= WINDOW_WIDTH
    assert measured["scroll-width"] <= measured["client-width"], measured
    assert measured["table-right"] <= measured["client-width"], measured
    assert measured["cell-overflow"] == 0, measured

    shot = tmp_path / "report-1280.png"
    render_screenshot(page, shot, tmp_path, WINDOW_WIDTH, measured["scroll-height"])
    width, height = _png_size(shot.read_bytes())
    assert (width, height) == (WINDOW_WIDTH, measured["scroll-height"])
    from PIL import Image  # matplotlib's own dependency

    with Image.open(shot) as image:
        pixels = image.convert("RGB")
    assert len(pixels.getcolors(1 << 20) or ()) > 100  # text, plots and tables, not a blank page
    # the body's right padding (1em) is bare page: nothing drawn past the tables' right edge
    margin = pixels.crop((width - 12, 0, width, height))
    assert margin.getcolors() == [(12 * height, (255, 255, 255))]
