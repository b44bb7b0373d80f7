"""Expert parallelism (EP) for the routed mixture of experts (``blocks.RoutedMoE``).

The ``E`` experts of each MoE layer are split over the ``ep`` ranks of the
expert-parallel group: rank ``r`` keeps experts ``r * E/ep`` to
``(r + 1) * E/ep - 1``. The router and the shared expert stay whole on every
rank. Each rank routes its own tokens, sends every (token, expert) pair to
the rank that holds the expert (``all_to_all_single`` with per-rank split
sizes), runs its experts on what it received, and sends the results back the
same way; the routing weights are applied on the token's own rank, before
the expert (``weight_inputs``) or after it, as the unsharded layer does. The
result is the unsharded layer's, token for token.

Gradients: the router's and the shared expert's are per rank, like any
data-parallel parameter's. An expert's gradient already sums the
contributions of every token of the EP group; data parallelism that averages
over ``dp`` ranks must therefore divide it by ``dp`` and sum it only over the
ranks that hold the same experts (``reduce_expert_gradients``), never average
it with other ranks' experts (``expert_parameter_names`` tells DDP which to
leave alone; ``apply_expert_data_parallel`` does both for EP with DDP).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

__all__ = [
    "ExpertParallelMoE",
    "apply_expert_data_parallel",
    "apply_expert_parallel",
    "expert_parameter_names",
    "expert_range",
    "reduce_expert_gradients",
]

EXPERT_FLAG = "_llmb_expert_parallel"  # set on every expert parameter sharded over an EP group


class _AllToAll(torch.autograd.Function):
    """``all_to_all_single`` with split sizes; its gradient goes back the same way with the splits swapped."""

    @staticmethod
    def forward(
        ctx, x: torch.Tensor, output_splits: list[int], input_splits: list[int], group
    ) -> torch.Tensor:
        ctx.splits, ctx.group = (output_splits, input_splits), group
        out = x.new_empty((sum(output_splits), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), output_splits, input_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        output_splits, input_splits = ctx.splits
        back = grad.new_empty((sum(input_splits), *grad.shape[1:]))
        dist.all_to_all_single(
            back, grad.contiguous(), input_splits, output_splits, group=ctx.group
        )
        return back, None, None, None


def all_to_all(
    x: torch.Tensor, output_splits: list[int], input_splits: list[int], group
) -> torch.Tensor:
    """Rows of ``x`` sent in blocks of ``input_splits`` to each rank; blocks of ``output_splits`` received."""
    return _AllToAll.apply(x, output_splits, input_splits, group)


def expert_range(experts: int, ep: int, rank: int) -> range:
    """The experts that rank ``rank`` of an expert-parallel group of ``ep`` holds: a contiguous share."""
    if experts % ep:
        raise ValueError(
            f"{experts} experts do not split evenly over an expert-parallel group of {ep} ranks; "
            f"use an EP size that divides {experts}"
        )
    local = experts // ep
    return range(rank * local, (rank + 1) * local)


class ExpertParallelMoE(nn.Module):
    """A ``RoutedMoE`` whose experts are spread over an expert-parallel group.

    It takes over the original layer's router, shared expert and settings,
    and keeps only this rank's experts, under their global numbers
    (``experts.4.down_proj.weight``), so its parameter names are the
    unsharded layer's and a distributed checkpoint maps across EP sizes.
    """

    def __init__(
        self,
        moe: nn.Module,
        group: dist.ProcessGroup,
        dp: int | None = None,
        edp_group: dist.ProcessGroup | None = None,
    ) -> None:
        super().__init__()
        ep, rank = dist.get_world_size(group), dist.get_rank(group)
        self.dp, self.edp_group = dp or ep, edp_group  # how ``finish_gradients`` reduces
        held = expert_range(len(moe.experts), ep, rank)
        self.group, self.ep, self.experts_total, self.local = group, ep, len(moe.experts), len(held)
        self.hidden, self.topk, self.weight_inputs = moe.hidden, moe.topk, moe.weight_inputs
        self.router = moe.router
        self.experts = nn.ModuleDict({str(i): moe.experts[i] for i in held})
        self.shared_expert = moe.shared_expert
        moe.experts = nn.ModuleList(self.experts.values())  # the other ranks' experts are dropped
        # The unsharded layer computes routing and the local experts (``route``, ``run_experts``:
        # grouped GEMMs where they pay); kept unregistered, its modules are this one's.
        object.__setattr__(self, "_layer", moe)
        flag_expert_parameters(self)

    def finish_gradients(self) -> None:
        """After backward: sum the expert gradients over the expert-data-parallel group (the ranks that
        hold the same experts) and divide by the data-parallel size the loss is averaged over. An
        expert without a gradient gets zeros, so every rank reduces the same tensors."""
        for p in self.experts.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            # under TP the experts are replicated DTensors (computed alike on each TP rank): reduce the local
            # tensor, which is the whole gradient
            grad = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
            if self.edp_group is not None and dist.get_world_size(self.edp_group) > 1:
                dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=self.edp_group)
            grad.div_(self.dp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, self.hidden)
        weights, ids = self._layer.route(tokens)
        flat_ids = ids.flatten()  # assignment j is token j // topk
        order = flat_ids.argsort(stable=True)  # by expert, hence by the rank that holds it
        token_ids = order // self.topk
        w = weights.flatten()[order].unsqueeze(-1)
        send = tokens[token_ids]
        if self.weight_inputs:
            send = (send * w).to(send.dtype)

        # How many pairs go to each expert, from every rank: [source rank, local expert].
        sent = torch.zeros(self.experts_total, dtype=torch.int64, device=x.device)
        sent = sent.scatter_add_(0, flat_ids, torch.ones_like(flat_ids)).view(self.ep, self.local)
        received = torch.empty_like(sent)
        dist.all_to_all_single(received, sent, group=self.group)
        # the one host sync of the layer
        counts = torch.stack((sent.sum(1), received.sum(1))).tolist()
        input_splits, output_splits = counts

        # by source rank, then expert
        arrived = all_to_all(send, output_splits, input_splits, self.group)
        local_expert = torch.arange(self.local, device=x.device).repeat(self.ep)
        by_expert = torch.repeat_interleave(local_expert, received.flatten()).argsort(stable=True)
        done = self._layer.run_experts(arrived[by_expert], received.sum(0))
        back = torch.empty_like(done).index_copy(0, by_expert, done)  # into arrival order again
        y = all_to_all(back, input_splits, output_splits, self.group)  # in ``order`` on this rank
        if not self.weight_inputs:
            y = y * w
        # back to token order, then each token's k choices summed (as the unsharded layer does)
        out = (
            torch.empty_like(y)
            .index_copy(0, order, y.to(tokens.dtype))
            .view(-1, self.topk, self.hidden)
            .sum(1)
        )
        if self.shared_expert is not None:
            out = out + self.shared_expert(tokens).to(out.dtype)
        return out.view_as(x)


def _group(group_or_mesh):
    return group_or_mesh.get_group() if hasattr(group_or_mesh, "get_group") else group_or_mesh


def apply_expert_parallel(model: nn.Module, group, dp: int | None = None, edp_group=None) -> int:
    """Spread the experts of every MoE layer of ``model`` over the expert-parallel ``group``, in place.

    Contract:

    * ``group``: the expert-parallel process group (or a 1-d ``DeviceMesh``)
      of ``ep`` ranks; the experts per layer must divide by ``ep``. Ranks of
      one EP group see different tokens (EP lies inside data parallelism).
    * ``dp``: the data-parallel size the loss is averaged over (default
      ``ep``); ``edp_group``: the ranks that hold the same experts (None when
      the EP group spans all of data parallelism).
    * ``model`` holds real, equal weights on every rank (call it after the
      weights are initialised, before DDP / FSDP wrapping, ``torch.compile``
      and pipeline splitting); each rank then keeps only its own experts.
    * Afterwards, data parallelism must leave the expert parameters
      (``expert_parameter_names``) out of its all-reduce, and the step must
      call ``reduce_expert_gradients(model)`` after the last backward and
      take the gradient norm over the EP group (``gradnorm.clip_layout_grad_norm_``).

    Returns the number of MoE layers converted (0 for a dense model).
    """
    from llmb.engines.torch.blocks import RoutedMoE

    group, edp_group = _group(group), _group(edp_group)
    converted = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, RoutedMoE):
                setattr(module, name, ExpertParallelMoE(child, group, dp, edp_group))
                converted += 1
    return converted


def apply_expert_data_parallel(model: nn.Module, mesh) -> nn.Module:
    """EP over ``mesh.ep`` and DDP over ``mesh.dp`` for everything but the experts (the layout with EP
    and no TP, PP, CP or FSDP); the module to train. ``mesh``: ``llmb.engines.torch.parallel.mesh.build_mesh``'s."""
    from torch.nn.parallel import DistributedDataParallel

    apply_expert_parallel(model, mesh.ep, dp=mesh.dp.size(), edp_group=mesh.edp)
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
        model, expert_parameter_names(model)
    )
    device = next(model.parameters()).device
    return DistributedDataParallel(
        model,
        process_group=mesh.dp.get_group(),
        device_ids=[device.index] if device.type == "cuda" else None,
    )


def flag_expert_parameters(model: nn.Module) -> set[nn.Parameter]:
    """Mark the expert parameters of every expert-parallel layer of ``model`` (``EXPERT_FLAG``), as a
    layout that replaces parameters (TP) must do again; the set of them."""
    flagged = set()
    for layer in model.modules():
        if isinstance(layer, ExpertParallelMoE):
            for parameter in layer.experts.parameters():
                setattr(parameter, EXPERT_FLAG, True)
                flagged.add(parameter)
    return flagged


def expert_parameter_names(model: nn.Module) -> list[str]:
    """Names (as ``model.named_parameters`` gives them) of the parameters sharded over an EP group."""
    return [name for name, p in model.named_parameters() if getattr(p, EXPERT_FLAG, False)]


def reduce_expert_gradients(model: nn.Module) -> None:
    """``finish_gradients`` of every expert-parallel layer of ``model`` (a DDP wrapper, a plain module, or
    a ``pipeline.Pipeline``: its stage modules)."""
    from llmb.engines.torch.parallel.pipeline import Pipeline

    for part in model.modules if isinstance(model, Pipeline) else [model]:
        for layer in part.modules():
            if isinstance(layer, ExpertParallelMoE):
                layer.finish_gradients()
