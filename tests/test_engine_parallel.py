"""The torch engine's parallel layouts (``llmb.engines.torch.parallel``), against the unsharded model.

Every layout runs as real processes, one per rank, over gloo on this CPU
(``parallel_layout_ranks.py``), and trains a tiny model of a real workload
for a few optimizer steps on the same global batches as the unsharded
reference, which runs in this process. Equivalent means: the same loss and
gradient norm at every step, and the same weights afterwards (gathered
whole, under the unsharded model's names), to float32 round-off. Each run
also reports what the layout did to the model (FSDP units, DTensor
parameters, the share of a weight a rank holds, recomputed layers), so a
layout that silently did nothing fails too. One run goes through the
engine itself (``llmb.engines.torch.parallelize.wrap`` calls ``parallelize``).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip(
    "torch", reason="the torch engine needs torch (./dev.sh installs torch==2.13.0)"
)

import parallel_layout_ranks as ranks  # noqa: E402
from gloo_ranks import free_port  # noqa: E402
from llmb.engines.torch import parallel  # noqa: E402
from llmb.engines.torch.parallel import mesh  # noqa: E402
from llmb.engines.torch.parallel.tensor_parallel import canonical_order, rank_order  # noqa: E402
from llmb.errors import UsageError  # noqa: E402
from llmb.runs.runspec import ParallelLayout, RunSpec  # noqa: E402

RANKS = Path(__file__).with_name("parallel_layout_ranks.py")
HANG_GUARD = 900  # seconds: a run that takes longer is stuck (a collective some rank never joins)
RUN = {"rows": 2, "ga": 2, "steps": 3}  # two sequences per micro-batch, GA 2, three optimizer steps


@functools.cache
def _reference(workload: str, recompute_layers: int = 0) -> tuple[dict, dict]:
    threads = torch.get_num_threads()
    try:
        config = {"workload": workload, "layout": {"recompute_layers": recompute_layers}, **RUN}
        return ranks.train(config, rank=0, world=1)
    finally:
        torch.set_num_threads(threads)


def _run(
    tmp_path: Path, workload: str, world: int, engine: bool = False, **layout
) -> tuple[dict, dict | None]:
    """The layout's run over ``world`` rank processes: (rank 0's result, the whole trained weights).
    With ``engine`` the ranks run ``llmb.engines.torch.train.Engine`` itself (no weights come back)."""
    config = {
        "workload": workload,
        "layout": layout,
        **RUN,
        "checkpoint": str(tmp_path / "checkpoint"),
        "engine": engine,
    }
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "result.json"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    logs = [tmp_path / f"rank{rank}.log" for rank in range(world)]
    procs = []
    for rank, log in enumerate(logs):
        with open(log, "w") as handle:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        str(RANKS),
                        json.dumps(config),
                        str(rank),
                        str(world),
                        str(tmp_path / "store"),
                        str(out),
                    ],
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            )
    deadline = time.monotonic() + HANG_GUARD
    try:
        for proc in procs:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    failed = [(rank, proc.returncode) for rank, proc in enumerate(procs) if proc.returncode]
    assert not failed, f"ranks failed {failed}:\n" + "\n".join(
        log.read_text()[-4000:] for log in logs
    )
    return json.loads(out.read_text()), None if engine else torch.load(str(out) + ".pt")


def _assert_equivalent(result: dict, weights: dict, reference: tuple[dict, dict]) -> None:
    expected, expected_weights = reference
    assert result["losses"] == pytest.approx(expected["losses"], rel=1e-5)
    assert result["grad_norms"] == pytest.approx(expected["grad_norms"], rel=1e-5)
    assert sorted(weights) == sorted(expected_weights)
    for name, value in expected_weights.items():
        torch.testing.assert_close(
            weights[name], value, rtol=0, atol=2e-6, msg=lambda m, n=name: f"{n}: {m}"
        )


def _assert_checkpoint_reads_unsharded(tmp_path: Path, workload: str, weights: dict) -> None:
    """The layout's distributed checkpoint, read into the unsharded model, holds the trained weights."""
    import torch.distributed.checkpoint as dcp

    model, _ = ranks.tiny_model(workload)
    state = {"model": model.state_dict()}
    with warnings.catch_warnings():  # that no process group exists here is the point
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=str(tmp_path / "checkpoint"), no_dist=True)
    for name, value in weights.items():
        torch.testing.assert_close(
            state["model"][name], value, rtol=0, atol=0, msg=lambda m, n=name: f"{n}: {m}"
        )


