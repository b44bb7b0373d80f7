"""Short training runs of tiny models, unsharded and under each parallel layout.

``tests/test_engine_pipeline_experts.py`` runs the unsharded reference in its
own process and each layout here, one real process per rank
(``python engine_parallel_runs.py SCENARIO RANK WORLD STORE OUT``), with
gloo over a file store (no ports to race for). Every run trains the way the
engine does (``llmb.engines.torch.train``: AdamW with its betas and weight decay,
the learning-rate schedule, clipping at 1.0, loss / GA per micro-batch) on
the same global batches, and writes its per-step losses and gradient norms
as JSON.
"""

from __future__ import annotations

import contextlib
import json
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F

SEED = 7
SEQ = 32


@dataclass(frozen=True)
class Layout:
    workload: str
    steps: int
    mbs: int  # rows per micro-batch on each data-parallel rank
    ga: int
    dp: int = 1  # data-parallel ranks (each sees its own rows of the global batch)


def tiny_model(workload: str):
    """The workload's tiny proxy of its smallest size, initialised from SEED (the same on every rank)."""
    from llmb.engines.torch import blocks
    from llmb.plugins.host import PluginHost
    from llmb.recipes.proxies import shrink

    host = PluginHost()
    spec = host.workload(workload)
    arch = shrink(spec.architecture(spec.sizes()[0]), "tiny")
    torch.manual_seed(SEED)
    return blocks.initialize(host.build_model(spec, arch)), arch


def global_batch(layout: Layout, vocab: int, step: int) -> torch.Tensor:
    """The step's tokens, ``[dp * ga * mbs, SEQ + 1]``: data-parallel rank d owns rows ``d * ga * mbs`` on."""
    generator = torch.Generator().manual_seed(SEED * 1000 + step)
    return torch.randint(
        0, vocab, (layout.dp * layout.ga * layout.mbs, SEQ + 1), generator=generator
    )


def optimizer(parameters):
    from llmb.engines.torch.optim import make_optimizer

    return make_optimizer(parameters)  # the engine's own AdamW


def set_lr(opt, step: int) -> None:
    from llmb.engines.torch.optim import learning_rate

    for group in opt.param_groups:
        group["lr"] = learning_rate(step)


def loss_of(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))


def reference(layout: Layout, float8: str | None = None) -> dict:
    """The unsharded model on the whole global batch (GA over all of it), in one process.
    ``float8``: the model converted with ``apply_float8`` (emulated on CPU) first."""
    from llmb.engines.torch.optim import CLIP_NORM

    torch.set_num_threads(1)
    model, arch = tiny_model(layout.workload)
    if float8:
        from llmb.engines.torch.parallel.float8 import apply_float8

        apply_float8(model, float8, emulate=True)
    opt = optimizer(model.parameters())
    losses, norms = [], []
    micro = layout.dp * layout.mbs  # the global batch in GA micro-batches, each all DP ranks' rows
    for step in range(1, layout.steps + 1):
        set_lr(opt, step)
        tokens = global_batch(layout, arch.vocab, step)
        rows = (
            tokens.view(layout.dp, layout.ga, layout.mbs, SEQ + 1)
            .transpose(0, 1)
            .reshape(layout.ga, micro, -1)
        )
        total = 0.0
        for chunk in rows:
            loss = loss_of(model(chunk[:, :-1]), chunk[:, 1:]) / layout.ga
            loss.backward()
            total += loss.item()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)))
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(total)
    return {"losses": losses, "grad_norms": norms}


# --------------------------------------------------------------------------
# Layouts, one process per rank


def pipeline_run(rank: int, world: int, vp: int) -> dict:
    """PP over all ``world`` ranks (vp virtual stages each), one pipeline, no DP."""
    import torch.distributed as dist
    from llmb.engines.torch.optim import CLIP_NORM
    from llmb.engines.torch.parallel.gradnorm import clip_layout_grad_norm_
    from llmb.engines.torch.parallel.pipeline import apply_pipeline

    layout = PIPELINE
    model, arch = tiny_model(layout.workload)
    group = dist.new_group(list(range(world)))
    pipe = apply_pipeline(model, group, layout.ga, vp)
    opt = optimizer(pipe.parameters())
    losses, norms = [], []
    for step in range(1, layout.steps + 1):
        set_lr(opt, step)
        tokens = global_batch(layout, arch.vocab, step)
        loss = pipe.step(tokens[:, :-1], tokens[:, 1:])
        norms.append(float(clip_layout_grad_norm_(pipe, CLIP_NORM, torch.device("cpu"))))
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss))
    names = sorted(name for module in pipe.modules for name, _ in module.named_parameters())
    return {"losses": losses, "grad_norms": norms, "stages": pipe.stage_ids, "parameters": names}


