"""Checkpoints of the torch engine: ``torch.distributed.checkpoint`` (``.distcp``) save and load.

``save(run, step)`` writes the model's and optimizer's state to the run's
``checkpoint_save_dir``, ``load(run)`` reads it back from
``checkpoint_load_dir`` (through ``llmb.runs.checkpoint_metadata.safe_reader``:
never ``pickle.load`` on the index). Rank 0 prints the save/load timing
lines of the workload's framework (``logfmt``), with the fastest and the
slowest rank's time, and the sha256 of the whole weights (``digest``),
which a test compares across a save and a load. ``run`` is the rank's
``llmb.engines.torch.train.Engine``; every rank must call these.
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import TYPE_CHECKING

from llmb.engines.torch import logfmt
from llmb.runs.checkpoint_metadata import safe_reader

if TYPE_CHECKING:
    from llmb.engines.torch.train import Engine


def state(run: Engine) -> dict:
    """The state a checkpoint holds: the model's and the optimizer's, as ``get_state_dict`` gives them."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(run.module, run.optimizer)
    return {"model": model_state, "optim": optim_state}


def digest(run: Engine) -> str:
    """sha256 over the model's weights, whole, in name order (on rank 0; every rank must call it)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    whole = get_model_state_dict(
        run.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    sha = hashlib.sha256()
    for name, tensor in sorted(whole.items()):
        sha.update(name.encode())
        sha.update(
            tensor.detach().to("cpu").contiguous().view(-1).view(run.torch.uint8).numpy().tobytes()
        )
    return sha.hexdigest()


def save(run: Engine, step: int) -> None:
    """Write the checkpoint of ``step`` to ``checkpoint_save_dir``."""
    import torch.distributed.checkpoint as dcp

    path = run.spec.checkpoint_save_dir
    os.makedirs(path, exist_ok=True)
    started = time.time()
    begin = time.perf_counter()
    dcp.save(state(run), checkpoint_id=path)
    ms = (time.perf_counter() - begin) * 1000
    low, high = run.reduce(ms, "min"), run.reduce(ms, "max")
    run.say(
        *logfmt.checkpoint_saved(run.spec.checkpoint_format, step, path, low, high, started),
        f"[llmb] weights sha256 after save: {digest(run)}",
    )


def load(run: Engine) -> None:
    """Read the model's and optimizer's state back from ``checkpoint_load_dir``."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    path = run.spec.checkpoint_load_dir
    started = time.time()
    begin = time.perf_counter()
    loaded = state(run)
    # never pickle.load on the index (llmb.runs.checkpoint_metadata)
    dcp.load(loaded, storage_reader=safe_reader(path))
    set_state_dict(
        run.module,
        run.optimizer,
        model_state_dict=loaded["model"],
        optim_state_dict=loaded["optim"],
    )
    ms = (time.perf_counter() - begin) * 1000
    low, high = run.reduce(ms, "min"), run.reduce(ms, "max")
    run.say(
        *logfmt.checkpoint_loaded(run.spec.checkpoint_format, path, low, high, started),
        f"[llmb] weights sha256 after load: {digest(run)}",
    )
