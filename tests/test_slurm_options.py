"""ADDITIONAL_SLURM_PARAMS against sbatch's own reading of option names: sbatch
(getopt_long) takes any unambiguous abbreviation of a long option, so an
abbreviation of an option llmb sets is refused like the option itself, and
any other item must name an option whole (issue 41). The option list llmb
keeps is checked against the installed sbatch: its --help and --usage, and
its verdict on every abbreviation of every option."""

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
        r"--overcommit, --oversubscribe\), which sbatch refuses as ambiguous, among them --open-mode",
    ):
        params.parse("o=/tmp/x")
    with pytest.raises(UsageError, match="among them --export"):
        params.parse("exp=ALL")


def test_what_is_accepted_is_whole_names_of_options_llmb_leaves_alone():
    accepted = "hold;partition=other;exclusive;export-file=/tmp/env;nodelist=node1;time-min=5;mail-type=NONE"
    items = params.parse(accepted)
    assert [key for key, _ in items] == [
        "hold",
        "partition",
        "exclusive",
        "export-file",
        "nodelist",
        "time-min",
        "mail-type",
    ]
    for key, _ in items:
        assert sbatch_options.whole(key) and key not in params.REFUSED, key


def test_no_abbreviation_of_any_sbatch_option_passes():
    """Every prefix of every option: accepted exactly when it is an option's whole name (or an
    alias) that llmb neither sets nor refuses for its bookkeeping; an abbreviation that could be
    one of those is refused as that option, any other abbreviation as not whole."""
    for option in sorted(sbatch_options.OPTIONS):
        for end in range(1, len(option) + 1):
            key = option[:end]
            meanings = {sbatch_options.canonical(o) for o in sbatch_options.resolve(key)}
            # a value its own check accepts
            value = "gpu:1" if params.checked_option(key) == "gres" else "1"
            try:
                params.parse(f"{key}={value}")
            except UsageError as exc:
                assert (
                    meanings & set(params.REFUSED)
                    or not sbatch_options.whole(key)
                    or (key == "exclusive")
                ), (key, str(exc))
                if not meanings & set(params.REFUSED) and not sbatch_options.whole(key):
                    assert "abbreviates" in str(exc) and "whole name" in str(exc), str(exc)
            else:
                assert sbatch_options.whole(key) and not meanings & set(params.REFUSED), key


def test_a_bare_word_must_be_an_option_that_takes_no_value():
    """Issue 32: 'qos=x;y' made '#SBATCH --y'. A bare item is one of sbatch's flag options, by its
    whole name, never a word sbatch does not know or an option that needs a value."""
    for text, said in (
        ("qos=x;y", "item 'y' has no '=value' and is no sbatch option"),
        ("partition", "is sbatch's --partition, which takes a value"),
        ("mail", "abbreviates several sbatch options (--mail-type, --mail-user)"),
        ("hol", "item 'hol' abbreviates sbatch's --hold: give an option's whole name (hold)"),
        ("exclusive;newflag", "item 'newflag' has no '=value' and is no sbatch option"),
    ):
        with pytest.raises(UsageError, match=re.escape(said)):
            params.parse(text)
    assert params.parse("exclusive;hold;contiguous;spread-job;nice") == [
        ("exclusive", None),
        ("hold", None),
        ("contiguous", None),
        ("spread-job", None),
        ("nice", None),
    ]
    # every flag option that llmb does not set passes bare
    for flag in sorted(sbatch_options.FLAGS - set(params.REFUSED)):
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

    def run(*args: str, **variables: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["sbatch", *args],
            capture_output=True,
            text=True,
            env={**env, **variables},
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


def test_the_names_llmb_refuses_or_knows_beyond_the_data_are_as_this_sbatch_reads_them(sbatch):
    """Issue 41: --array and --oversubscribe are this sbatch's options (refused by llmb, not by
    sbatch); 'share' (older sbatch's) and 'segment' (a newer one's) are not; '--a' is ambiguous."""
    for name in params.BREAKS:
        assert sbatch(
            f"--{name}=1" if name == "array" else f"--{name}", "--version"
        ).stdout.startswith("slurm"), name
    for name in (*sbatch_options.FORMER, *sbatch_options.NEWER):
        assert "unrecognized option" in sbatch(f"--{name}=1", "--version").stderr, name
        assert not sbatch_options.resolve(name) and sbatch_options.whole(name) == (
            name in sbatch_options.NEWER
        )
    said = sbatch("--a=1", "--version").stderr
    assert "is ambiguous" in said and sbatch_options.resolve("a") == [
        "account",
        "acctg-freq",
        "array",
    ]


def test_the_input_variables_llmb_refuses_are_this_sbatchs(sbatch):
    """Issue 41: sbatch reads each variable of ``params.VARIABLES`` (its name is in the installed
    sbatch), and a bad value of one it checks before asking the controller is its option's error."""
    with open(shutil.which("sbatch"), "rb") as handle:
        binary = handle.read()
    known = set(re.findall(rb"(?<=\0)SBATCH_[A-Z0-9_]+(?=\0)", binary))  # its strings
    for variable, name in params.VARIABLES.items():
        assert variable.encode() in known, variable
        assert name in sbatch_options.OPTIONS and name in {*params.REFUSED, "exclusive"}, name
    for variable, option in (("SBATCH_OPEN_MODE", "open-mode"), ("SBATCH_EXCLUSIVE", "exclusive")):
        said = sbatch("--wrap=true", **{variable: "bogus"}).stderr
        assert f"Invalid --{option} specification" in said, (variable, said)