def expert_train_run(rank: int, world: int) -> dict:
    """EP over all ``world`` ranks, which are also the data-parallel ranks (edp 1): each rank trains on
    its own rows under DDP, which leaves the experts to ``reduce_expert_gradients``."""
    import torch.distributed as dist
    from llmb.engines.torch.optim import CLIP_NORM
    from llmb.engines.torch.parallel.experts import (
        apply_expert_parallel,
        expert_parameter_names,
        reduce_expert_gradients,
    )
    from llmb.engines.torch.parallel.gradnorm import clip_layout_grad_norm_
    from torch.nn.parallel import DistributedDataParallel

    layout = EXPERTS
    model, arch = tiny_model(layout.workload)
    group = dist.new_group(list(range(world)))
    converted = apply_expert_parallel(model, group)
    names = expert_parameter_names(model)
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, names)
    ddp = DistributedDataParallel(model)
    opt = optimizer(model.parameters())
    losses, norms = [], []
    for step in range(1, layout.steps + 1):
        set_lr(opt, step)
        mine = global_batch(layout, arch.vocab, step).view(world, layout.ga, layout.mbs, SEQ + 1)[
            rank
        ]
        total = torch.zeros(())
        for micro, chunk in enumerate(mine):
            with ddp.no_sync() if micro < layout.ga - 1 else contextlib.nullcontext():
                loss = loss_of(ddp(chunk[:, :-1]), chunk[:, 1:]) / layout.ga
                loss.backward()
            total += loss.detach()
        reduce_expert_gradients(ddp)
        norms.append(float(clip_layout_grad_norm_(ddp, CLIP_NORM, torch.device("cpu"))))
        opt.step()
        opt.zero_grad(set_to_none=True)
        dist.all_reduce(total)
        losses.append(float(total) / world)
    return {"losses": losses, "grad_norms": norms, "converted": converted, "experts": names}


def parallelize_run(rank: int, world: int, layout: Layout, sizes: dict) -> dict:
    """The engine's way in: ``parallelize`` with a ``ParallelLayout`` of ``sizes``, then the step the
    module it returns asks for (a pipeline's ``step``, or GA forward/backward passes), expert
    gradients finished, clipping over the layout (``clip_layout_grad_norm_``)."""
    import torch.distributed as dist
    from llmb.engines.torch import parallel
    from llmb.engines.torch.optim import CLIP_NORM
    from llmb.engines.torch.parallel.experts import reduce_expert_gradients
    from llmb.engines.torch.parallel.gradnorm import clip_layout_grad_norm_
    from llmb.engines.torch.parallel.pipeline import Pipeline
    from parallel_layout_ranks import run_spec

    spec = run_spec(
        {
            "workload": layout.workload,
            "layout": sizes,
            "ga": layout.ga,
            "rows": layout.dp * layout.mbs,
            "steps": layout.steps,
        },
        world,
    )
    assert spec.layout.dp(world) == layout.dp
    model, arch = tiny_model(layout.workload)
    module = parallel.parallelize(model, spec, world)
    replica = parallel.data_rank(spec.layout, world, rank)
    opt = optimizer(module.parameters())
    losses, norms = [], []
    for step in range(1, layout.steps + 1):
        set_lr(opt, step)
        mine = global_batch(layout, arch.vocab, step).view(
            layout.dp, layout.ga * layout.mbs, SEQ + 1
        )[replica]
        if isinstance(module, Pipeline):
            total = module.step(mine[:, :-1], mine[:, 1:])
        else:
            total = torch.zeros(())
            for micro, chunk in enumerate(mine.view(layout.ga, layout.mbs, SEQ + 1)):
                with (
                    parallel.no_sync(module) if micro < layout.ga - 1 else contextlib.nullcontext()
                ):
                    loss = loss_of(module(chunk[:, :-1]), chunk[:, 1:]) / layout.ga
                    loss.backward()
                total += loss.detach()
        reduce_expert_gradients(model)
        norms.append(float(clip_layout_grad_norm_(module, CLIP_NORM, torch.device("cpu"))))
        opt.step()
        opt.zero_grad(set_to_none=True)
        dist.all_reduce(total)
        losses.append(float(total) / world)
    return {"losses": losses, "grad_norms": norms, "module": type(module).__name__}


