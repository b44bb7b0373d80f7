"""Issue 32, items 8-10: edge values through the real command line, each refused with exit 2 naming
the field or option and what is valid, before anything is computed, written or submitted.

- ``--set``: every settable field has a range, read from ASCII digits of bounded length
  (``GPUs/0`` was a ZeroDivisionError, a 4,000-digit ``steps`` an OverflowError, both exit 70;
  ``gbs=GPUs*99999999999999999999`` and a 30-digit ``steps`` were planned, with a 29-digit time limit);
- ``--framework-arg``: finite numbers in ASCII digits, within 2^53 and not below a count's least value
  (``NaN`` and ``Infinity`` reached ``run.json`` as non-JSON tokens, ``train.train_iters=-5`` and
  4,000-digit integers passed, ``١٢`` was read as 12), and every JSON record llmb writes is strict;
- ``ADDITIONAL_SLURM_PARAMS``: an option llmb's script sets (``open-mode``, ``requeue``, ...) is
  refused, and a bare word must be an sbatch option that takes no value (``qos=x;y`` made ``--y``)."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import pytest
from llmb.runs import experiment

H100_8B = ("llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8")
B200_8B = ("llama31", "--size", "8b", "--gpu", "b200", "--dtype", "fp8", "--gpus", "8")
HUGE = "9" * 4000


def _strict(text: str):
    """JSON as every strict reader takes it: NaN, Infinity and -Infinity are errors."""

    def refuse(token: str):
        raise ValueError(f"non-JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def _refused(out, *needles: str) -> None:
    assert out.code == 2, (out.code, out.out, out.err)
    assert "internal error" not in out.err and "Traceback" not in out.err, out.err
    for needle in needles:
        assert needle in out.err, (needle, out.err)


# ------------------------------------------------------------------------------------ --set (item 8)

SET_REFUSED = {
    # the four
    "gbs=GPUs/0": ("bad --set gbs='GPUs/0'", "divides by zero", "GPUs/N (N 1 to 131,072)"),
    f"steps={HUGE}": (
        "bad --set steps='9999999999999999'...'99999999' (4,000 characters)",
        "must be a whole number from 1 to 1,000,000",
    ),
    "gbs=GPUs*99999999999999999999": ("bad --set gbs=", "GPUs*N (N 1 to 16,777,216)"),
    "steps=" + "9" * 30: ("bad --set steps=", "from 1 to 1,000,000"),
    # one per field
    "tp=0": ("bad --set tp='0'", "from 1 to 131,072"),
    "pp=131073": ("bad --set pp='131073'", "from 1 to 131,072"),
    "cp=-1": ("bad --set cp='-1'", "from 1 to 131,072"),
    "ep=999999": ("bad --set ep='999999'", "from 1 to 131,072, or NA"),
    "etp=1.5": ("bad --set etp='1.5'", "from 1 to 131,072, or NA"),
    "vp=1025": ("bad --set vp='1025'", "from 1 to 1,024, or NA"),
    "mbs=4097": ("bad --set mbs='4097'", "from 1 to 4,096"),
    "gbs=16777217": ("bad --set gbs='16777217'", "1 to 16,777,216"),
    "gbs=GPUs/131073": ("bad --set gbs='GPUs/131073'", "GPUs/N (N 1 to 131,072)"),
    "seq_len=1048577": ("bad --set seq_len='1048577'", "from 1 to 1,048,576"),
    "layers=1025": ("bad --set layers='1025'", "from 1 to 1,024"),
    "steps=0": ("bad --set steps='0'", "from 1 to 1,000,000"),
    "recompute_layers=1025": ("bad --set recompute_layers='1025'", "from 0 to 1,024"),
    "offload_layers=-1": ("bad --set offload_layers='-1'", "from 0 to 1,024"),
    # digits of other scripts (int() reads '٣' as 3) and Python's other int() spellings
    "tp=\u0663": ("bad --set tp='\u0663'", "from 1 to 131,072"),
    "gbs=GPUs*\u0661\u0666": ("bad --set gbs=", "GPUs*N"),
    "steps=1_000": ("bad --set steps='1_000'", "from 1 to 1,000,000"),
    # leading zeros are no way round the digit cap
    "mbs=" + "0" * 5000 + "1": ("bad --set mbs=", "from 1 to 4,096"),
}


@pytest.mark.parametrize("item", sorted(SET_REFUSED), ids=lambda item: item[:30])
def test_a_set_value_out_of_its_range_is_refused_naming_the_field_and_range(cli, item):
    for command in (("plan", *H100_8B), ("run", *H100_8B, "--dry-run")):
        _refused(cli(*command, "--set", item), *SET_REFUSED[item])


def test_a_huge_set_value_is_shown_shortened(cli):
    out = cli("plan", *H100_8B, "--set", f"steps={HUGE}")
    _refused(out)
    assert len(out.err) < 300, out.err


def test_a_sweep_reads_set_with_the_same_ranges(cli):
    _refused(
        cli("sweep", *H100_8B, "--dry-run", "--set", "gbs=GPUs/0"),
        "bad --set gbs='GPUs/0'",
        "divides by zero",
    )


def test_bounds_that_need_the_gpu_count_or_the_layout_are_checked_when_the_recipe_resolves(cli):
    # GPUs*N within its range, but GBS beyond 2^24 at this many GPUs
    _refused(
        cli("plan", *H100_8B, "--set", "gbs=GPUs*16777216"),
        "GBS would be 134217728 at 8 GPUs, more than the 16,777,216 llmb accepts",
    )
    _refused(
        cli("plan", *H100_8B, "--set", "recompute_layers=33"),
        "recompute_layers 33 is more than the 32 layers (valid: 0 to 32)",
    )
    _refused(cli("plan", *H100_8B, "--set", "layers=33"), "exceeds the model's 32 layers")


def test_the_edges_of_every_range_are_accepted_and_the_time_limit_stays_sane(cli):
    out = cli(
        "plan",
        *H100_8B,
        "--set",
        "steps=1000000",
        "--set",
        "recompute_layers=32",
        "--set",
        "offload_layers=0",
        "--set",
        "gbs=GPUs*16",
        "--set",
        "vp=NA",
    )
    assert out.code == 0, out.err
    hours = re.search(r"time limit\s+(\d+):\d\d:\d\d", out.out)
    assert hours and len(hours.group(1)) <= 6, out.out  # 1,000,000 steps of 8b: 14,213 hours
    out = cli("plan", *H100_8B, "--set", "steps=1", "--set", "mbs=1", "--set", "gbs=8")
    assert out.code == 0, out.err


# ------------------------------------------------------------------------- --framework-arg (item 9)

ARG_REFUSED = {
    "optimizer.lr=NaN": "optimizer.lr takes a finite number",
    "optimizer.lr=nan": "optimizer.lr takes a finite number",
    "optimizer.lr=Infinity": "optimizer.lr takes a finite number",
    "optimizer.lr=-inf": "optimizer.lr takes a finite number",
    "optimizer.lr=1e400": "optimizer.lr takes a finite number",
    "optimizer.lr=\u0663e-4": "optimizer.lr takes a finite number",
    "train.train_iters=-5": "train.train_iters takes a whole number from 1 to 9,007,199,254,740,992",
    f"train.train_iters={HUGE}": "train.train_iters=9999999999999999...99999999 (4,000 characters)",
    "train.train_iters=\u0661\u0662": "train.train_iters takes a whole number from 1",
    "train.train_iters=9007199254740993": "from 1 to 9,007,199,254,740,992",
    "ddp.bucket_size=-1": "ddp.bucket_size takes a whole number from 0",
    "model.tensor_model_parallel_size=0": "model.tensor_model_parallel_size takes a whole number from 1",
    "model.recompute_num_layers=-2": "model.recompute_num_layers takes a whole number from 0",
}


@pytest.mark.parametrize("item", sorted(ARG_REFUSED), ids=lambda item: item[:40])
def test_a_framework_arg_number_that_is_not_finite_ascii_and_in_range_is_refused(
    cli, monkeypatch, tmp_path, item
):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sinfo: the dry run goes on
    out = cli("run", *B200_8B, "--backend", "slurm", "--dry-run", "--bare", "--framework-arg", item)
    _refused(out, f"--framework-arg {item.split('=')[0]}=", ARG_REFUSED[item])
    assert len(out.err) < 400, out.err


def test_framework_arg_numbers_in_range_reach_the_run_spec_as_strict_json(
    cli, monkeypatch, tmp_path
):
    monkeypatch.setenv("PATH", str(tmp_path))
    out = cli(
        "run",
        *B200_8B,
        "--backend",
        "slurm",
        "--dry-run",
        "--bare",
        "--json",
        "--framework-arg",
        "optimizer.lr=3e-4",
        "--framework-arg",
        "train.train_iters=9007199254740992",
        "--framework-arg",
        "ddp.bucket_size=0",
    )
    assert out.code == 0, out.err
    args = _strict(out.out)["run_spec"]["framework_config"]["framework_args"]
    assert args == {
        "optimizer.lr": 3e-4,
        "train.train_iters": 2**53,
        "ddp.bucket_size": 0,
    }


def test_lightnings_minus_one_sentinels_still_pass():
    from llmb.engines.frameworks import fields

    assert fields.check(("trainer.max_steps=-1", "trainer.num_sanity_val_steps=-1"), "nemo2") == (
        ("trainer.max_steps", -1),
        ("trainer.num_sanity_val_steps", -1),
    )


@pytest.fixture
def fake_sbatch(tmp_path) -> Path:
    """A bin directory whose sbatch answers job 4242."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "sbatch"
    script.write_text('#!/bin/sh\n[ "$1" = --parsable ] && echo 4242\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def test_a_submitted_runs_json_records_are_strict_json(llmb_proc, tmp_path, fake_sbatch):
    install = tmp_path / "install"
    env = {"LLMB_INSTALL": str(install), "PATH": f"{fake_sbatch}:/usr/bin:/bin"}
    base = ("run", *B200_8B, "--backend", "slurm", "--bare", "--detach")
    refused = llmb_proc(*base, "--framework-arg", "optimizer.lr=NaN", env=env, timeout=120)
    _refused(refused, "optimizer.lr takes a finite number")
    assert not (install / "jobs").exists()
    done = llmb_proc(*base, "--framework-arg", "optimizer.lr=3e-4", env=env, timeout=120)
    assert done.code == 0, done.err
    records = sorted(install.rglob("*.json"))
    assert any(p.name == "run.json" for p in records), records
    for path in records:
        _strict(path.read_text())


def test_a_record_holding_nan_is_not_written(tmp_path):
    path = tmp_path / "run.json"
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError, match=f"{re.escape(str(path))}: not written, .*strict JSON"):
            experiment.write_json(str(path), {"framework_args": {"optimizer.lr": bad}})
        assert not path.exists() and not list(tmp_path.iterdir())
    experiment.write_json(str(path), {"optimizer.lr": 3e-4})
    assert _strict(path.read_text()) == {"optimizer.lr": 3e-4}


