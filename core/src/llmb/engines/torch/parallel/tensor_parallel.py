"""Tensor parallelism (TP) through DTensor's ``parallelize_module``.

Megatron's split of a decoder layer over the ``tp`` ranks of a group:

* attention: q, k and v projections column-wise (each rank computes
  ``heads / tp`` query heads and ``query_groups / tp`` KV heads, so the head
  counts of the module become the local ones), the output projection
  row-wise (its partial sums reduced over the group);
* dense MLP: gate and up projections column-wise, down row-wise;
* embedding row-wise (the vocabulary split), output layer column-wise with
  its logits left split over the vocabulary for loss parallel: the
  cross-entropy is computed on the shards (``loss_parallel()``) and the full
  logits never exist on one rank;
* sequence parallel (``sequence_parallel=True``): between the TP regions
  the residual stream and the norms are split along the sequence, so the
  row-wise outputs are reduce-scattered and the column-wise inputs
  all-gathered instead of all-reduced.

Modules without a TP split here (the Mamba2 mixer, the routed MoE, and the
norms when sequence parallel is off) are computed whole by every rank of the
group on the same input; their parameters become replicated DTensors all
the same, so that gradient clipping, the optimizer and FSDP see one kind of
parameter. Fused projections (one matrix for q, k and v, or for gate and
up) are split per part: each rank's rows are its share of every part.
"""

from __future__ import annotations

import functools

import torch
from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from llmb.engines.torch import blocks
from llmb.engines.torch.parallel.structure import decoder_layers, mark_reordered
from llmb.errors import UsageError

__all__ = ["ReplicatedCompute", "apply_tensor_parallel", "check_tensor_parallel"]


class ReplicatedCompute(ParallelStyle):
    """A module computed whole, alike, on every rank of the TP group.

    Its parameters become ``Replicate()`` DTensors; each call runs the
    module's own forward on their local tensors (the gradients flow back to
    the DTensors, equal on every rank) and on its input gathered whole. With
    ``sequence_parallel`` the output is split back along the sequence.
    """

    def __init__(self, sequence_parallel: bool) -> None:
        super().__init__()
        self.sequence_parallel = sequence_parallel

    def _apply(self, module: nn.Module, device_mesh) -> nn.Module:
        slots = []
        for sub in module.modules():
            for name, param in list(sub.named_parameters(recurse=False)):
                if not isinstance(param, DTensor):
                    sub.register_parameter(
                        name,
                        nn.Parameter(
                            distribute_tensor(param, device_mesh, [Replicate()]),
                            requires_grad=param.requires_grad,
                        ),
                    )
                slots.append((sub, name))
        module.forward = functools.partial(self._forward, module.forward, slots, device_mesh)
        return module

    def _forward(self, forward, slots, mesh, *args, **kwargs):
        args = tuple(
            a.redistribute(mesh, [Replicate()]).to_local() if isinstance(a, DTensor) else a
            for a in args
        )
        swapped = []
        try:
            # looked up per call: FSDP swaps its unsharded parameters in and out
            for sub, name in slots:
                param = sub._parameters[name]
                if isinstance(param, DTensor):
                    swapped.append((sub, name, param))
                    sub._parameters[name] = param.to_local()
            out = forward(*args, **kwargs)
        finally:
            for sub, name, param in swapped:
                sub._parameters[name] = param
        if self.sequence_parallel:
            out = DTensor.from_local(out, mesh, [Replicate()], run_check=False).redistribute(
                mesh, [Shard(1)]
            )
            out = out.to_local()
        return out


def rank_order(weight: torch.Tensor, parts: list[int], tp: int) -> torch.Tensor:
    """The rows of a fused projection (``parts`` laid end to end) reordered so that TP rank ``r``'s rows,
    the ``r``-th slice of every part, are contiguous: ``[p0_0 p1_0 .. | p0_1 p1_1 .. | ..]``."""
    slices = [part.chunk(tp, dim=0) for part in weight.split(parts, dim=0)]
    return torch.cat([piece[r] for r in range(tp) for piece in slices], dim=0)