# --------------------------------------------------------------------------
# Layouts against the unsharded model, real processes


def test_fsdp2_matches_unsharded(tmp_path):
    result, weights = _run(tmp_path, "llama31", 2, fsdp=True)
    assert result["fsdp_units"] == 1 + 2  # each decoder layer, then the root
    assert result["parameter_kinds"] == ["DTensor"]
    assert result["qkv_rows_held"] == 0.5  # each rank keeps half of every parameter
    _assert_equivalent(result, weights, _reference("llama31"))
    _assert_checkpoint_reads_unsharded(tmp_path, "llama31", weights)


@pytest.mark.parametrize("sequence_parallel", [False, True], ids=["tp", "tp-sp"])
def test_tensor_parallel_matches_unsharded(tmp_path, sequence_parallel):
    result, weights = _run(tmp_path, "llama31", 2, tp=2, sequence_parallel=sequence_parallel)
    assert result["parameter_kinds"] == ["DTensor"]
    assert result["qkv_rows_held"] == 0.5  # each rank holds its own heads' q|k|v
    assert result["fsdp_units"] == 0
    _assert_equivalent(result, weights, _reference("llama31"))
    # saved in the model's order, not the ranks'
    _assert_checkpoint_reads_unsharded(tmp_path, "llama31", weights)


@pytest.mark.parametrize(
    ("workload", "sequence_parallel"), [("llama4", False), ("nemotron4", True), ("nemotronh", True)]
)
def test_tensor_parallel_of_every_family(tmp_path, workload, sequence_parallel):
    """MoE (llama4) and Mamba2 (nemotronh) layers are computed whole by each TP rank; LayerNorm1p and the
    squared-ReLU MLP (nemotron4) split like Llama's."""
    result, weights = _run(tmp_path, workload, 2, tp=2, sequence_parallel=sequence_parallel)
    assert result["parameter_kinds"] == ["DTensor"]
    _assert_equivalent(result, weights, _reference(workload))


def test_fsdp2_with_tensor_parallel_2d(tmp_path):
    """World 4: TP 2 inside, FSDP over the 2 data-parallel replicas, sequence parallel."""
    result, weights = _run(tmp_path, "llama31", 4, tp=2, fsdp=True, sequence_parallel=True)
    assert result["fsdp_units"] == 3
    assert result["qkv_rows_held"] == 0.25  # half for TP, half of that for FSDP
    _assert_equivalent(result, weights, _reference("llama31"))
    _assert_checkpoint_reads_unsharded(tmp_path, "llama31", weights)


def test_data_parallel_beside_tensor_parallel_shards_gradients(tmp_path):
    """World 4, TP 2, no FSDP asked: the 2 replicas shard gradients and optimizer state (ZeRO-2)."""
    result, weights = _run(tmp_path, "llama31", 4, tp=2)
    assert result["fsdp_units"] == 3
    _assert_equivalent(result, weights, _reference("llama31"))


def test_activation_checkpointing_recomputes_and_matches(tmp_path):
    """Recompute of the first layer under DDP (data parallel only, as the engine always ran)."""
    result, weights = _run(tmp_path, "llama31", 2, recompute_layers=1)
    assert result["module"] == "DistributedDataParallel"
    assert result["checkpointed_layers"] == 1
    micro_batches = RUN["steps"] * RUN["ga"]
    # the first ran again in backward
    assert result["layer_forward_calls"] == [2 * micro_batches, micro_batches]
    _assert_equivalent(result, weights, _reference("llama31"))


