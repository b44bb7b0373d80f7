"""``--framework-arg PATH=VALUE`` (issue 23): a field of the production framework's configuration, checked at
submission against the catalogue read from the real frameworks (tests/test_framework_contracts.py keeps it
equal to them and builds a row with such fields in each), applied after llmb's own settings; the run is
tuned. A wrong path or value exits 2 before anything is written, with the closest fields."""

from __future__ import annotations

import json

import pytest
from llmb.engines.frameworks import fields
from llmb.errors import UsageError

B200_8B = ("llama31", "--size", "8b", "--gpu", "b200", "--dtype", "fp8", "--gpus", "8")


def test_values_are_checked_by_the_kind_of_their_field():
    check = fields.check
    assert check(
        (
            "model.recompute_granularity=full",
            "model.recompute_num_layers=2",
            "train.manual_gc=false",
            "optimizer.lr=3e-4",
            "ddp.bucket_size=null",
        ),
        "megatron_bridge",
    ) == (
        ("model.recompute_granularity", "full"),
        ("model.recompute_num_layers", 2),
        ("train.manual_gc", False),
        ("optimizer.lr", 3e-4),
        ("ddp.bucket_size", None),
    )
    # an enum's member is set as itself, by reference to the framework's class
    assert check(("model.attention_backend=flash",), "megatron_bridge") == (
        ("model.attention_backend", {"ref": "megatron.core.transformer.enums:AttnBackend.flash"}),
    )
    with pytest.raises(
        UsageError,
        match=r"model.recompute_num_layers takes a whole number from 0 to 9,007,199,254,740,992 "
        r"\(ASCII digits\) or null\.",
    ):
        check(("model.recompute_num_layers=two",), "megatron_bridge")
    with pytest.raises(UsageError, match=r"takes one of full, selective or null"):
        check(("model.recompute_granularity=fast",), "megatron_bridge")
    with pytest.raises(UsageError, match=r"train.manual_gc takes true or false\."):
        check(("train.manual_gc=null",), "megatron_bridge")
    with pytest.raises(UsageError, match=r"expected PATH=VALUE"):
        check(("model.recompute_granularity",), "megatron_bridge")
    with pytest.raises(UsageError, match=r"this run's engine \(torch\) has none"):
        check(("a=1",), "torch")


def test_an_unknown_path_names_the_closest_fields():
    with pytest.raises(UsageError) as err:
        fields.check(("model.recompute_granularty=full",), "megatron_bridge")
    assert "not a plain-valued field of the megatron_bridge configuration" in str(err.value)
    assert "Did you mean: model.recompute_granularity" in str(err.value)
    with pytest.raises(
        UsageError, match=r"Did you mean: trainer.strategy.tensor_model_parallel_size"
    ):
        fields.check(("trainer.strategy.tensor_parallel_size=2",), "nemo2")


def test_the_catalogue_is_what_the_frameworks_have():
    shipped = fields.catalogue()
    assert set(shipped) == {"megatron_bridge", "nemo2"}
    assert shipped["megatron_bridge"]["model.tensor_model_parallel_size"] == {
        "type": "int",
        "null": False,
    }
    assert shipped["nemo2"]["trainer.max_steps"] == {"type": "int", "null": False}
    assert len(shipped["megatron_bridge"]) > 500 and len(shipped["nemo2"]) > 300


def test_a_run_with_framework_args_is_tuned_and_they_come_last(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sinfo: the dry run goes on
    out = cli(
        "run",
        *B200_8B,
        "--backend",
        "slurm",
        "--dry-run",
        "--bare",
        "--json",
        "--framework-arg",
        "model.recompute_granularity=full",
        "--framework-arg",
        "ddp.bucket_size=40000000",
    )
    assert out.code == 0, out.err
    spec = json.loads(out.out)["run_spec"]
    assert spec["experiment"].endswith("_mbs2_gbs128_tuned")
    overrides = list(spec["framework_config"]["overrides"].items())
    assert overrides[-2:] == [
        ("model.recompute_granularity", "full"),
        ("ddp.bucket_size", 40000000),
    ]
    assert spec["framework_config"]["framework_args"] == {
        "model.recompute_granularity": "full",
        "ddp.bucket_size": 40000000,
    }


def test_a_bad_framework_arg_exits_2_before_anything_is_written(cli, monkeypatch, tmp_path):
    install = tmp_path / "install"
    monkeypatch.setenv("LLMB_INSTALL", str(install))
    monkeypatch.setenv("PATH", str(tmp_path))
    out = cli(
        "run",
        *B200_8B,
        "--backend",
        "slurm",
        "--bare",
        "--detach",
        "--framework-arg",
        "ddp.bucket_sise=1",
    )
    assert out.code == 2 and "Did you mean: ddp.bucket_size" in out.err, out.err
    assert not (install / "workloads").exists() and not (install / "jobs").exists()


def test_the_torch_engine_has_no_framework_configuration(cli):
    out = cli(
        "run",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        "1",
        "--proxy",
        "tiny",
        "--dry-run",
        "--framework-arg",
        "model.recompute_granularity=full",
    )
    assert out.code == 2 and "this run uses the torch engine" in out.err and "--set" in out.err, (
        out.err
    )