def moe_block(config: dict):
    """A lone ``RoutedMoE`` from SEED, with probe tokens and a probe to weigh its output with."""
    from llmb.engines.torch.blocks import RoutedMoE

    torch.manual_seed(SEED)
    moe = RoutedMoE(**config)
    tokens = torch.randn(2, MOE_TOKENS, config["hidden"])  # rank r's tokens: row r
    probe = torch.randn(2, MOE_TOKENS, config["hidden"])
    return moe, tokens, probe


def expert_block_run(rank: int, world: int, out: str) -> dict:
    """Each MoE_CONFIGS layer under EP on this rank's tokens: its output, the gradient of
    ``sum(output * probe)`` for its tokens and its parameters (saved to ``out``.pt)."""
    import torch.distributed as dist
    from llmb.engines.torch.parallel.experts import ExpertParallelMoE

    group = dist.new_group(list(range(world)))
    saved = {}
    for label, config in MOE_CONFIGS.items():
        moe, tokens, probe = moe_block(config)
        layer = ExpertParallelMoE(moe, group)
        x = tokens[rank].clone().requires_grad_(True)
        y = layer(x)
        (y * probe[rank]).sum().backward()
        saved[label] = {
            "output": y.detach(),
            "input_grad": x.grad,
            "grads": {name: p.grad for name, p in layer.named_parameters() if p.grad is not None},
            "parameters": sorted(name for name, _ in layer.named_parameters()),
        }
    torch.save(saved, out + ".pt")
    return {"configs": list(saved)}


PIPELINE = Layout("llama31", steps=4, mbs=2, ga=4)
EXPERTS = Layout("llama4", steps=4, mbs=2, ga=2, dp=2)
PIPELINE_DP = Layout("llama31", steps=3, mbs=1, ga=4, dp=2)
MOE_TOKENS = 6
MOE_CONFIGS = {  # Llama 4's routing (sigmoid, weights before the expert, shared expert) and Mixtral-style
    "llama4": dict(
        hidden=16, experts=8, moe_ffn=32, topk=1, shared_ffn=24, score="sigmoid", weight_inputs=True
    ),
    "top2": dict(hidden=16, experts=4, moe_ffn=32, topk=2, score="softmax", weight_inputs=False),
    # DeepSeek-V3's: sigmoid scores, the correction bias, the best 2 of 4 groups, renormalised and scaled
    "deepseek": dict(
        hidden=16,
        experts=8,
        moe_ffn=32,
        topk=2,
        shared_ffn=16,
        score="sigmoid",
        score_correction=True,
        expert_groups=4,
        topk_groups=2,
        normalize=True,
        scaling=2.5,
    ),  # fmt: skip
}

SCENARIOS = {
    "pp": lambda rank, world: pipeline_run(rank, world, vp=1),
    "pp-vp2": lambda rank, world: pipeline_run(rank, world, vp=2),
    "ep-train": lambda rank, world: expert_train_run(rank, world),
    "ep-block": expert_block_run,
    "parallelize-pp2-dp2": lambda rank, world: parallelize_run(rank, world, PIPELINE_DP, {"pp": 2}),
    "parallelize-pp2-vp2-dp2": lambda rank, world: parallelize_run(
        rank, world, PIPELINE_DP, {"pp": 2, "vp": 2}
    ),
    "parallelize-ep2": lambda rank, world: parallelize_run(rank, world, EXPERTS, {"ep": 2}),
}


def main(argv: list[str]) -> None:
    from gloo_ranks import gloo_group

    scenario, rank, world, store, out = argv[0], int(argv[1]), int(argv[2]), argv[3], argv[4]
    with gloo_group(rank, world, store):
        run = SCENARIOS[scenario]
        result = run(rank, world, out) if scenario == "ep-block" else run(rank, world)
        with open(out, "w") as handle:
            json.dump(result, handle)


if __name__ == "__main__":
    main(sys.argv[1:])
    from llmb.worker import end_without_finalizing

    # as the worker ends a finished rank: no distributed teardown in finalization
    end_without_finalizing(0)
