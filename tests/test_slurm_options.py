"""ADDITIONAL_SLURM_PARAMS against sbatch's own reading of option names: sbatch
(getopt_long) takes any unambiguous abbreviation of a long option, so an
abbreviation of an option llmb sets is refused like the option itself. The
option list llmb keeps is checked against the installed sbatch: its --help and
--usage, and its verdict on every abbreviation of every option."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from llmb.errors import UsageError
from llmb_backend_slurm import params, sbatch_options

REFUSED = {  # item -> the option sbatch reads it as
    "outpu=/tmp/elsewhere.out": "--output",
    "job-nam=other": "--job-name",
    "ntasks-per-no=8": "--ntasks-per-node",
    "tasks-per-node=8": "--ntasks-per-node",
    "tasks-per=8": "--ntasks-per-node",
    "nodes=4": "--nodes",
    "job-=x": "--job-name",
    "err=/tmp/e": "--error",
    "chd=/tmp": "--chdir",
    "pars": "--parsable",
    "wr=hostname": "--wrap",
    "comme=mine": "--comment",
    "--output=/tmp/x": "--output",
    # issue 32: the script's own --open-mode=append and --no-requeue, the GPUs it derives, and what
    # would keep sbatch from submitting the job llmb tracks
    "open-mode=truncate": "--open-mode",
    "ope=truncate": "--open-mode",
    "requeue": "--requeue",
    "no-requeue": "--no-requeue",
    "no-r": "--no-requeue",
    "gpus=8": "--gpus",
    "gpus-per-node=8": "--gpus-per-node",
    "wait": "--wait",
    "test-only": "--test-only",
}


@pytest.mark.parametrize("item", sorted(REFUSED))
def test_abbreviations_of_options_llmb_sets_are_refused_naming_the_option(item):
    with pytest.raises(UsageError, match=f"is sbatch's {REFUSED[item]}[ ;]"):
        params.parse(f"constraint=gpu;{item}")


def test_ambiguous_abbreviations_that_could_be_an_option_llmb_sets_are_refused_with_the_candidates():
    with pytest.raises(
        UsageError,
        match=r"'o' abbreviates several sbatch options \(--open-mode, --output, "
        r"--overcommit, --oversubscribe\), among them --open-mode",
    ):
        params.parse("o=/tmp/x")
    with pytest.raises(UsageError, match="among them --export"):
        params.parse("exp=ALL")


def test_what_is_accepted_resolves_to_no_option_llmb_sets():
    accepted = "hol;partit=other;exclusive;export-file=/tmp/env;nodelist=node1;time-m=5;mail-t=NONE;newopt=1"
    items = params.parse(accepted)
    assert [key for key, _ in items] == [
        "hol",
        "partit",
        "exclusive",
        "export-file",
        "nodelist",
        "time-m",
        "mail-t",
        "newopt",
    ]
    for key, _ in items:
        assert not {sbatch_options.canonical(o) for o in sbatch_options.resolve(key)} & set(
            params.OWNED
        ), key


def test_no_abbreviation_of_any_sbatch_option_resolves_to_an_owned_option_unnoticed():
    """Every prefix of every option: refused exactly when sbatch could read it as an option llmb sets."""
    for option in sorted(sbatch_options.OPTIONS):
        for end in range(1, len(option) + 1):
            key = option[:end]
            meanings = {sbatch_options.canonical(o) for o in sbatch_options.resolve(key)}
            # a value its own check accepts
            value = "gpu:1" if params.checked_option(key) == "gres" else "1"
            try:
                params.parse(f"{key}={value}")
            except UsageError:
                assert meanings & set(params.OWNED), key
            else:
                assert not meanings & set(params.OWNED), key


def test_a_bare_word_must_be_an_option_that_takes_no_value():
    """Issue 32: 'qos=x;y' made '#SBATCH --y'. A bare item is one of sbatch's flag options (or an
    unambiguous abbreviation of one), never a word sbatch does not know or an option that needs a value."""
    for text, said in (
        ("qos=x;y", "item 'y' has no '=value' and is no sbatch option"),
        ("partition", "is sbatch's --partition, which takes a value"),
        ("mail", "is an abbreviation of several sbatch options (--mail-type, --mail-user)"),
        ("exclusive;newflag", "item 'newflag' has no '=value' and is no sbatch option"),
    ):
        with pytest.raises(UsageError, match=re.escape(said)):
            params.parse(text)
    assert params.parse("exclusive;hol;contiguous;spread-job;nice") == [
        ("exclusive", None),
        ("hol", None),
        ("contiguous", None),
        ("spread-job", None),
        ("nice", None),
    ]
    # every flag option that llmb does not set passes bare
    for flag in sorted(sbatch_options.FLAGS - set(params.OWNED)):
        assert params.parse(flag) == [(flag, None)]


# ---------------------------------------------------------------- the data against the installed sbatch


@pytest.fixture(scope="module")
def sbatch(tmp_path_factory):
    """Runs the installed sbatch with a configuration of its own (no controller is asked: --help,
    --usage and --version answer without one)."""
    if shutil.which("sbatch") is None:
        if os.environ.get("CI"):
            pytest.fail(
                "CI must check the sbatch option data, but sbatch is not installed (.ci/run installs slurm-wlm)"
            )
        pytest.skip("sbatch is not installed here (apt-get install slurm-client)")
    conf = tmp_path_factory.mktemp("sbatch-conf") / "slurm.conf"
    conf.write_text(
        "ClusterName=optcheck\nSlurmctldHost=localhost\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n"
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["sbatch", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
            stdin=subprocess.DEVNULL,  # an option that takes '--version' as its value reads the script
        )

    version = run("--version").stdout
    if not version.startswith("slurm") or " 22.05." not in version:
        pytest.skip(f"the option data is Slurm 22.05's; this sbatch is {version.strip()!r}")
    return run


def test_the_listed_options_are_those_sbatch_help_and_usage_print(sbatch):
    help_, usage = sbatch("--help"), sbatch("--usage")
    assert help_.returncode == 0 and usage.returncode == 0, help_.stderr + usage.stderr
    printed = set(re.findall(r"--([a-z][a-z0-9-]*)", help_.stdout + usage.stdout))
    assert printed == sbatch_options.LISTED
    assert not printed & sbatch_options.UNLISTED


def test_sbatch_reads_every_abbreviation_of_every_option_as_the_data_says(sbatch):
    """sbatch's getopt_long verdict on each prefix: the one option, or ambiguous among exactly the
    candidates ``resolve`` names; and names that are no option are unrecognised by both."""
    keys = sorted(
        {option[:end] for option in sbatch_options.OPTIONS for end in range(1, len(option) + 1)}
    )
    for key in [*keys, "nosuch", "outputs", "job-names"]:
        said = sbatch(f"--{key}=1", "--version").stderr
        expected = sbatch_options.resolve(key)
        ambiguous = re.search(r"is ambiguous; possibilities:(.*)", said)
        if "unrecognized option" in said:
            assert expected == [], (key, said)
        elif ambiguous:
            assert sorted(re.findall(r"'--([a-z0-9-]+)'", ambiguous.group(1))) == expected, (
                key,
                said,
            )
        else:
            assert len(expected) == 1, (key, expected, said)


def test_the_flag_options_are_those_sbatch_takes_without_a_value(sbatch):
    """``--name --version``: an option that takes no value (or an optional one) leaves --version to
    print the version; one that needs a value takes '--version' as it."""
    for option in sorted(sbatch_options.OPTIONS):
        said = sbatch(f"--{option}", "--version")
        printed = said.stdout.startswith("slurm") or option in ("help", "usage")
        assert printed == (option in sbatch_options.FLAGS), (option, said.stdout, said.stderr)
