"""``--proxy``, ``--layers`` and ``--fit`` each choose the whole reduced model: given together they are
refused by the option set plan, run, sweep and certify share (``llmb.cli.run_options``), in one message
and with one exit code, before anything else is checked (issue 41, item 10: plan and run refused
``--proxy tiny --fit`` in different words, and run only after other checks). A sweep file's section
that sets two of them gets the same words."""

from __future__ import annotations

import pytest

RECIPE = ("llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8")
COMMANDS = {
    "plan": ("plan", *RECIPE),
    "plan-json": ("plan", *RECIPE, "--json"),
    "run": ("run", *RECIPE),
    "run-dry-run": ("run", *RECIPE, "--dry-run"),
    "sweep": ("sweep", *RECIPE, "--dry-run"),
}


@pytest.mark.parametrize(
    ("reductions", "said"),
    [
        (("--proxy", "tiny", "--fit"), "--proxy tiny and --fit"),
        (("--proxy", "tiny", "--layers", "2"), "--proxy tiny and --layers 2"),
        (("--layers", "2", "--fit"), "--layers 2 and --fit"),
        (("--proxy", "tiny", "--layers", "2", "--fit"), "--proxy tiny and --layers 2 and --fit"),
    ],
    ids=["proxy-fit", "proxy-layers", "layers-fit", "all-three"],
)
def test_plan_run_and_sweep_refuse_two_reductions_in_the_same_words(
    llmb_proc, tmp_path, reductions, said
):
    env = {"LLMB_INSTALL": str(tmp_path / "install")}
    answers = {name: llmb_proc(*argv, *reductions, env=env) for name, argv in COMMANDS.items()}
    expected = (
        f"llmb: error: {said} each reduce the run; give one of them: --proxy NAME (a CPU-sized model "
        f"of the workload's structure), --layers N (the full width with N layers) or --fit (the largest "
        f"slice of the model each GPU holds).\n"
    )
    assert {name: (a.code, a.err, a.out) for name, a in answers.items()} == {
        name: (2, expected, "") for name in COMMANDS
    }
    assert not (tmp_path / "install" / "jobs").exists()  # nothing was submitted


def test_a_sweep_files_section_with_two_reductions_says_the_same(llmb_proc, tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        "llama31_8b: {dtypes: [bf16], scales: [2], gpu: h100, proxy: tiny, fit: true}\n"
    )
    env = {"LLMB_INSTALL": str(tmp_path / "install")}
    result = llmb_proc("sweep", "--file", str(sweep), "--dry-run", env=env)
    plan = llmb_proc("plan", *RECIPE, "--proxy", "tiny", "--fit", env=env)
    assert (result.code, plan.code) == (2, 2), (result.err, plan.err)
    message = plan.err.strip().removeprefix("llmb: error: ")
    assert f"/sweep.yaml: llama31_8b): {message}" in result.err, (result.err, message)