def test_the_engine_under_tensor_parallel_trains_as_one_rank(tmp_path):
    """``llmb.engines.torch.train.Engine`` itself, TP 2 with sequence parallel over 2 ranks, against the engine
    on one rank: both ranks of the TP group read the one replica's batches, and the step computes the
    loss on the vocabulary-split logits."""
    result, _ = _run(tmp_path, "llama31", 2, engine=True, tp=2, sequence_parallel=True)
    threads = torch.get_num_threads()
    try:
        expected = ranks.engine_steps({"workload": "llama31", **RUN}, rank=0, world=1)
    finally:
        torch.set_num_threads(threads)
    assert expected["module"] == "CausalLM" and result["module"] == "CausalLM"
    # built as shards (on meta first)
    assert result["sharded"] and result["held"] < expected["held"]
    assert result["losses"] == pytest.approx(expected["losses"], rel=1e-5)
    assert result["grad_norms"] == pytest.approx(expected["grad_norms"], rel=1e-5)


def test_the_engine_under_pipeline_parallel_trains_as_one_rank(tmp_path):
    """The engine with PP 2 over 2 ranks (1F1B over the GA micro-batches, the loss broadcast from the last
    stage, the gradient norm over both stages) against the engine on one rank on the same batches."""
    result, _ = _run(tmp_path, "llama31", 2, engine=True, pp=2)
    threads = torch.get_num_threads()
    try:
        expected = ranks.engine_steps({"workload": "llama31", **RUN}, rank=0, world=1)
    finally:
        torch.set_num_threads(threads)
    # this stage's layers only
    assert result["module"] == "Pipeline" and result["held"] < expected["held"]
    assert result["losses"] == pytest.approx(expected["losses"], rel=1e-5)
    assert result["grad_norms"] == pytest.approx(expected["grad_norms"], rel=1e-5)


@pytest.fixture(scope="module")
def llama4_under_ddp(tmp_path_factory):
    """The engine under DDP on 2 ranks, Llama 4's tiny proxy: what each expert-parallel layout must match."""
    result, _ = _run(tmp_path_factory.mktemp("dp"), "llama4", 2, engine=True)
    assert result["module"] == "DistributedDataParallel" and result["local_experts"] == [4]
    return result


@pytest.mark.parametrize(
    ("world", "layout"),
    [
        (
            2,
            {"ep": 2},
        ),  # DDP for the dense layers, the experts spread over the 2 data-parallel ranks
        (2, {"ep": 2, "fsdp": True}),  # FSDP2 for the dense layers, the experts left out of it
        (
            4,
            {"ep": 2, "tp": 2, "sequence_parallel": True},
        ),  # Llama 4's layout in miniature (DP 2, ZeRO-2 over it)
        (
            4,
            {"ep": 2, "pp": 2},
        ),  # two pipeline stages, each with its own MoE layer's experts over EP
    ],
    ids=["ep", "ep-fsdp", "ep-tp-sp", "ep-pp"],
)
def test_the_engine_under_expert_parallel_layouts_trains_as_data_parallel(
    tmp_path, llama4_under_ddp, world, layout
):
    """The engine with the experts spread over EP 2 (tokens travel by all-to-all; under TP each TP rank
    computes the MoE alike) against the engine with the experts replicated under DDP, on the same 2
    data-parallel replicas' batches."""
    result, _ = _run(tmp_path, "llama4", world, engine=True, **layout)
    assert result["local_experts"] == [2]
    assert result["losses"] == pytest.approx(llama4_under_ddp["losses"], rel=1e-5)
    assert result["grad_norms"] == pytest.approx(llama4_under_ddp["grad_norms"], rel=1e-5)


def test_the_engine_under_fsdp_trains_as_data_parallel(tmp_path):
    """The engine with FSDP2 over 2 ranks (built on meta, each rank materialising its half of every
    parameter) against the engine under DDP on the same 2 ranks' batches."""
    sharded, _ = _run(tmp_path / "fsdp", "llama31", 2, engine=True, fsdp=True)
    replicated, _ = _run(tmp_path / "dp", "llama31", 2, engine=True)
    assert sharded["module"] == "FSDPCausalLM" and replicated["module"] == "DistributedDataParallel"
    assert sharded["sharded"] and sharded["held"] < replicated["held"]
    assert sharded["losses"] == pytest.approx(replicated["losses"], rel=1e-5)
    assert sharded["grad_norms"] == pytest.approx(replicated["grad_norms"], rel=1e-5)


