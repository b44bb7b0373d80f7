"""Tables fit a narrow terminal by each command's priorities, not by whatever is widest (issue 34): under a
real pseudo-terminal at 80 columns, a 1-GPU and a 2-GPU run stay apart in ``results``, ``compare``,
``status`` and a sweep's table; ``compare --baseline`` keeps AGAINST; ``certify status`` keeps STEP CV and
PERFORMANCE; a path (a run directory, a --full-names log) is wrapped whole, never cut; ``config show``
keeps FROM; what goes to stderr (compare's closing line, certify's notes, an error) is wrapped too.

The runs are real: one proxy certification at 1 and 2 ranks (two tiny-proxy jobs) in a private install.
The renderer's own rules are checked on made-up rows below.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from conftest import _llmb_executable
from llmb.cli.output import Column, experiment_column, render_table
from narrow_terminal import environment as _environment
from narrow_terminal import too_wide as _too_wide
from narrow_terminal import under_pty as _under_pty

pytestmark = pytest.mark.skipif(
    shutil.which("script") is None, reason="util-linux script is not installed"
)


def _json(llmb: str, install: str, *args: str):
    out = subprocess.run(
        [llmb, *args, "--json"],
        capture_output=True,
        text=True,
        env=_environment(install),
        timeout=300,
    ).stdout
    return json.loads(out)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A private install holding a proxy certification of llama31 8b bf16 at 1 and 2 GPUs: two real
    tiny-proxy jobs (the local backend, one at a time), a sweep and a suite. Returns (llmb, install,
    {1: the 1-GPU job's status, 2: the 2-GPU job's})."""
    pytest.importorskip("torch", reason="the torch engine needs torch")
    llmb = _llmb_executable()
    root = tmp_path_factory.mktemp("priorities")
    install = str(root / "install")
    suite = root / "suite.yaml"
    suite.write_text("llama31_8b: {dtypes: [bf16], scales: [1, 2]}\n")
    done = subprocess.run(
        [llmb, "certify", "--file", str(suite), "--gpu", "h100", "--proxy", "tiny"],
        capture_output=True,
        text=True,
        env=_environment(install),
        timeout=900,  # a hang guard only
    )
    assert done.returncode == 0, done.stdout + done.stderr
    jobs = {}
    for listed in _json(llmb, install, "status"):
        gpus = 1 if "_gpus1_" in listed["experiment"] else 2
        jobs[gpus] = {**listed, **_json(llmb, install, "status", listed["job_id"])}
    assert sorted(jobs) == [1, 2], jobs
    return llmb, install, jobs


def _table(lines: list[str], title: str) -> tuple[str, list[str]]:
    """The header of the table whose first column is ``title``, and its rows."""
    start = next(n for n, line in enumerate(lines) if line.startswith(title))
    rows = []
    for line in lines[start + 2 :]:
        if not line.strip() or line.startswith("(left out"):
            break
        rows.append(line)
    return lines[start], rows


def _rows_of(lines: list[str], job_id: str, title: str = "EXPERIMENT") -> list[str]:
    return [line for line in _table(lines, title)[1] if job_id in line]


def _shown(llmb: str, install: str, *args: str) -> list[str]:
    lines = _under_pty(llmb, list(args), install)
    assert _too_wide(lines) == [], "\n".join(lines)
    return lines


@pytest.mark.parametrize("args", [["results"], ["compare"], ["status"]], ids=lambda a: "-".join(a))
def test_a_1_gpu_and_a_2_gpu_run_stay_apart(study, args):
    llmb, install, jobs = study
    lines = _shown(llmb, install, *args)
    text = "\n".join(lines)
    for gpus, job in jobs.items():
        rows = _rows_of(lines, job["job_id"], "JOB" if args == ["status"] else "EXPERIMENT")
        assert rows, text
        # the name keeps workload, size, dtype and GPU count: it is cut after them
        assert all(f"llama31_8b_bf16_gpus{gpus}" in row for row in rows), text
    assert "left out" in text  # the table did have to fit


