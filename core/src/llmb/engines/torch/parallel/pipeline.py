"""Pipeline parallelism (PP, and virtual pipeline VP) through ``torch.distributed.pipelining``.

The decoder layers of a ``CausalLM`` are split into ``pp * vp`` contiguous
stages; the embedding lives on the first stage, the final norm and the
output layer on the last. Rank ``r`` of the pipeline group holds stages
``r, r + pp, r + 2 pp, ...`` (Megatron's interleaved placement), so the
first stage is always on pipeline rank 0 and the last on rank ``pp - 1``.
One stage per rank runs the 1F1B schedule (``Schedule1F1B``); more than one
(VP) runs interleaved 1F1B (``ScheduleInterleaved1F1B``). The micro-batches
of a step are the recipe's gradient accumulation (GA): the schedule splits
the step's ``[MBS * GA, seq]`` batch into GA micro-batches and divides the
gradients by GA, which is what the engine's ``loss / GA`` per micro-batch does.

A stage keeps the model's own parameter names (``embedding.weight``,
``layers.7.0.norm.weight``, ``output.weight``), so a stage's state dict is
the matching slice of the unsharded model's and a distributed checkpoint
saved under one layout reads under another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from llmb.engines.torch.loss import chunkable, chunked_cross_entropy

__all__ = [
    "Pipeline",
    "PipelineStageModule",
    "apply_pipeline",
    "language_model_loss",
    "split_layers",
    "stage_ids",
]


def split_layers(
    layers: int, stages: int, embedding_slot: bool = False, loss_slot: bool = False
) -> list[range]:
    """Contiguous layer ranges, one per stage, as even as they can be.

    With ``embedding_slot`` / ``loss_slot`` the embedding and the loss each
    count as one layer of the first / last stage (Megatron-Bridge's
    ``account_for_embedding_in_pipeline_split`` / ``..._loss_...``), so those
    stages get one decoder layer fewer. Where the slots do not divide evenly,
    the earlier stages take one more. Every stage gets at least one layer.
    """
    if stages < 1:
        raise ValueError(f"a pipeline needs at least one stage, not {stages}")
    slots = layers + int(embedding_slot) + int(loss_slot)
    shares = [slots // stages + (1 if s < slots % stages else 0) for s in range(stages)]
    shares[0] -= int(embedding_slot)
    shares[-1] -= int(loss_slot)
    if min(shares) < 1:
        raise ValueError(
            f"{layers} layers do not fill {stages} pipeline stages (PP x VP) with at least one "
            f"layer each; use fewer stages or more layers"
        )
    bounds = [0]
    for share in shares:
        bounds.append(bounds[-1] + share)
    return [range(bounds[s], bounds[s + 1]) for s in range(stages)]


def stage_ids(pp_rank: int, pp: int, vp: int) -> list[int]:
    """The stages pipeline rank ``pp_rank`` holds: ``pp_rank + k * pp`` for each of its ``vp`` chunks."""
    return [pp_rank + chunk * pp for chunk in range(vp)]


class PipelineStageModule(nn.Module):
    """One stage of a ``CausalLM``: the embedding (first stage), a run of its
    layers, and the final norm and output layer (last stage).

    It holds the model's own sub-modules (no copies), under the model's names.
    The first stage maps token ids ``[b, s]`` to hidden states, a middle stage
    hidden states to hidden states, the last stage to logits ``[b, s, vocab]``
    or, with ``hidden_out`` (set by ``apply_pipeline`` when the loss is the
    chunked one), to the final norm's hidden states, from which the loss
    computes the logits chunk by chunk.
    """

    hidden_out = False

    def __init__(self, model: nn.Module, layers: range, first: bool, last: bool) -> None:
        super().__init__()
        if last and getattr(model, "output", None) is None:
            raise ValueError(
                "pipeline parallelism with tied embeddings needs the embedding on the first and the "
                "last stage; the torch engine's models do not tie them"
            )
        self.first, self.last = first, last
        self.embedding = model.embedding if first else None
        self.layers = nn.ModuleDict({str(i): model.layers[i] for i in layers})
        self.final_norm = model.final_norm if last else None
        self.output = model.output if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embedding is not None:
            x = self.embedding(x)
        for layer in self.layers.values():
            x = layer(x)
        if self.last:
            x = self.final_norm(x)
            return x if self.hidden_out else self.output(x)
        return x


def language_model_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of one micro-batch, computed in float32 (the engine's loss)."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))


def chunked_language_model_loss(
    output: nn.Linear,
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``language_model_loss`` from the last stage's hidden states and its ``output`` layer: the logits
    are computed chunk by chunk (``llmb.engines.torch.loss``), never whole in float32."""

    def loss(hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return chunked_cross_entropy(hidden.flatten(0, -2), output.weight, labels.flatten())

    return loss


@dataclass
class Pipeline:
    """This rank's part of a pipeline: its stage modules and the schedule that runs them."""

    # this rank's stage modules, in stage order (wrapped, when a wrap was given)
    modules: list[nn.Module]
    stage_ids: list[int]
    stages: int  # pp * vp
    schedule: object
    group: dist.ProcessGroup
    device: torch.device
    _losses: list = field(default_factory=list, repr=False)

    @property
    def first(self) -> bool:
        return 0 in self.stage_ids

    @property
    def last(self) -> bool:
        return self.stages - 1 in self.stage_ids

    def parameters(self) -> list[nn.Parameter]:
        """This rank's parameters (what its optimizer steps)."""
        return [p for module in self.modules for p in module.parameters()]

    def step(
        self, inputs: torch.Tensor | None = None, labels: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Forward and backward of one optimizer step's batch ``[MBS * GA, seq]``.

        The first stage's rank passes ``inputs``, the last stage's rank
        ``labels`` (other ranks may pass them too: they are ignored). Returns
        the step's loss, the mean over its micro-batches, on every rank of the
        pipeline group (broadcast from the last stage). Gradients are left in
        the parameters, already divided by the number of micro-batches.
        """
        losses: list[torch.Tensor] = []
        args = (inputs,) if self.first else ()
        self.schedule.step(
            *args,
            target=labels if self.last else None,
            losses=losses if self.last else None,
            return_outputs=False,
        )
        loss = (
            torch.stack([x.detach().float() for x in losses]).mean()
            if self.last
            else torch.zeros((), device=self.device)
        )
        dist.broadcast(loss, group=self.group, group_src=dist.get_world_size(self.group) - 1)
        return loss


def apply_pipeline(
    model: nn.Module,
    group,
    microbatches: int,
    vp: int = 1,
    *,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = language_model_loss,
    wrap: Callable[[nn.Module], nn.Module] | None = None,
    device: torch.device | None = None,
    embedding_slot: bool = False,
    loss_slot: bool = False,
) -> Pipeline:
    """Split ``model`` (a ``CausalLM``) into pipeline stages and build this rank's schedule.

    Contract:

    * ``group``: the pipeline-parallel process group (or a 1-d ``DeviceMesh``)
      of ``pp >= 2`` ranks; this rank's place in it is its pipeline rank.
    * ``microbatches``: micro-batches per step (the recipe's GA); the batch
      given to ``Pipeline.step`` has ``MBS * microbatches`` rows.
    * ``vp``: virtual stages per rank (the recipe's VP; 1 or None: 1F1B,
      more: interleaved 1F1B). ``pp * vp`` must not exceed the layer count.
    * ``model`` may hold real parameters (every rank built the same model) or
      sit on the meta device; the stage modules reference its sub-modules, so
      the caller materialises and initialises ``Pipeline.modules`` in the
      meta case. Parts of the model on no stage of this rank are left alone
      (drop the model to free them).
    * ``wrap``, when given, is applied to each stage module before its
      ``PipelineStage`` is made (FSDP's ``fully_shard``, DDP, activation
      checkpointing, ``torch.compile``); the schedule then skips gradient
      synchronisation on all but the last micro-batch itself.
    * ``loss_fn(output, labels)`` is the per-micro-batch loss (default: the
      engine's cross-entropy in float32; where the output layer's weight is
      whole on this rank, its chunked form: the last stage then returns
      hidden states and the loss computes the logits chunk by chunk).
    * The ranks of one pipeline must see the same batch: seed data by the
      data-parallel rank, not the global rank.
    * Gradient clipping must take the norm over all stages
      (``llmb.engines.torch.parallel.gradnorm.clip_grad_norm_`` with this group).
    """
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleInterleaved1F1B

    if hasattr(group, "get_group"):
        group = group.get_group()
    pp, pp_rank = dist.get_world_size(group), dist.get_rank(group)
    vp = vp or 1
    if pp < 2:
        raise ValueError(
            f"pipeline parallelism needs a pipeline group of at least 2 ranks, not {pp}"
        )
    if microbatches < 1:
        raise ValueError(f"a pipeline step needs at least one micro-batch, not {microbatches}")
    stages = pp * vp
    ranges = split_layers(len(model.layers), stages, embedding_slot, loss_slot)
    device = device or next(model.parameters()).device
    ids = stage_ids(pp_rank, pp, vp)
    modules, pipeline_stages = [], []
    for stage in ids:
        part = PipelineStageModule(model, ranges[stage], first=stage == 0, last=stage == stages - 1)
        module = wrap(part) if wrap is not None else part
        # not split by TP/FSDP
        if part.last and loss_fn is language_model_loss and chunkable(part.output.weight):
            part.hidden_out = True  # the output layer's product happens in the chunked loss
            loss_fn = chunked_language_model_loss(part.output)
        modules.append(module)
        pipeline_stages.append(PipelineStage(module, stage, stages, device, group=group))
    if vp == 1:
        schedule = Schedule1F1B(pipeline_stages[0], microbatches, loss_fn=loss_fn)
    else:
        schedule = ScheduleInterleaved1F1B(pipeline_stages, microbatches, loss_fn=loss_fn)
    return Pipeline(
        modules=modules, stage_ids=ids, stages=stages, schedule=schedule, group=group, device=device
    )
