"""What a user of NVIDIA's llmb-run types, and slips of the keyboard, get an answer that says what llmb takes
(issue 43, item 6): a GPU count given as the GPU type, llmb-run's flags, an option given twice."""

from __future__ import annotations

import pytest
from llmb.cli import LLMB_RUN_SPELLINGS

RUN = ["run", "llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "2"]


def test_a_gpu_count_given_as_the_gpu_type_asks_whether_it_was_the_count(cli):
    wrong = cli("plan", "llama31", "--size", "8b", "--gpu", "2", "--dtype", "bf16")
    assert wrong.code == 2
    assert "llama31 8b has no GPU type '2' (did you mean --gpus 2?); valid GPU types: " in wrong.err
    other = cli("plan", "llama31", "--size", "8b", "--gpu", "a100", "--dtype", "bf16")
    assert other.code == 2 and "did you mean" not in other.err  # a name is not a count


@pytest.mark.parametrize(
    ("typed", "spelled"),
    [
        (["-w", "llama31"], "llmb takes the workload as its first argument"),
        (["--scale", "8"], "llmb spells it --gpus"),
        (["-s", "8b"], "llmb spells it --size"),
        (["--model_size", "8b"], "llmb spells it --size"),
        (["-d"], "llmb spells it --dry-run"),
        (["--dryrun"], "llmb spells it --dry-run"),
        (["-f"], "llmb has none; --no-memory-check"),
    ],
)
def test_llmb_runs_flags_are_answered_with_llmbs_spelling(cli, typed, spelled):
    answer = cli(*RUN, *typed)
    assert answer.code == 2
    assert f"No such option '{typed[0]}'. llmb-run's {typed[0]}: {spelled}" in answer.err
    assert "Did you mean" not in answer.err  # not click's guesses (--size for --scale)


def test_every_llmb_run_spelling_is_not_an_option_of_llmb_run():
    from llmb.cli.jobs_cmd import run_command

    taken = {name for p in run_command.params for name in (*p.opts, *p.secondary_opts)}
    assert not set(LLMB_RUN_SPELLINGS) & taken


@pytest.mark.parametrize(
    ("twice", "said"),
    [
        (["--gpus", "4"], "--gpus 2 and --gpus 4 both given"),
        (["--gpus=4"], "--gpus 2 and --gpus 4 both given"),
        (["--size", "70b"], "--size 8b and --size 70b both given"),
        (["--compile", "--no-compile"], "--compile and --no-compile both given"),
    ],
)
def test_an_option_given_twice_is_refused_not_overridden(cli, twice, said):
    answer = cli(*RUN, "--proxy", "tiny", *twice, "--dry-run")
    assert answer.code == 2
    assert f"llmb run: {said}; give it once (the last would win without a word)." in answer.err


def test_options_that_collect_may_repeat(cli):
    answer = cli(*RUN, "--proxy", "tiny", "--env", "A=1", "--env", "B=2", "--dry-run")
    assert answer.code == 0, answer.err
    # a value that looks like an option is the option's value, not a second option
    answer = cli(*RUN, "--proxy", "tiny", "--env", "A=--gpus", "--dry-run")
    assert answer.code == 0, answer.err


def test_a_refusal_names_the_value_the_user_gave_not_a_flag_never_typed(cli, monkeypatch):
    monkeypatch.setenv("LLMB_FORCE_CPU", "1")
    import os

    cores = os.cpu_count() or 1
    # preflight's ranks a node default to the GPU type's GPUs a node (8 on an H100)
    defaulted = cli("preflight", "--gpu", "h100", "--nodes", "1", "--dry-run")
    if 8 > 2 * cores:  # a machine whose cores cannot carry 8 CPU ranks (this project's CI: 2)
        assert defaulted.code == 2
        assert defaulted.err.startswith("llmb: error: the h100's 8 GPUs a node (--gpus-per-node N")
        assert "--gpus-per-node 8" not in defaulted.err  # never typed
    many = 2 * cores + 1
    typed = cli("preflight", "--gpu", "h100", "--nodes", "1", "--gpus-per-node", str(many))
    assert typed.code == 2
    assert typed.err.startswith(f"llmb: error: --gpus-per-node {many}: {many} CPU ranks")
