"""``llmb plan`` is ``llmb run`` without running (issue 34): it takes every option run takes (one option
set, so they cannot drift), and for every ``llmb run`` command line in the README and the docs, plan
with the same arguments succeeds and shows the configuration ``llmb run --dry-run`` would run."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from llmb.cli.plan_cmd import MADE_BY_SUBMITTING, RUN_DIR, plan_command, without_run_dir
from llmb.cli.run_options import parameter_names

ROOT = Path(__file__).resolve().parents[1]
# only the run itself: plan has no use for them
RUN_ONLY = {"--dry-run", "--detach", "--json"}


def command_lines() -> list[tuple[str, list[str]]]:
    """Every complete ``llmb run WORKLOAD ...`` line of README.md and docs/*.md (a line ending in a
    backslash goes on), as (where, arguments after ``run``); placeholders (PATH, [..], ...) left out."""
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = re.sub(r"\\\n\s*", " ", path.read_text())  # a command continued on the next line
        # inline code that the prose wraps over two lines
        text = re.sub(r"`[^`]*`", lambda m: m.group(0).replace("\n", " "), text)
        for number, line in enumerate(text.splitlines(), start=1):
            match = re.search(r"llmb run ([a-z][a-z0-9.]*(?: [^`|#]*)?)", line)
            if not match or re.search(r"\.\.\.|…|\[|PATH|WORKLOAD|<", match.group(1)):
                continue
            words = shlex.split(match.group(1))
            if len(words) > 1 and words[1].startswith("--"):
                found.append((f"{path.name}:{number}", words))
    return found


LINES = command_lines()


def test_the_docs_have_run_lines_to_check():
    assert len(LINES) >= 8


def test_plan_takes_every_run_option():
    taken = {p.name for p in plan_command.params}
    assert set(parameter_names().values()) <= taken


# a line that runs the full model and names no backend is typed on a cluster's login node, whose
# cluster file names the backend (README: "on a login node"); LLMB_BACKEND stands for that file
REDUCED = {"--proxy", "--layers", "--fit", "--backend"}


@pytest.mark.parametrize(("where", "words"), LINES, ids=[w for w, _ in LINES])
def test_plan_of_a_documented_run_line_shows_what_run_would_run(llmb_proc, tmp_path, where, words):
    """Every field of run --dry-run's run_spec is plan's, but the job's id and directory, which only a
    submission makes (plan names the directory RUN_DIR where the configuration holds it); a --proxy
    or --fit plan's own account of the reduced run (its ranks, layout, batch, model, name) is the
    run's too."""
    import json

    env = {"LLMB_INSTALL": str(tmp_path / "install"), "LLMB_NO_CACHE": "1"}
    if "--gpu" not in words:  # the docs' lines that take the GPU type from the cluster file
        env["GPU_TYPE"] = "h100"
    if not REDUCED & set(words):
        env["LLMB_BACKEND"] = "slurm"
    args = [w for w in words if w not in RUN_ONLY]
    planned = llmb_proc("plan", *args, "--json", env=env)
    assert planned.code == 0, (where, planned.err)
    ran = llmb_proc("run", *args, "--dry-run", "--json", env=env)
    assert ran.code == 0, (where, ran.err)
    spec, plan = json.loads(ran.out)["run_spec"], json.loads(planned.out)
    assert spec["run_dir"] and RUN_DIR not in json.dumps(spec), where
    expected = {
        key: without_run_dir(value, spec["run_dir"])
        for key, value in spec.items()
        if key not in MADE_BY_SUBMITTING
    }
    assert len(expected) == len(spec) - len(MADE_BY_SUBMITTING) >= 30, where
    shown = plan["run"]
    assert {key: shown.get(key, "(not in plan)") for key in expected} == expected, where
    assert shown["layers"] == spec["arch"]["layers"], where
    for key in ("workload", "variant", "framework", "size", "gpu", "dtype"):
        assert plan[key] == spec[key], (where, key)
    if "--proxy" in words or "--fit" in words:
        proxy = plan["proxy"]

        def same(shown: dict, ran: dict, *keys: str) -> None:
            assert {k: shown[k] for k in keys} == {k: ran[k] for k in keys}, (where, keys)

        same(proxy, spec, "engine", "ranks", "device", "compute_dtype", "experiment", "seq_len")
        same(proxy["arch"], spec["arch"], *spec["arch"])
        same(proxy["layout"], spec, "mbs", "ga", "gbs")
        same(proxy["layout"], spec["layout"], "tp", "pp", "cp", "ep", "vp")
