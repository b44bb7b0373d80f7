"""Issue 41, item 6: sbatch options that break llmb's bookkeeping of a job, and names that are not
one whole sbatch option, are refused wherever Slurm options enter a run, through the real ``llmb``
in a subprocess, with exit 2 naming the option and what is valid, before anything is written or
submitted:

- ``array=0-9``: ten tasks would share the job's one attempt file, exit file and log;
- ``oversubscribe`` (and ``share``, older sbatch's name for it, and ``exclusive=user``): written
  after llmb's own ``--exclusive``, sbatch keeps the last;
- sbatch's own input variables for those options (``SBATCH_ARRAY_INX``, ``SBATCH_EXCLUSIVE=user``,
  ``SBATCH_OPEN_MODE``, ...), which sbatch obeys over the script's lines;
- ``a=1``: written as ``#SBATCH --a=1``, which sbatch refuses as ambiguous (``--account``,
  ``--acctg-freq``, ``--array``); an unambiguous abbreviation (``partit=``) and a word sbatch does
  not know are refused too, with the whole name or the close ones.

The ways in: ``ADDITIONAL_SLURM_PARAMS``, ``--additional-slurm-params`` (run, sweep), and the
cluster file's ``slurm:`` section, whose keys are llmb's own settings only. An ordinary option
(``constraint=gpu``) still reaches the script, and a newer sbatch's option passes where the
installed sbatch lists it (a stand-in sbatch: only Slurm 22.05 is installed here)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

RUN = (
    "run",
    "llama31",
    "--size",
    "8b",
    "--gpu",
    "h100",
    "--dtype",
    "bf16",
    "--gpus",
    "8",
    "--backend",
    "slurm",
    "--bare",
)
ASP = "ADDITIONAL_SLURM_PARAMS"

REFUSED = {  # item -> what the refusal says (the option, and what is valid instead)
    "array=0-9": (
        "ADDITIONAL_SLURM_PARAMS item 'array' is sbatch's --array",
        "every task would write the one attempt file, exit file and log",
        "llmb sweep",
    ),
    "oversubscribe": (
        "ADDITIONAL_SLURM_PARAMS item 'oversubscribe' is sbatch's --oversubscribe",
        "llmb asks for whole nodes (--exclusive)",
    ),
    "share": (
        "ADDITIONAL_SLURM_PARAMS item 'share' is older sbatch's name for --oversubscribe",
        "whole nodes (--exclusive)",
    ),
    "exclusive=user": (
        "ADDITIONAL_SLURM_PARAMS item 'exclusive=user': --exclusive with a value shares the nodes",
        "=user and =mcs with other jobs of the same user or MCS label",
        "A bare 'exclusive' is what llmb writes already",
    ),
    "a=1": (
        "ADDITIONAL_SLURM_PARAMS item 'a' abbreviates several sbatch options "
        "(--account, --acctg-freq, --array), which sbatch refuses as ambiguous",
        "Give the whole name of the option you mean",
    ),
    "acc=team": (
        "ADDITIONAL_SLURM_PARAMS item 'acc' abbreviates several sbatch options "
        "(--account, --acctg-freq), which sbatch refuses as ambiguous",
        "give the whole name",
    ),
    "partit=batch": (
        "ADDITIONAL_SLURM_PARAMS item 'partit' abbreviates sbatch's --partition",
        "give an option's whole name (partition)",
    ),
    "constrain=gpu": (
        "item 'constrain' abbreviates sbatch's --constraint",
        "whole name (constraint)",
    ),
    "gpus-per-tsk=1": (
        "ADDITIONAL_SLURM_PARAMS item 'gpus-per-tsk' is no sbatch option",
        "did you mean gpus-per-task",
        "whole name, as sbatch --help lists them",
    ),
}


@pytest.fixture
def fake_sbatch(tmp_path) -> tuple[Path, Path]:
    """(a bin directory whose sbatch records each job it is given and answers job 4242, the log)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "sbatch.log"
    bin_dir.mkdir()
    script = bin_dir / "sbatch"
    script.write_text(
        f'#!/bin/sh\nif [ "$1" = --parsable ]; then echo "$@" >> {log}; echo 4242; fi\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bin_dir, log


def llmb(llmb_proc, install: Path, *args: str, path: Path | None = None, **env: str):
    """``llmb`` in a subprocess, with ``path`` before PATH (none: no Slurm command is found)."""
    found = f"{path}{os.pathsep}{os.environ['PATH']}" if path else str(install.parent / "no-bin")
    return llmb_proc(*args, env={"LLMB_INSTALL": str(install), "PATH": found, **env}, timeout=120)


def refused(result, *needles: str) -> None:
    assert result.code == 2, (result.code, result.out, result.err)
    assert "Traceback" not in result.err and "internal error" not in result.err, result.err
    assert "#SBATCH --" not in result.out + result.err  # no script shown
    for needle in needles:
        assert needle in result.err, (needle, result.err)


def written(install: Path) -> list[str]:
    return sorted(str(p) for p in install.rglob("*") if p.is_file()) if install.exists() else []


@pytest.mark.parametrize("item", sorted(REFUSED))
def test_an_item_that_breaks_the_bookkeeping_or_is_not_a_whole_option_is_refused(
    llmb_proc, tmp_path, fake_sbatch, item
):
    install = tmp_path / "install"
    bin_dir, log = fake_sbatch
    # the dry run (the variable, beside an ordinary item), the flag, and a real submission
    refused(
        llmb(llmb_proc, install, *RUN, "--dry-run", **{ASP: f"constraint=gpu;{item}"}),
        *REFUSED[item],
    )
    refused(
        llmb(llmb_proc, install, *RUN, "--dry-run", "--additional-slurm-params", item),
        *REFUSED[item],
    )
    refused(llmb(llmb_proc, install, *RUN, "--detach", path=bin_dir, **{ASP: item}), *REFUSED[item])
    assert not log.exists()  # nothing reached sbatch
    assert not [f for f in written(install) if "/jobs/" in f or f.endswith(".sh")]


def test_a_sweep_refuses_a_job_array_before_anything_is_submitted(llmb_proc, tmp_path, fake_sbatch):
    install = tmp_path / "install"
    bin_dir, log = fake_sbatch
    sweep = ("sweep", *RUN[1:8], "--gpus", "8,16", *RUN[10:])
    result = llmb(
        llmb_proc, install, *sweep, "--additional-slurm-params", "array=0-9", path=bin_dir
    )
    refused(result, "ADDITIONAL_SLURM_PARAMS item 'array' is sbatch's --array")
    assert not log.exists()
    assert not [f for f in written(install) if "/jobs/" in f or f.endswith(".sh")]


def test_the_cluster_files_slurm_section_takes_llmbs_own_settings_only(llmb_proc, tmp_path):
    install = tmp_path / "install"
    install.mkdir()
    for key in ("array: 0-9", "oversubscribe: true", "a: 1"):
        (install / "cluster.yaml").write_text(f"slurm:\n  {key}\n")
        refused(
            llmb(llmb_proc, install, *RUN, "--dry-run"),
            f"cluster.yaml: unknown key {key.split(':')[0]} in the slurm section; valid: time, "
            "nodelist, exclude, reservation, qos, constraint, segment.",
        )


def test_an_ordinary_option_by_its_whole_name_is_still_rendered(llmb_proc, tmp_path, fake_sbatch):
    install = tmp_path / "install"
    bin_dir, log = fake_sbatch
    items = "constraint=gpu;mail-type=END;hold;exclusive"
    dry = llmb(llmb_proc, install, *RUN, "--dry-run", **{ASP: items})
    assert dry.code == 0, dry.err
    lines = dry.out.splitlines()
    for line in ("#SBATCH --constraint=gpu", "#SBATCH --mail-type=END", "#SBATCH --hold"):
        assert line in lines, (line, dry.out)
    # llmb's own --exclusive stands, and nothing after it undoes it
    assert "#SBATCH --exclusive" in lines and not [
        line for line in lines if "oversubscribe" in line or line.startswith("#SBATCH --exclusive=")
    ]
    submitted = llmb(llmb_proc, install, *RUN, "--detach", path=bin_dir, **{ASP: items})
    assert submitted.code == 0, submitted.err
    assert log.read_text().startswith("--parsable --comment=llmb:")
    script = next(install.rglob("sbatch_*.sh")).read_text().splitlines()
    assert {"#SBATCH --constraint=gpu", "#SBATCH --mail-type=END", "#SBATCH --hold"} <= set(script)


def test_a_newer_sbatchs_option_passes_where_the_installed_sbatch_lists_it(
    llmb_proc, tmp_path, fake_sbatch
):
    """The data is Slurm 22.05's; a cluster on a newer Slurm may give the options its own sbatch
    lists (``sbatch --help``), by their whole names, and no abbreviation of them."""
    install = tmp_path / "install"
    bin_dir, _ = fake_sbatch
    item = "tres-per-task=gres/gpu:1"
    refused(
        llmb(llmb_proc, install, *RUN, "--dry-run", path=bin_dir, **{ASP: item}),
        "item 'tres-per-task' is no sbatch option",
    )
    newer = tmp_path / "newer"
    newer.mkdir()
    sbatch = newer / "sbatch"
    sbatch.write_text(
        '#!/bin/sh\nif [ "$1" = --help ]; then\n'
        "  echo '      --tres-per-task=list    list of tres required per task'\n"
        "  echo '      --hold                  submit job in held state'\nfi\n"
    )
    sbatch.chmod(sbatch.stat().st_mode | stat.S_IEXEC)
    dry = llmb(llmb_proc, install, *RUN, "--dry-run", path=newer, **{ASP: item})
    assert dry.code == 0, dry.err
    assert "#SBATCH --tres-per-task=gres/gpu:1" in dry.out.splitlines()
    refused(
        llmb(llmb_proc, install, *RUN, "--dry-run", path=newer, **{ASP: "tres-per=gres/gpu:1"}),
        "item 'tres-per' is no sbatch option",
    )


VARIABLE_REFUSED = {  # sbatch's input variable, set in the submitting shell -> the refusal
    "SBATCH_ARRAY_INX=0-9": (
        "SBATCH_ARRAY_INX='0-9' is set in this shell: sbatch reads it as --array",
    ),
    "SBATCH_EXCLUSIVE=user": (
        "SBATCH_EXCLUSIVE='user' is set in this shell: sbatch reads it as --exclusive",
        "=user and =mcs with other jobs",
    ),
    "SBATCH_EXCLUSIVE=oversubscribe": ("=oversubscribe with any",),
    "SBATCH_OPEN_MODE=truncate": ("sbatch reads it as --open-mode", "llmb sets it to append"),
    "SBATCH_OUTPUT=/tmp/elsewhere": ("sbatch reads it as --output",),
}


@pytest.mark.parametrize("variable", sorted(VARIABLE_REFUSED))
def test_sbatchs_own_variable_for_a_refused_option_is_refused(
    llmb_proc, tmp_path, fake_sbatch, variable
):
    """sbatch reads its input variables over the script's #SBATCH lines: an SBATCH_ARRAY_INX in
    the shell made llmb's job an array, whatever ADDITIONAL_SLURM_PARAMS said."""
    install = tmp_path / "install"
    bin_dir, log = fake_sbatch
    name, _, value = variable.partition("=")
    needles = (*VARIABLE_REFUSED[variable], f"Unset it for llmb's runs (env -u {name} llmb ...)")
    refused(llmb(llmb_proc, install, *RUN, "--dry-run", **{name: value}), *needles)
    refused(llmb(llmb_proc, install, *RUN, "--detach", path=bin_dir, **{name: value}), *needles)
    assert not log.exists()


def test_why_the_real_sbatch_makes_a_job_array_of_a_script_from_its_environment(slurm, tmp_path):
    """The real Slurm: a script without --array, submitted with SBATCH_ARRAY_INX in the environment,
    is a job array of two tasks (what llmb's script would have become)."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --hold\n#SBATCH --output=/dev/null\ntrue\n")
    environ = {**os.environ, **slurm.env()}
    made = subprocess.run(
        ["sbatch", "--parsable", str(script)],
        env={**environ, "SBATCH_ARRAY_INX": "0-1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    job = made.stdout.strip().split(";")[0]
    try:
        shown = subprocess.run(
            ["scontrol", "show", "job", "--oneliner", job],
            env=environ,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
        assert f"ArrayJobId={job}" in shown and "ArrayTaskId=0-1" in shown, shown
    finally:
        subprocess.run(["scancel", job], env=environ, timeout=60)
