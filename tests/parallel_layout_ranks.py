"""One rank of a parallel-layout equivalence run (``tests/test_engine_parallel.py``).

``python parallel_layout_ranks.py CONFIG RANK WORLD STORE OUT`` builds a
workload's model at a tiny width that tensor parallelism can split (4 heads
in 2 KV groups), lays it out with ``llmb.engines.torch.parallel.parallelize`` as
CONFIG's layout asks, and trains it for a few steps the way the engine
does (AdamW with the engine's settings and schedule, loss / GA per
micro-batch, clipping at 1.0), with gloo over a file store (no ports to
race for). Every step's global batch is the same whatever the layout:
``GA`` micro-batches of ``rows`` sequences, each data-parallel replica
taking its share of the rows. Rank 0 writes the per-step losses and
gradient norms as JSON to OUT, and the trained weights, whole and under the
unsharded model's names, to OUT + ``.pt``. With WORLD 1 it is the unsharded
reference (no process group). With ``"engine": true`` in CONFIG the ranks run
``llmb.engines.torch.train.Engine`` itself instead (its own process group, env://).
"""

from __future__ import annotations

import contextlib
import json
import sys
from dataclasses import replace

import torch

SEED = 11
SEQ = 16


def tiny_arch(workload: str):
    """The workload's tiny proxy at width 64, 4 heads in 2 KV groups, a short vocabulary, and the fewest
    layers that keep its structure (attention + MLP; + MoE; Mamba2 + attention + MLP)."""
    from llmb.plugins.host import PluginHost
    from llmb.recipes.proxies import shrink

    spec = PluginHost().workload(workload)
    arch = shrink(spec.architecture(spec.sizes()[0]), "tiny")
    small = dict(hidden=64, heads=4, query_groups=2, head_dim=16, ffn=96, vocab=128, layers=2)
    if arch.experts:
        small.update(experts=4, moe_ffn=32, shared_expert_ffn=32)
    if arch.layer_pattern:
        small.update(
            layer_pattern="M*-",
            layers=3,
            mamba_heads=8,
            mamba_head_dim=16,
            mamba_groups=2,
            mamba_state=8,
            mamba_chunk=8,
        )
    return replace(arch, **small)


def tiny_model(workload: str):
    from llmb.engines.torch import blocks
    from llmb.plugins.host import PluginHost

    host = PluginHost()
    arch = tiny_arch(workload)
    torch.manual_seed(SEED)
    return blocks.initialize(host.build_model(host.workload(workload), arch)), arch


def first_qkv(model):
    """The fused q|k|v projection of the model's first attention."""
    return next(module.qkv_proj for module in model.modules() if hasattr(module, "qkv_proj"))


def run_spec(config: dict, world: int):
    """A RunSpec with the layout and the few fields ``parallelize`` reads."""
    from llmb.runs.runspec import ParallelLayout, RunSpec

    layout = ParallelLayout(**config.get("layout", {}))
    return RunSpec(
        job_id="test",
        workload=config["workload"],
        variant="test",
        framework="megatron_bridge",
        engine="torch",
        size="tiny",
        arch={},
        proxy="tiny",
        gpu="cpu",
        dtype="bf16",
        compute_dtype="float32",
        device="cpu",
        ranks=world,
        mbs=1,
        ga=config["ga"],
        gbs=config["rows"] * config["ga"],
        seq_len=SEQ,
        steps=config["steps"],
        seed=SEED,
        compile=False,
        flops_per_sample=0.0,
        experiment="test",
        run_dir="",
        inner_dir="",
        log="",
        layout=layout,
    )


