"""A crafted checkpoint directory must not run code: its ``.metadata`` index is
a pickle that torch's own reader would ``pickle.load``. llmb reads it with an
allowlist at submission and again in the torch engine's loader."""

from __future__ import annotations

import os
import pickle

import pytest

torch = pytest.importorskip("torch", reason="distributed checkpoints need torch")
import torch.distributed.checkpoint as dcp  # noqa: E402
from llmb.runs.checkpoint_metadata import UnsafeCheckpoint, check_metadata, safe_reader  # noqa: E402

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
    "1",
    "--proxy",
    "tiny",
)


class _Payload:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def crafted_checkpoint(directory, marker):
    """What an attacker leaves for a colleague: a .distcp file and an index that runs a command."""
    directory.mkdir(parents=True)
    (directory / "__0_0.distcp").write_bytes(b"\0" * 64)
    (directory / ".metadata").write_bytes(pickle.dumps({"model": _Payload(marker)}))
    return directory


def real_checkpoint(directory):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4)).to(torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4, dtype=torch.bfloat16)).float().sum().backward()
    optimizer.step()
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(directory))
    return model, optimizer


def test_a_crafted_index_is_refused_at_submission_and_runs_nothing(cli, tmp_path):
    marker = tmp_path / "pwned"
    checkpoint = crafted_checkpoint(tmp_path / "weights", marker)
    result = cli(*RUN, "--dry-run", "--checkpoint-load", str(checkpoint))
    assert result.code == 2 and "Traceback" not in result.err
    assert "refers to posix.system" in result.err and "llmb does not load it" in result.err
    assert not marker.exists()


def test_the_seeds_variable_is_checked_the_same_way(llmb_proc, tmp_path):
    marker = tmp_path / "pwned"
    crafted_checkpoint(tmp_path / "ckpt" / "weights", marker)
    result = llmb_proc(
        *RUN,
        "--dry-run",
        env={"LOAD_CHECKPOINT_PATH": str(tmp_path / "ckpt"), "LLMB_FORCE_CPU": "1"},
    )
    assert result.code == 2 and "refers to posix.system" in result.err
    assert not marker.exists()


def test_the_engines_loader_refuses_an_index_swapped_after_submission(tmp_path):
    """The check at submission is not the only one: the torch engine reads the index through the allowlist too."""
    good = tmp_path / "good"
    model, optimizer = real_checkpoint(good)
    check_metadata(str(good))
    marker = tmp_path / "pwned"
    (good / ".metadata").write_bytes(pickle.dumps({"x": _Payload(marker)}))
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    # torch wraps each rank's error in a CheckpointException (a BaseException)
    with pytest.raises(BaseException) as raised:
        dcp.load(
            {"model": model_state, "optim": optim_state}, storage_reader=safe_reader(str(good))
        )
    assert "refers to posix.system" in str(getattr(raised.value, "failures", raised.value))
    assert not marker.exists()


def test_a_checkpoint_torch_wrote_passes_and_loads_identically(tmp_path):
    model, optimizer = real_checkpoint(tmp_path / "ck")
    check_metadata(str(tmp_path / "ck"))
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    fresh = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4)).to(torch.bfloat16)
    fresh_optimizer = torch.optim.AdamW(fresh.parameters())
    model_state, optim_state = get_state_dict(fresh, fresh_optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, storage_reader=safe_reader(str(tmp_path / "ck")))
    set_state_dict(
        fresh, fresh_optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
    )
    for a, b in zip(model.state_dict().values(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    "content, needle",
    [
        (b"not a pickle at all", "is not a readable checkpoint index"),
        (pickle.dumps(__import__("subprocess").Popen), "refers to subprocess.Popen"),
        (b"cbuiltins\neval\n(S'1'\ntR.", "refers to builtins.eval"),
        (b"ctorch\nload\n(S'x'\ntR.", "refers to torch.load"),
    ],
)
def test_other_forbidden_or_broken_indexes(tmp_path, content, needle):
    (tmp_path / ".metadata").write_bytes(content)
    with pytest.raises(UnsafeCheckpoint, match=needle):
        check_metadata(str(tmp_path))
