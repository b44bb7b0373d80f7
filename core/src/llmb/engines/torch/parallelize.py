"""Lay the built model out on the ranks: per-block compile, then the run's parallel layout.

``lay_out`` takes the model as ``model.build_on_meta`` left it and returns
the module to train. Each decoder layer is compiled on its own when asked
(``wants_compile``, ``compile_blocks``) before the wrapping, so DDP/FSDP
still reduce each bucket's gradients while backward goes on; the layout
itself is ``llmb.engines.torch.parallel.parallelize`` (DDP, FSDP2, tensor
parallel, pipeline stages, expert parallel, recompute). A sharded layout
(``sharded_build``) is wrapped on the meta device and only this rank's share
materialised; DDP starts from whole weights, initialised before wrapping.
"""

from __future__ import annotations

from llmb.engines.torch import parallel
from llmb.runs.runspec import RunSpec


def wants_compile(asked: bool | None, cuda: bool) -> bool:
    """Per-block ``torch.compile``: as asked (``--compile`` / ``--no-compile``), else on GPU only."""
    return cuda if asked is None else bool(asked)


def compile_blocks(model) -> int:
    """``torch.compile`` each decoder layer of ``model`` (its ``layers``) in place; how many.

    Per block, not the whole model: one compiled graph serves every layer of a kind, compile time does
    not grow with depth, and DDP/FSDP wrapped around the compiled layers still reduce each bucket's
    gradients while backward goes on. ``Module.compile`` keeps the parameter names (no ``_orig_mod``),
    so checkpoints read the same compiled or not."""
    layers = list(model.layers.children())
    for layer in layers:
        layer.compile()
    return len(layers)


def sharded_build(layout, world: int) -> bool:
    """Whether the model is laid out on the meta device and only this rank's share materialised: under
    FSDP, TP and PP (what a full-size row needs to fit); not under DDP, which starts from whole weights."""
    return world > 1 and (layout.fsdp or layout.tp > 1 or layout.pp > 1)


def wrap(model, spec: RunSpec, world: int, compile_: bool):
    """The module to train: ``model`` with each layer compiled when asked (first, so that the
    wrapping sees the compiled layers; compiling is lazy, so this works on meta weights too), laid
    out as the run's parallel layout asks (``llmb.engines.torch.parallel.parallelize``: DDP over the ranks
    when it is data parallel only, with gradients as views into DDP's reduction buckets; FSDP2,
    tensor parallel, pipeline stages, expert parallel, recompute)."""
    if compile_:
        compile_blocks(model)
    return parallel.parallelize(model, spec, world)


def prepare(modules, seq_len: int, device) -> None:
    """Build what the model would otherwise build on its first call, before any layer is traced: the
    RoPE tables of the run's sequence length on this device. A compiled layer graph broken around
    their construction was seen to fail intermittently in torch 2.13 (AOTAutograd replaying the views
    of q|k|v it returned: "shape '[<garbage>, ...]' is invalid")."""
    from llmb.engines.torch.blocks import RotaryEmbedding

    for module in modules:
        for sub in module.modules():
            if isinstance(sub, RotaryEmbedding):
                sub.angles(seq_len, device)


def lay_out(model, spec: RunSpec, world: int, device, compile_: bool):
    """``model`` (on the meta device) materialised on ``device``, initialised from ``spec.seed`` and laid
    out as ``spec.layout`` asks: the module to train (the model, its wrapper, or a ``Pipeline``)."""
    from llmb.engines.torch import blocks
    from llmb.engines.torch.parallel.materialize import materialize, meta_template
    from llmb.engines.torch.parallel.pipeline import Pipeline

    if sharded_build(spec.layout, world):
        template = meta_template(model)
        module = wrap(model, spec, world, compile_)
        stages = module.modules if isinstance(module, Pipeline) else None
        materialize(model, template, spec.seed, device, stages)
        prepare(stages or [model], spec.seq_len, device)
        return module
    # DDP (and EP's) wrapping starts from real weights: it checks them across ranks
    blocks.initialize(model.to_empty(device=device), spec.seed)
    prepare([model], spec.seq_len, device)
    return wrap(model, spec, world, compile_)