def train(config: dict, rank: int, world: int) -> tuple[dict, dict]:
    """(losses and gradient norms per step, the whole trained weights) of this rank's run."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from llmb.engines.torch import parallel
    from llmb.engines.torch.optim import CLIP_NORM, learning_rate, make_optimizer
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import FSDPModule

    spec = run_spec(config, world)
    model, arch = tiny_model(config["workload"])
    # forward calls per decoder layer: a recomputed layer runs twice
    calls = [0] * len(model.layers)
    for index, layer in enumerate(model.layers):
        layer.register_forward_pre_hook(lambda *_, i=index: calls.__setitem__(i, calls[i] + 1))
    qkv_rows = first_qkv(model).weight.shape[0]
    module = parallel.parallelize(model, spec, world)
    optimizer = make_optimizer(model.parameters())
    dp = spec.layout.dp(world)
    replica = parallel.data_rank(spec.layout, world, rank)
    rows, ga = config["rows"], spec.ga
    losses, norms = [], []
    for step in range(1, spec.steps + 1):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step)
        generator = torch.Generator().manual_seed(SEED * 1000 + step)
        tokens = torch.randint(0, arch.vocab, (ga, rows, SEQ + 1), generator=generator)
        total = torch.zeros(())
        for micro in range(ga):
            mine = tokens[micro].chunk(dp)[replica]
            sync = parallel.no_sync(module) if micro < ga - 1 else contextlib.nullcontext()
            with sync, parallel.loss_context(spec):
                # the engine's call: the model returns the loss
                loss = module(mine[:, :-1], mine[:, 1:]) / ga
                loss.backward()
            total += parallel.plain(loss.detach())
        norm = parallel.plain(torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if world > 1:
            dist.all_reduce(total)
            total /= world
        losses.append(float(total))
        norms.append(float(norm))
    if config.get("checkpoint"):  # a distributed checkpoint as the engine saves one (.distcp)
        dcp.save({"model": get_model_state_dict(module)}, checkpoint_id=config["checkpoint"])
    weights = get_model_state_dict(
        module, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    qkv = first_qkv(model).weight
    facts = {
        "module": type(module).__name__,
        "parameter_kinds": sorted({type(p).__name__ for p in model.parameters()}),
        "fsdp_units": sum(isinstance(m, FSDPModule) for m in model.modules()),
        "checkpointed_layers": sum(isinstance(m, CheckpointWrapper) for m in model.layers),
        "layer_forward_calls": calls,
        # rows of the first q|k|v weight this rank holds, as a fraction of the whole
        "qkv_rows_held": (qkv.to_local() if hasattr(qkv, "to_local") else qkv).shape[0] / qkv_rows,
    }
    return {"losses": losses, "grad_norms": norms, **facts}, weights


def engine_steps(config: dict, rank: int, world: int) -> dict:
    """The engine itself (``llmb.engines.torch.train.Engine``) under CONFIG's layout: its per-step losses and
    gradient norms. It starts its own process group (env://: MASTER_ADDR and MASTER_PORT)."""
    import io
    from dataclasses import asdict

    from llmb.engines.torch.train import Engine
    from llmb.plugins.host import PluginHost

    spec = replace(
        run_spec(config, world), arch=asdict(tiny_arch(config["workload"])), mbs=config["rows"]
    )
    engine = Engine(spec, rank, world, rank, PluginHost())
    with contextlib.redirect_stdout(io.StringIO()):  # the start-up lines
        engine.build()
    losses, norms = [], []
    for step in range(1, spec.steps + 1):
        loss, norm, _ = engine.step(step)
        losses.append(loss)
        norms.append(norm)
    from torch.distributed.tensor import DTensor

    experts = sorted(
        {
            len(m.experts)
            for m in engine.model.modules()
            if hasattr(m, "experts") and hasattr(m, "router")
        }
    )
    held = engine.pipeline.parameters() if engine.pipeline else list(engine.model.parameters())
    engine.close()
    return {
        "losses": losses,
        "grad_norms": norms,
        "module": type(engine.module).__name__,
        "local_experts": experts,
        "sharded": any(isinstance(p.data, DTensor) for p in held),
        "held": sum((p.to_local() if isinstance(p.data, DTensor) else p).numel() for p in held),
    }


def main(argv: list[str]) -> None:
    from gloo_ranks import gloo_group

    config, rank, world, store, out = (
        json.loads(argv[0]),
        int(argv[1]),
        int(argv[2]),
        argv[3],
        argv[4],
    )
    if config.get("engine"):
        torch.set_num_threads(1)
        result = engine_steps(config, rank, world)
        if rank == 0:
            with open(out, "w") as handle:
                json.dump(result, handle)
        return
    with gloo_group(rank, world, store):
        result, weights = train(config, rank, world)
        if rank == 0:
            torch.save(weights, out + ".pt")
            with open(out, "w") as handle:
                json.dump(result, handle)


if __name__ == "__main__":
    main(sys.argv[1:])
    from llmb.worker import end_without_finalizing

    # as the worker ends a finished rank: no distributed teardown in finalization
    end_without_finalizing(0)