def test_a_sweeps_table_tells_its_gpu_counts_apart(study):
    llmb, install, _ = study
    lines = _shown(
        llmb,
        install,
        "sweep",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        "1,2",
        "--repeats",
        "2",
        "--proxy",
        "tiny",
        "--dry-run",
    )
    text = "\n".join(lines)
    rows = [line for line in lines if "llama31 8b h100 bf16" in line]
    assert len(rows) == 4, text
    for row in rows:
        gpus = 1 if " 1 GPU " in row else 2
        assert f"llama31_8b_bf16_gpus{gpus}" in row, text
    # the task labels are whole: each repeat of each GPU count is its own row
    assert len({row.split("  ")[1] for row in rows}) == 4, text


def test_compare_with_a_baseline_keeps_against(study):
    llmb, install, jobs = study
    lines = _shown(llmb, install, "compare", "--baseline", jobs[1]["job_id"])
    text = "\n".join(lines)
    assert "AGAINST" in _table(lines, "EXPERIMENT")[0], text
    for job in jobs.values():
        rows = _rows_of(lines, job["job_id"])
        # each run's published row and baseline row, told apart
        assert any("baseline" in row for row in rows) and any("auto" in row for row in rows), text


def test_certify_status_keeps_the_gates_that_decide(study):
    llmb, install, _ = study
    lines = _shown(llmb, install, "certify", "status")
    text = "\n".join(lines)
    header = _table(lines, "WORKLOAD")[0]
    assert "PERFORMANCE" in header and "STEP CV" in header and "VERDICT" in header, text
    # the configuration keeps its dtype and GPU count
    assert any("8b h100 bf16 1 GPU" in line for line in lines), text
    assert any("8b h100 bf16 2 GPUs" in line for line in lines), text
    left_out = " ".join(line for line in lines if "left out" in line or line.startswith("  "))
    assert "LOSS" in left_out, text  # what gives way first: the run's own health gates


def test_a_jobs_run_directory_is_whole_on_a_line_of_its_own(study):
    """Too long for the line after its label, the run directory is on the next line, whole: the terminal
    wraps it and a triple-click copies it (issue 43: it was broken after a ``/`` or ``_``)."""
    llmb, install, jobs = study
    for job in jobs.values():
        lines = _shown(llmb, install, "status", job["job_id"])
        run_dir = job["experiment_dir"]
        assert run_dir.startswith(install), run_dir
        shown = "$LLMB_INSTALL" + run_dir[len(install) :]
        assert len(shown) > 80 - 14  # it does not fit after the label
        label = next(n for n, line in enumerate(lines) if line.startswith("  run dir"))
        assert lines[label] == "  run dir" and lines[label + 1] == " " * 14 + shown, "\n".join(
            lines
        )
        assert "\u2026" not in "\n".join(lines)


def _column_text(lines: list[str], title: str, next_title: str | None) -> str:
    """A table column's cells, their wrapped lines joined, spaces left out."""
    header = next(line for line in lines if title in line and "-" not in line)
    start = header.index(title)
    end = header.index(next_title) if next_title else None
    body = lines[lines.index(header) + 2 :]
    return "".join(line[start:end] for line in body).replace(" ", "")


def test_config_show_keeps_from_whole(study):
    llmb, install, _ = study
    wide = subprocess.run(
        [llmb, "config", "show", "--json"],
        capture_output=True,
        text=True,
        env=_environment(install),
        check=True,
    )
    assert json.loads(wide.stdout)["settings"]
    lines = _shown(llmb, install, "config", "show")
    text = "\n".join(lines)
    assert "FROM" in text and "\u2026" not in text, text
    # every FROM of the wide table is there, wrapped maybe
    piped = subprocess.run(
        [llmb, "config", "show"], capture_output=True, text=True, env=_environment(install)
    ).stdout.splitlines()
    header = next(line for line in piped if line.startswith("KEY"))
    start, end = header.index("FROM"), header.index("FLAG / VARIABLE")
    column = _column_text(lines, "FROM", "FLAG / VARIABLE")
    for line in piped[piped.index(header) + 2 :]:
        assert line[start:end].replace(" ", "") in column, text