def canonical_order(weight: torch.Tensor, parts: list[int], tp: int) -> torch.Tensor:
    """The inverse of ``rank_order``: the parts laid end to end again."""
    per_rank = [part // tp for part in parts]
    pieces = [block.split(per_rank, dim=0) for block in weight.chunk(tp, dim=0)]
    return torch.cat([pieces[r][i] for i in range(len(parts)) for r in range(tp)], dim=0)


def _reordered(tensor, reorder, like=None):
    """``reorder`` applied to the whole of ``tensor``, laid out again as ``like`` (default: as ``tensor``)."""
    like = tensor if like is None else like
    whole = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
    if not isinstance(like, DTensor):
        return reorder(whole)
    return distribute_tensor(reorder(whole), like.device_mesh, like.placements)


class FusedColwiseParallel(ColwiseParallel):
    """Column-wise split of a projection whose output is parts laid end to end
    (q|k|v, gate|up): rank ``r`` computes the ``r``-th slice of every part,
    so its local output is its own heads' q|k|v (or its own gate|up).

    The weight is kept in rank order (``rank_order``), a ``Shard(0)``
    DTensor. State dicts, and so distributed checkpoints, hold it in the
    model's own order (``canonical_order``), the same under any TP size;
    loading reorders it back.
    """

    def __init__(self, parts: list[int], **kwargs) -> None:
        super().__init__(**kwargs)
        self.parts = parts

    def _partition_linear_fn(self, name, module, device_mesh):
        tp = device_mesh.size()
        if sum(self.parts) != module.out_features or any(part % tp for part in self.parts):
            raise UsageError(
                f"tensor parallel {tp} cannot split a fused projection of parts {self.parts} evenly; "
                f"use a TP size that divides every part."
            )
        weight = module.weight.detach()
        module.register_parameter(
            "weight",
            nn.Parameter(
                distribute_tensor(rank_order(weight, self.parts, tp), device_mesh, [Shard(0)]),
                requires_grad=module.weight.requires_grad,
            ),
        )
        forward = functools.partial(rank_order, parts=self.parts, tp=tp)
        inverse = functools.partial(canonical_order, parts=self.parts, tp=tp)
        mark_reordered(module, "weight", forward)

        def saving(mod, state_dict, prefix, local_metadata):
            key = prefix + "weight"
            if key in state_dict:
                state_dict[key] = _reordered(state_dict[key], inverse)

        def loading(mod, state_dict, prefix, *args):
            key = prefix + "weight"
            if key in state_dict:
                state_dict[key] = _reordered(state_dict[key], forward, like=mod.weight)

        module.register_state_dict_post_hook(saving)
        module.register_load_state_dict_pre_hook(loading)


def check_tensor_parallel(model: nn.Module, tp: int) -> None:
    """UsageError when the model's heads, KV groups or vocabulary do not split over ``tp`` ranks."""
    problems = []
    for module in model.modules():
        if isinstance(module, blocks.GroupedQueryAttention):
            if module.heads % tp or module.query_groups % tp:
                problems.append(
                    f"{module.heads} attention heads in {module.query_groups} KV groups"
                )
            if tp > 1 and getattr(module, "q_norm", None) is not None:
                # its weights would see only a rank's heads, and no plan reduces their gradients over TP
                problems.append("per-head QK-norm, which tensor parallelism does not split yet")
            if tp > 1 and (module.sinks is not None or module.qkv_proj.bias is not None):
                # the fused projection's rank order and the per-head sinks are kept for weights only
                problems.append(
                    "attention sinks or projection biases, which tensor parallelism does not split yet"
                )
            break
    embedding = getattr(model, "embedding", None)
    if embedding is not None and embedding.num_embeddings % tp:
        problems.append(f"a vocabulary of {embedding.num_embeddings}")
    if getattr(model, "output", "absent") is None:
        problems.append("an output layer tied to the embedding")
    if problems:
        raise UsageError(
            f"tensor parallel {tp} cannot split this model: {'; '.join(problems)}. TP must divide the "
            f"attention heads, the KV groups and the vocabulary; use a TP size that does, or TP 1."
        )


def _attention_plan(mixer: nn.Module, out) -> dict[str, ParallelStyle]:
    if hasattr(mixer, "qkv_proj"):
        q = mixer.heads * mixer.head_dim
        kv = mixer.query_groups * mixer.head_dim
        return {
            "qkv_proj": FusedColwiseParallel([q, kv, kv]),
            "o_proj": RowwiseParallel(output_layouts=out),
        }
    return {
        "q_proj": ColwiseParallel(),
        "k_proj": ColwiseParallel(),
        "v_proj": ColwiseParallel(),
        "o_proj": RowwiseParallel(output_layouts=out),
    }


def _mlp_plan(mixer: nn.Module, out) -> dict[str, ParallelStyle]:
    if hasattr(mixer, "gate_up_proj"):
        half = mixer.gate_up_proj.out_features // 2
        return {
            "gate_up_proj": FusedColwiseParallel([half, half]),
            "down_proj": RowwiseParallel(output_layouts=out),
        }
    plan: dict[str, ParallelStyle] = {
        "up_proj": ColwiseParallel(),
        "down_proj": RowwiseParallel(output_layouts=out),
    }
    if hasattr(mixer, "gate_proj"):
        plan["gate_proj"] = ColwiseParallel()
    return plan


def apply_tensor_parallel(
    model: nn.Module, mesh, sequence_parallel: bool, loss_parallel: bool = True
) -> nn.Module:
    """Split ``model`` (a ``CausalLM`` or a pipeline stage of one) over the 1-d TP ``mesh``, in place.

    With ``loss_parallel`` the output layer returns its logits as a DTensor
    split over the vocabulary: compute the loss inside ``loss_parallel()``
    (``llmb.engines.torch.parallel.loss_context``). Otherwise it returns them whole.
    """
    tp = mesh.size()
    check_tensor_parallel(model, tp)
    seq = Shard(1) if sequence_parallel else Replicate()

    def norm_style() -> ParallelStyle:
        return SequenceParallel() if sequence_parallel else ReplicatedCompute(False)

    top: dict[str, ParallelStyle] = {}
    if getattr(model, "embedding", None) is not None:
        top["embedding"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=seq)
    if getattr(model, "final_norm", None) is not None:
        top["final_norm"] = norm_style()
    if getattr(model, "output", None) is not None:
        top["output"] = ColwiseParallel(
            input_layouts=seq,
            output_layouts=Shard(-1) if loss_parallel else Replicate(),
            use_local_output=not loss_parallel,
        )
    if top:
        parallelize_module(model, mesh, top)

    for _, layer in decoder_layers(model):
        for sublayer in layer.children():
            parallelize_module(sublayer, mesh, {"norm": norm_style()})
            mixer = sublayer.mixer
            if isinstance(mixer, blocks.GroupedQueryAttention):
                plan = _attention_plan(mixer, seq)
            elif isinstance(mixer, (blocks.SwiGLU, blocks.SquaredReLUMLP)):
                plan = _mlp_plan(mixer, seq)
            else:
                parallelize_module(mixer, mesh, ReplicatedCompute(sequence_parallel))
                continue
            if sequence_parallel:
                parallelize_module(
                    mixer,
                    mesh,
                    PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(Replicate(),)),
                )
            parallelize_module(mixer, mesh, plan)
            if isinstance(mixer, blocks.GroupedQueryAttention):
                mixer.heads //= tp
                mixer.query_groups //= tp
    return model