# ------------------------------------------------------------------ ADDITIONAL_SLURM_PARAMS (item 10)

OWNED_REFUSED = {
    "open-mode=truncate": ("is sbatch's --open-mode", "llmb sets it to append"),
    "open=truncate": ("is sbatch's --open-mode", "unambiguous abbreviation"),
    "requeue": ("is sbatch's --requeue", "llmb run --requeue"),
    "no-requeue": ("is sbatch's --no-requeue", "llmb run --requeue"),
    "gpus-per-node=4": ("is sbatch's --gpus-per-node", "SBATCH_GPUS_PER_NODE"),
    "gpus=16": ("is sbatch's --gpus", "llmb sets it from the recipe"),
    "output=/tmp/x": ("is sbatch's --output", "llmb sets it"),
    "job-name=x": ("is sbatch's --job-name", "llmb sets it"),
    "nodes=4": ("is sbatch's --nodes", "llmb sets it from the recipe"),
    "wait": ("is sbatch's --wait", "would then not submit the job llmb tracks"),
    "test-only": ("is sbatch's --test-only", "would then not submit"),
}
BARE_REFUSED = {
    "qos=x;y": "item 'y' has no '=value' and is no sbatch option",
    "constraint=gpu;ib": "item 'ib' has no '=value' and is no sbatch option",
    "partition": "item 'partition' has no '=value' and is sbatch's --partition, which takes a value",
    "mail-type=END;time-min": "item 'time-min' has no '=value' and is sbatch's --time-min",
}