@pytest.mark.parametrize(
    "args",
    [["results", "--full-names"], ["compare", "--full-names"], ["status", "--full-names"]],
    ids=lambda a: "-".join(a),
)
def test_full_names_are_whole_instead_of_widening(study, args):
    """--full-names: a whole experiment name is wrapped in its column (status); a path that the table
    cannot hold is marked in its cell (``[1]``) and printed whole under the table, on a line of its own
    after its mark (issue 43: every path whole on its own line)."""
    llmb, install, jobs = study
    lines = _shown(llmb, install, *args)
    if args[0] == "status":  # its EXPERIMENT column is the experiment's whole name
        column = _column_text(lines, "EXPERIMENT", "WORKLOAD")
        for job in jobs.values():
            assert job["experiment"] in column, "\n".join(lines)
        return
    for job in jobs.values():  # the log's whole path
        path = "$LLMB_INSTALL" + job["log"][len(install) :]
        marked = [line for line in lines if line.endswith(f"] {path}") and line.startswith("[")]
        assert len(marked) == 1, "\n".join(lines)
        mark = marked[0].split(" ", 1)[0]
        table = lines[: lines.index(marked[0])]
        assert any(line.startswith(f"{mark} ") for line in table), "\n".join(lines)


def test_what_goes_to_stderr_is_wrapped(study):
    llmb, install, _ = study
    # compare's closing line (exit 3: a proxy run is compared with nothing)
    lines = _shown(llmb, install, "compare")
    assert any(line.startswith("llmb: 2 runs could not be compared") for line in lines)
    # certify's notes, and an error's message
    lines = _shown(
        llmb, install, "certify", "--gpu", "h100", "--proxy", "tiny", "--scale", "2", "--dry-run"
    )
    assert any(line.startswith("note: ") for line in lines), "\n".join(lines)
    lines = _shown(llmb, install, "certify", "--gpu", "h100", "--dry-run")
    assert any(line.startswith("llmb: error: ") for line in lines), "\n".join(lines)


# The renderer's rules on made-up rows: no runs needed.

_NAMES = [
    "llama31_8b_bf16_gpus1_tp1_pp1_mbs1_gbs32_proxy-tiny",
    "llama31_8b_bf16_gpus2_tp1_pp1_mbs1_gbs64_proxy-tiny",
    "llama31_8b_bf16_gpus2_tp1_pp1_mbs2_gbs64_tuned_proxy-tiny",
]


def _made_up(width: int, against: bool = True) -> list[str]:
    rows = [
        [name, f"local-00000{n}", kind, "NOT_COMPARED", "199.1", "100.0%"]
        for n, name in enumerate(_NAMES)
        for kind in ("auto", "baseline")
    ]
    columns = [
        experiment_column(),
        "JOB",
        Column("AGAINST", drop=0 if against else 1),
        "OUTCOME",
        Column("STEP ms", drop=2),
        "VS REF",
    ]
    return render_table(columns, rows, width=width).split("\n")


def test_names_are_cut_at_their_end_never_where_they_differ():
    lines = _made_up(80)
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    names = [line.split(" ")[0] for line in lines[2:8]]
    # the GPU count stays; a tuned run keeps what was tuned and says so; every name ends cut
    assert names[0].startswith("llama31_8b_bf16_gpus1") and "gpus2" not in names[0]
    assert names[2].startswith("llama31_8b_bf16_gpus2") and "mbs1" in names[2]
    assert names[4].startswith("llama31_8b_bf16_gpus2") and "mbs2" in names[4]
    assert "tuned" in names[4] and "tuned" not in names[2]
    assert all(name.endswith("\u2026") for name in names)
    assert len(set(names)) == 3


def test_a_column_kept_longest_narrows_the_gaps_before_it_goes():
    lines = _made_up(80)
    assert "AGAINST" in lines[0] and "STEP ms" not in lines[0]
    wide = _made_up(200)
    assert "STEP ms" in wide[0] and "  " in wide[0]
    # nothing left out: the gap between columns stays two spaces
    assert wide[1].count("  ") == 5


def test_a_wrapped_path_joins_back_whole():
    path = "$LLMB_INSTALL/workloads/llama31/experiments/" + "/".join(_NAMES) + "/log.out"
    lines = render_table(
        [Column("PATH", squeeze=20, cut="wrap"), "JOB"], [[path, "local-1"]], width=40
    ).split("\n")
    assert all(len(line) <= 40 for line in lines), "\n".join(lines)
    assert "".join(line[: lines[1].index(" ")].rstrip() for line in lines[2:]) == path
    assert lines[2].endswith("local-1")