def test_activation_checkpointing_in_one_process_is_exact():
    result, weights = _reference("llama31", recompute_layers=2)
    expected, expected_weights = _reference("llama31")
    assert result["checkpointed_layers"] == 2
    assert result["layer_forward_calls"] == [2 * RUN["steps"] * RUN["ga"]] * 2
    assert result["losses"] == expected["losses"]
    for name, value in expected_weights.items():
        torch.testing.assert_close(weights[name], value, rtol=0, atol=0)


# --------------------------------------------------------------------------
# The mesh and the checks, in this process


def test_grid_places_tensor_parallel_ranks_next_to_each_other():
    layout = ParallelLayout(tp=2, pp=2)
    places = [mesh.coordinates(layout, 8, rank) for rank in range(8)]
    assert places[0] == {"pp": 0, "dp": 0, "cp": 0, "tp": 0}
    assert places[1] == {"pp": 0, "dp": 0, "cp": 0, "tp": 1}
    assert places[2] == {"pp": 0, "dp": 1, "cp": 0, "tp": 0}
    assert places[4] == {"pp": 1, "dp": 0, "cp": 0, "tp": 0}
    # the ranks of one model replica read the same data; the replicas read different data
    assert [mesh.data_rank(layout, 8, rank) for rank in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert [mesh.data_rank(ParallelLayout(), 3, rank) for rank in range(3)] == [0, 1, 2]


@pytest.mark.parametrize(
    ("layout", "world", "says"),
    [
        (ParallelLayout(tp=4), 6, "does not divide 6 ranks"),
        (ParallelLayout(tp=2, ep=4), 4, "EP 4 does not divide the 2 data-parallel ranks"),
        (ParallelLayout(tp=0), 2, "TP 0"),
        (ParallelLayout(recompute_layers=-1), 1, "recompute_layers -1"),
    ],
)
def test_layouts_that_do_not_fit_the_ranks_are_usage_errors(layout, world, says):
    with pytest.raises(UsageError, match=says):
        mesh.check_layout(layout, world)


def _spec(**layout) -> RunSpec:
    return ranks.run_spec({"workload": "llama31", "layout": layout, **RUN}, world=2)


@pytest.mark.parametrize(
    ("layout", "world", "says"),
    [
        ({"cp": 2}, 2, "context parallel .* runs only on GPUs"),
        ({"tp": 2, "ep": 4}, 4, "EP 4 does not divide the 2 data-parallel ranks"),
        (
            {"tp": 2, "sequence_parallel": True, "seq": 15},
            2,
            "a sequence of 15 does not split evenly",
        ),
    ],
)
def test_layouts_it_cannot_apply_are_refused(layout, world, says):
    from dataclasses import replace

    seq = layout.pop("seq", ranks.SEQ)
    model, _ = ranks.tiny_model("llama31")
    with pytest.raises(UsageError, match=says):
        parallel.parallelize(model, replace(_spec(**layout), seq_len=seq), world)


def test_tensor_parallel_needs_heads_and_groups_it_can_split():
    from llmb.engines.torch.parallel.tensor_parallel import check_tensor_parallel

    model, _ = ranks.tiny_model("llama31")  # 4 heads in 2 KV groups
    check_tensor_parallel(model, 2)
    with pytest.raises(UsageError, match="4 attention heads in 2 KV groups"):
        check_tensor_parallel(model, 4)


def test_fused_rows_in_rank_order_and_back():
    parts = [4, 2, 2]  # q|k|v rows
    weight = torch.arange(8.0).unsqueeze(1)
    ordered = rank_order(weight, parts, 2)
    # rank 0: q rows 0-1, k row 4, v row 6; rank 1: q rows 2-3, k row 5, v row 7
    assert ordered.squeeze(1).tolist() == [0, 1, 4, 6, 2, 3, 5, 7]
    assert torch.equal(canonical_order(ordered, parts, 2), weight)


def test_one_rank_without_a_layout_is_the_model_itself():
    model, _ = ranks.tiny_model("llama31")
    spec = ranks.run_spec({"workload": "llama31", **RUN}, world=1)
    assert parallel.parallelize(model, spec, 1) is model
    assert all(type(p) is torch.nn.Parameter for p in model.parameters())