def _slurm_dry_run(cli, monkeypatch, tmp_path, additional: str):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sinfo: the dry run goes on
    monkeypatch.setenv("ADDITIONAL_SLURM_PARAMS", additional)
    return cli("run", *H100_8B, "--backend", "slurm", "--dry-run", "--bare")


@pytest.mark.parametrize("item", sorted(OWNED_REFUSED))
def test_an_option_llmbs_script_sets_is_refused_in_additional_slurm_params(
    cli, monkeypatch, tmp_path, item
):
    out = _slurm_dry_run(cli, monkeypatch, tmp_path, f"mail-type=END;{item}")
    _refused(out, f"ADDITIONAL_SLURM_PARAMS item {item.split('=')[0]!r}", *OWNED_REFUSED[item])
    assert "#SBATCH" not in out.out


@pytest.mark.parametrize("items", sorted(BARE_REFUSED))
def test_a_bare_word_that_is_not_a_flag_option_is_refused(cli, monkeypatch, tmp_path, items):
    out = _slurm_dry_run(cli, monkeypatch, tmp_path, items)
    _refused(out, BARE_REFUSED[items], "give key=value")
    assert "#SBATCH" not in out.out


def test_flag_options_and_other_options_still_reach_the_script(cli, monkeypatch, tmp_path):
    out = _slurm_dry_run(
        cli, monkeypatch, tmp_path, "exclusive;hold;contiguous;mail-type=END;mail-user=a@b.c"
    )
    assert out.code == 0, out.err
    lines = out.out.splitlines()
    for line in (
        "#SBATCH --open-mode=append",
        "#SBATCH --no-requeue",
        "#SBATCH --hold",
        "#SBATCH --contiguous",
        "#SBATCH --mail-type=END",
        "#SBATCH --mail-user=a@b.c",
    ):
        assert line in lines, (line, out.out)
    assert sum(line.startswith("#SBATCH --open-mode") for line in lines) == 1
