"""The torch engine's training step (``llmb.engines.torch.train.Engine``), on CPU, in real processes.

Behaviour only, never speed (that is ``benchmarks/engine_throughput.py``'s
business): which optimizer and clipping kernels a step runs (seen through
torch.profiler), DDP's bucket views, per-block ``torch.compile``, both FLOP
counts on the start-up line, the garbage-collection cadence, and that two
data-parallel ranks train exactly as one rank on the same global batch.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import math
import os
import time
from dataclasses import replace

import pytest
import torch
from engine_throughput import engine_spec
from gloo_ranks import free_port
from llmb.engines.torch.model import flops_line
from llmb.engines.torch.optim import make_optimizer
from llmb.engines.torch.parallelize import compile_blocks, wants_compile
from llmb.engines.torch.runtime import GarbageCollection
from llmb.engines.torch.train import Engine
from llmb.recipes.flops import megatron_bridge_sample
from llmb.recipes.proxies import shrink

STEPS = 4
HANG_GUARD_S = 900  # generous: the machine running the tests may be loaded


def tiny_spec(
    host, ranks: int = 1, ga: int = 1, compile_: bool | None = False, workload: str = "llama31"
):
    work = host.workload(workload)
    arch = shrink(work.architecture(work.sizes()[0]), "tiny")
    return engine_spec(host, work, arch, seq=32, mbs=2, ga=ga, ranks=ranks, compile_=compile_)


def built(spec, host, engine_class=Engine) -> Engine:
    engine = engine_class(spec, 0, 1, 0, host)
    with contextlib.redirect_stdout(io.StringIO()):
        engine.build()
    return engine


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)  # the engine sets one thread per CPU rank


# --------------------------------------------------------------------------
# Optimizer and clipping


def test_optimizer_is_fused_where_the_device_has_a_kernel_else_foreach():
    cpu = make_optimizer([torch.nn.Parameter(torch.zeros(3))])
    # torch >= 2.4 has a CPU kernel
    assert cpu.defaults["fused"] is True and not cpu.defaults["foreach"]
    # no fused kernel there
    meta = make_optimizer([torch.nn.Parameter(torch.zeros(3, device="meta"))])
    assert meta.defaults["foreach"] is True and not meta.defaults["fused"]
    for opt in (cpu, meta):  # the benchmarks' AdamW settings either way
        assert (opt.defaults["betas"], opt.defaults["weight_decay"], opt.defaults["eps"]) == (
            (0.9, 0.95),
            0.1,
            1e-8,
        )


def test_a_step_runs_the_fused_adamw_and_multi_tensor_clipping_kernels(host):
    engine = built(tiny_spec(host), host)
    assert engine.optimizer.defaults["fused"] is True
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        loss, norm, seconds = engine.step(1)
    ops = {event.key: event.count for event in prof.key_averages()}
    assert ops.get("aten::_fused_adamw_") == 1  # one kernel call for every parameter
    # clip_grad_norm_(foreach=True): one call for every gradient's norm, one to scale them all
    # (on CPU, torch runs the foreach ops as loops inside the call; on GPU they are multi-tensor kernels)
    assert ops.get("aten::_foreach_norm") == 1 and ops.get("aten::_foreach_mul_") == 1
    assert (
        isinstance(loss, float)
        and isinstance(norm, float)
        and loss > 0
        and norm > 0
        and seconds > 0
    )
    assert engine.optimizer.state  # the step did update: AdamW has its moments now
    engine.close()


# --------------------------------------------------------------------------
# torch.compile per block


def test_compile_default_is_on_for_gpu_and_off_for_cpu():
    assert wants_compile(None, cuda=True) and not wants_compile(None, cuda=False)
    assert wants_compile(True, cuda=False) and not wants_compile(False, cuda=True)


def test_compile_per_block_wraps_each_layer_in_place(host):
    plain = built(tiny_spec(host, compile_=None), host)  # the CPU default: not compiled
    compiled = built(tiny_spec(host, compile_=True), host)
    assert all(layer._compiled_call_impl is None for layer in plain.model.layers)
    assert len(compiled.model.layers) >= 2
    assert all(layer._compiled_call_impl is not None for layer in compiled.model.layers)
    assert compiled.model._compiled_call_impl is None  # the blocks, not the whole model
    assert compiled.module is compiled.model  # one rank: no DDP wrapper
    # parameter names are unchanged (no _orig_mod.): a checkpoint reads compiled or not
    assert list(compiled.model.state_dict()) == list(plain.model.state_dict())
    for engine in (plain, compiled):
        engine.close()


def test_compile_blocks_on_a_hybrid_model(host):
    engine = built(tiny_spec(host, workload="nemotronh"), host)
    assert (
        compile_blocks(engine.model)
        == len(engine.model.layers)
        == len(engine.spec.model_arch().layer_kinds())
    )
    assert all(layer._compiled_call_impl is not None for layer in engine.model.layers)
    engine.close()


# --------------------------------------------------------------------------
# FLOP counts


def test_startup_line_gives_both_flop_counts(host, capsys):
    workload = host.workload("llama31")
    arch = workload.architecture("8b")
    spec = engine_spec(host, workload, arch, seq=8192, mbs=1, ga=1, ranks=8, compile_=None)
    line = flops_line(spec)
    megatron = megatron_bridge_sample(arch, 8192).per_sample
    assert f"{spec.flops_per_sample:.4e}" in line and f"{megatron:.4e}" in line
    assert f"x {megatron / spec.flops_per_sample:.4f}" in line
    # full vs causal attention at 8B/8k
    assert spec.flops_per_sample / megatron == pytest.approx(1.125, abs=1e-3)
    hybrid = tiny_spec(host, workload="nemotronh")
    assert "does not describe" in flops_line(hybrid)
    engine = Engine(tiny_spec(host), 0, 1, 0, host)
    engine.build()
    assert flops_line(engine.spec) in capsys.readouterr().out.splitlines()
    engine.close()


def test_an_fp8_recipe_trains_in_float8_and_records_the_precision_it_used(
    host, tmp_path, monkeypatch, capsys
):
    """An fp8 row converts the linear layers to torchao float8 (emulated on CPU when asked), says so on the
    start-up lines, and records what it computed in beside the planned compute dtype in recipe.json."""
    pytest.importorskip("torchao", reason="float8 training needs torchao (./dev.sh installs it)")
    from llmb.engines.torch.parallel.float8 import _torchao_float8

    # imported as the engine imports it (quietly)
    Float8Linear = _torchao_float8().float8_linear.Float8Linear

    (tmp_path / "recipe.json").write_text(json.dumps({"compute_dtype": "float32"}))
    spec = replace(tiny_spec(host), dtype="fp8", run_dir=str(tmp_path))
    monkeypatch.setenv("LLMB_FLOAT8_EMULATE", "1")
    engine = Engine(spec, 0, 1, 0, host)
    engine.build()
    converted = [
        name for name, module in engine.model.named_modules() if isinstance(module, Float8Linear)
    ]
    assert converted and not any(name.endswith(("output", "router")) for name in converted)
    losses = [engine.step(step)[0] for step in range(1, 3)]
    engine.close()
    assert all(loss == loss for loss in losses)  # finite: the float8 casts trained
    assert "[llmb] precision: fp8-tensorwise-emulated" in capsys.readouterr().out.splitlines()
    assert json.loads((tmp_path / "recipe.json").read_text()) == {
        "compute_dtype": "float32",
        "compute_precision": "fp8-tensorwise-emulated",
    }

    # without emulation a CPU run computes in float32 and says why
    monkeypatch.delenv("LLMB_FLOAT8_EMULATE")
    engine = built(spec, host)
    engine.close()
    assert json.loads((tmp_path / "recipe.json").read_text())["compute_precision"] == "float32"
    assert not any(isinstance(module, Float8Linear) for module in engine.model.modules())


# --------------------------------------------------------------------------
# Garbage collection


def test_garbage_collection_runs_on_the_cadence_and_only_then(host):
    class EveryTwo(Engine):
        gc_every = 2

    collections: list[int] = []

    def record(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    assert gc.isenabled()
    engine = built(tiny_spec(host), host, EveryTwo)
    gc.callbacks.append(record)
    try:
        per_step = []
        for step in range(1, 6):
            engine.step(step)
            assert not gc.isenabled()
            per_step.append(list(collections))
            garbage = [[]]
            garbage[0].append(garbage)  # a cycle: automatic collection would find it, were it on
            del garbage
    finally:
        gc.callbacks.remove(record)
        engine.close()
    # generations 0-1 after steps 2 and 4, nothing else
    assert per_step == [[], [1], [1], [1, 1], [1, 1]]
    assert gc.isenabled()


def test_garbage_collection_leaves_a_disabled_collector_disabled():
    gc.disable()
    try:
        cadence = GarbageCollection(every=3)
        cadence.start()
        cadence.stop()
        assert not gc.isenabled()
    finally:
        gc.enable()


# --------------------------------------------------------------------------
# Two ranks against one


class OneRankForTwo(Engine):
    """One rank drawing the micro-batches two data-parallel ranks would draw: each step, rank 0's GA
    micro-batches (its generator), then rank 1's. GA doubles, so the global batch is the same."""

    def build(self) -> None:
        super().build()
        seed = self.spec.seed * 1000
        self.generators = [torch.Generator().manual_seed(seed + rank) for rank in (0, 1)]
        self.drawn = 0

    def micro_batch(self):
        per_rank = self.spec.ga // 2
        self.generator = self.generators[(self.drawn // per_rank) % 2]
        self.drawn += 1
        return super().micro_batch()


def _rank_main(rank: int, spec_dict: dict, port: int, out_dir: str) -> None:
    from llmb.plugins.host import PluginHost
    from llmb.runs.runspec import RunSpec
    from llmb.worker import end_without_finalizing

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    spec = RunSpec.from_dict(spec_dict)
    engine = Engine(spec, rank, spec.ranks, rank, PluginHost())
    with contextlib.redirect_stdout(io.StringIO()):
        engine.build()
    trajectory = [engine.step(step)[:2] for step in range(1, STEPS + 1)]
    module = engine.module
    facts = {
        "ddp": type(module).__name__,
        "bucket_view": getattr(module, "gradient_as_bucket_view", None),
        "compiled": [layer._compiled_call_impl is not None for layer in engine.model.layers],
    }
    engine.close()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as handle:
        json.dump({"trajectory": trajectory, **facts}, handle)
    # as the worker ends a finished rank: no distributed teardown in finalization
    end_without_finalizing(0)


def run_two_ranks(spec, out_dir) -> list[dict]:
    import torch.multiprocessing as mp

    context = mp.start_processes(
        _rank_main,
        args=(spec.to_dict(), free_port(), str(out_dir)),
        nprocs=2,
        start_method="spawn",
        join=False,
    )
    deadline = time.monotonic() + HANG_GUARD_S
    while not context.join(timeout=5):  # raises when a rank failed
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(
                f"two ranks still running after {HANG_GUARD_S} s (a hang guard, not a speed check)"
            )
    return [json.loads((out_dir / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def test_two_ranks_with_ddp_train_as_one_rank_on_the_same_global_batch(host, tmp_path):
    spec = tiny_spec(host, ranks=2, ga=2)
    ranks = run_two_ranks(spec, tmp_path)
    for result in ranks:
        assert result["ddp"] == "DistributedDataParallel" and result["bucket_view"] is True
        assert not any(result["compiled"])  # CPU default
    # the logged loss is the mean over ranks
    assert ranks[0]["trajectory"] == ranks[1]["trajectory"]

    one = built(replace(spec, ranks=1, ga=4, gbs=spec.gbs), host, OneRankForTwo)
    expected = [one.step(step)[:2] for step in range(1, STEPS + 1)]
    one.close()
    # random tokens: no trend in 4 steps
    assert all(math.isfinite(loss) and norm > 0 for loss, norm in expected)
    torch.testing.assert_close(
        torch.tensor(ranks[0]["trajectory"]), torch.tensor(expected), rtol=2e-5, atol=1e-6
    )


def test_compiled_blocks_train_as_the_eager_model(host):
    eager, compiled = (
        built(tiny_spec(host, ga=2), host),
        built(tiny_spec(host, ga=2, compile_=True), host),
    )
    expected = [eager.step(step)[:2] for step in range(1, 3)]
    got = [compiled.step(step)[:2] for step in range(1, 3)]
    for engine in (eager, compiled):
        engine.close()
    torch.testing.assert_close(torch.tensor(got), torch.tensor(expected), rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------
# The per-step hook (llmb_before_step), through the tests' fault plugin


def test_a_plugin_named_in_llmb_plugins_fails_a_rank_or_makes_the_loss_nan_before_a_step(
    host, monkeypatch, capsys
):
    import fault_plugin
    from llmb.engines.torch.train import run
    from llmb.plugins.host import PluginHost

    monkeypatch.setenv("LLMB_PLUGINS", "fault_plugin")
    faulty = PluginHost()  # what the worker makes in a rank that inherited the variable
    assert faulty.pm.get_plugin("fault_plugin") is fault_plugin
    spec = replace(tiny_spec(host), steps=3)

    monkeypatch.setenv("LLMB_NAN_FROM_STEP", "2")
    engine = Engine(spec, 0, 1, 0, faulty)
    run(engine)
    engine.close()
    losses = [
        line.split("lm loss: ")[1].split(" |")[0]
        for line in capsys.readouterr().out.splitlines()
        if " iteration " in line
    ]
    assert len(losses) == 3 and losses[0] != "NAN" and losses[1:] == ["NAN", "NAN"]

    monkeypatch.delenv("LLMB_NAN_FROM_STEP")
    monkeypatch.setenv("LLMB_FAIL_AT_STEP", "2")
    engine = Engine(spec, 0, 1, 0, faulty)
    try:
        with pytest.raises(
            RuntimeError, match=r"^injected failure at step 2 on rank 0 \(LLMB_FAIL_AT_STEP\)$"
        ):
            run(engine)
    finally:
        engine.close()
    assert sum(" iteration " in line for line in capsys.readouterr().out.splitlines()) == 1
