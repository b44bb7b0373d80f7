"""Per-GPU memory estimate of a recipe. The formula, term by term, is in
``docs/memory-estimate.md``; in short, for the most loaded pipeline stage:

* weights 2 B/param (bf16), gradients 4 B/param (fp32 grad buffers),
  optimizer 12 B/param (fp32 master copy + Adam m, v) sharded over DP·CP by
  the distributed optimizer (expert parameters over the expert-data-parallel
  group); dense parameters split by TP, expert parameters by EP·ETP;
  FSDP shards weights and gradients the same way and adds two layers'
  gathered weights;
* activations per layer and micro-batch from the bytes each layer keeps for
  backward (flash attention, no dropout, sequence parallel), split by TP·CP,
  times the micro-batches in flight on that stage under 1F1B (interleaving
  adds Megatron's ``1 + (PP-1)/(PP·VP)``); ``recompute_layers`` keep only
  their input, ``offload_layers`` keep nothing on the GPU;
* bf16 logits of one micro-batch on the last stage (the fused cross-entropy
  writes its gradient in place).

The torch engine keeps other bytes (``TORCH``: fp32 weights, fp32 gradients and
AdamW's two fp32 moments, unsharded on one GPU and under DDP; an fp32 residual
stream under bf16 autocast; the chunked loss's logits and output-layer copies):
the same formula reads them as data (``EngineBytes``), calibrated against a
measured peak (docs/memory-estimate.md).

GB here is GiB (2^30 bytes), as GPU capacities and torch's counters use.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmb.recipes.params import count_params, mamba_d_inner
from llmb.recipes.records import ModelArch, Recipe

GIB = 2**30
# Against the two peak-memory figures the seeds print, the estimate runs 3% and
# 12% high (tests/test_memory.py); beyond this margin a miss is certain.
MARGIN = 0.15
WEIGHT_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = 2, 4, 12
# Bytes per element of a saved GEMM input: bf16 2; FP8 1; NVFP4 4 bits plus
# one 8-bit scale per 16 values. Transformer Engine keeps these quantized copies
# for the weight-gradient GEMM instead of the bf16 tensor.
GEMM_INPUT_BYTES = {"bf16": 2.0, "fp8": 1.0, "nvfp4": 0.5 + 1 / 16}


# The torch engine's chunked loss holds the float32 logits of at most this many elements at once:
# ``llmb.engines.torch.loss.LOGITS_PER_CHUNK`` (that module imports torch; tests/test_memory.py checks
# the two agree).
TORCH_LOGITS_PER_CHUNK = 2**28


@dataclass(frozen=True)
class EngineBytes:
    """What an engine keeps on a GPU, per parameter and per activation element: the data
    ``estimate_memory`` reads. The defaults are the production path's (Megatron with the distributed
    optimizer, bf16 weights, fp32 gradient buffers); ``TORCH`` is the torch engine's."""

    name: str
    weights: float = WEIGHT_BYTES  # bytes per parameter of the weights as held
    gradients: float = GRAD_BYTES
    optimizer: float = OPTIMIZER_BYTES
    # optimizer state sharded over DP*CP without FSDP (Megatron's distributed optimizer); the torch
    # engine shards only under FSDP, or ZeRO-2 beside TP/PP (``llmb.engines.torch.parallel``)
    distributed_optimizer: bool = True
    # bytes of a gathered (FSDP/ZeRO) bf16 copy of a parameter while its layer computes
    gathered: float = WEIGHT_BYTES
    # bytes per element of a norm's input kept for backward: the residual stream's precision
    residual: float = 2.0
    # bytes per element of a saved GEMM input by the recipe's precision (2 for one not named); None:
    # GEMM_INPUT_BYTES (Transformer Engine's quantized copies)
    gemm_inputs: tuple[tuple[str, float], ...] | None = None
    # bytes per logit held for one micro-batch (all of them), or per logit of one chunk
    logits: float = 2.0
    logits_chunk: int | None = None  # elements per chunk of the chunked loss; None: not chunked
    # bytes per output-layer parameter the loss holds beside the weights (copies, a gradient)
    output_copies: float = 0.0
    # bytes per expert parameter of a compute copy held from forward to backward (the torch engine stacks
    # each MoE layer's experts in bf16 for its grouped GEMMs)
    expert_copies: float = 0.0
    # bytes per parameter of the largest layer while its backward runs: its weight gradients as the GEMMs
    # write them (bf16) and as the fp32 parameters take them, before they are added to the gradients
    backward_transient: float = 0.0
    # multiplies the activations: the calibration against a measured peak (1: none)
    activation_scale: float = 1.0
    margin: float = MARGIN


MEGATRON = EngineBytes("production")
# The torch engine (``llmb.engines.torch``) on one GPU, as its code keeps things:
# * weights 4: the model is built in float32 (``model.build_on_meta``), bf16 autocast casts per GEMM;
# * gradients 4: float32 like the weights (DDP's bucket views, no second copy);
# * optimizer 8: AdamW's exp_avg and exp_avg_sq in float32 (``optim.make_optimizer``; fused, no master
#   copy: the weights are the fp32 master);
# * residual 4: the embedding's output is float32 and each sub-layer adds onto it (``blocks.CausalLM``,
#   ``PreNormResidual``), so each norm's input is float32; every GEMM input is cast to bf16 (2);
# * the chunked loss (``loss.chunked_cross_entropy``): float32 logits of one chunk and their bf16
#   gradient (4 + 2 per logit), a bf16 copy of the output weight and its float32 gradient, held from the
#   loss's forward to its backward (2 + 4 per output parameter).
# * a MoE layer stacks its experts' weights in bf16 for the grouped GEMMs (``blocks.RoutedMoE``): 2 per
#   expert parameter; a layer's backward writes its weight gradients in float32 before they are added to
#   the accumulated ones: 4 per parameter of the largest layer.
# ``activation_scale`` 1.5: what the compiled layers keep beyond the terms above (the terms alone give
# 65.3 GB where 71.5 GB was measured), calibrated on the measured peak of Llama 3.1 8B's width at 10
# layers on one GPU; the same scale lands within 1% of a second, earlier measurement and 7% above an fp8
# one (docs/memory-estimate.md, tests/test_memory.py). ``margin``: what --fit leaves free.
TORCH = EngineBytes(
    "torch",
    weights=4,
    gradients=4,
    optimizer=8,
    distributed_optimizer=False,
    residual=4.0,
    # torchao float8 keeps its float8 casts; every other precision computes in bf16 unless Transformer
    # Engine's layers run it, which the job decides (bf16 then errs high)
    gemm_inputs=(("fp8", 1.0),),
    logits=6.0,
    logits_chunk=TORCH_LOGITS_PER_CHUNK,
    output_copies=6.0,
    expert_copies=2.0,
    backward_transient=4.0,
    activation_scale=1.5,
    margin=0.10,
)


@dataclass(frozen=True)
class MemoryEstimate:
    weights_gb: float
    gradients_gb: float
    optimizer_gb: float
    activations_gb: float
    logits_gb: float
    stage: int
    capacity_gb: float | None
    engine: str = MEGATRON.name

    @property
    def total_gb(self) -> float:
        return (
            self.weights_gb
            + self.gradients_gb
            + self.optimizer_gb
            + self.activations_gb
            + self.logits_gb
        )

    @property
    def exceeds_capacity(self) -> bool:
        return self.capacity_gb is not None and self.total_gb > self.capacity_gb

    @property
    def exceeds_margin(self) -> bool:
        """Over capacity by more than the estimate's own error margin."""
        return self.capacity_gb is not None and self.total_gb > self.capacity_gb * (1 + MARGIN)

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "weights_gb": round(self.weights_gb, 2),
            "gradients_gb": round(self.gradients_gb, 2),
            "optimizer_gb": round(self.optimizer_gb, 2),
            "activations_gb": round(self.activations_gb, 2),
            "logits_gb": round(self.logits_gb, 2),
            "total_gb": round(self.total_gb, 2),
            "pipeline_stage": self.stage,
            "capacity_gb": self.capacity_gb,
        }


def activation_bytes_per_token(
    arch: ModelArch, kind: str, dtype: str, engine: EngineBytes = MEGATRON
) -> float:
    """Bytes one layer keeps for backward per token, before any TP/CP split."""
    h, d = arch.hidden, arch.head_dim
    gemm_in = (
        dict(engine.gemm_inputs) if engine.gemm_inputs is not None else GEMM_INPUT_BYTES
    ).get(dtype, 2.0)
    norm_in = engine.residual * h  # a norm's input: the residual stream

    def attention() -> float:
        qkv = arch.heads * d + 2 * arch.query_groups * d
        return norm_in + gemm_in * h + 2 * qkv + gemm_in * arch.heads * d

    def mlp(ffn: int) -> float:
        fc1_out = (2 if arch.gated else 1) * ffn
        return norm_in + gemm_in * h + 2 * fc1_out + gemm_in * ffn

    def moe() -> float:
        routed = arch.topk * (mlp(arch.moe_ffn) - norm_in)  # each copy of a token
        shared = mlp(arch.shared_expert_ffn) - norm_in if arch.shared_expert_ffn else 0
        return norm_in + routed + shared

    def mamba() -> float:
        d_in = mamba_d_inner(arch)
        groups_state = 2 * arch.mamba_groups * arch.mamba_state
        in_proj_out = 2 * d_in + groups_state + arch.mamba_heads
        chunk_states = (
            4 * arch.mamba_heads * arch.mamba_head_dim * arch.mamba_state / max(arch.mamba_chunk, 1)
        )
        return (
            norm_in
            + gemm_in * h
            + 2 * in_proj_out
            + 2 * (d_in + groups_state)
            + 2 * d_in
            + gemm_in * d_in
            + chunk_states
        )

    per_kind = {
        "A": lambda: attention() + mlp(arch.ffn),
        "E": lambda: attention() + moe(),
        "M": mamba,
        "*": attention,
        "-": lambda: mlp(arch.ffn),
    }
    return per_kind[kind]()


def _split(items: list, parts: int) -> list[list]:
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


def estimate_memory(
    recipe: Recipe, arch: ModelArch, capacity_gb: float | None, engine: EngineBytes = MEGATRON
) -> MemoryEstimate:
    """The estimate for the pipeline stage that needs the most memory, with ``engine``'s bytes (the
    production path's by default)."""
    arch = arch.with_layers(recipe.layers)
    count = count_params(arch)
    tp, pp, cp = recipe.tp, recipe.pp, recipe.cp
    ep, etp = recipe.ep or 1, recipe.etp or 1
    dense_shards = recipe.dp * cp
    expert_shards = max(recipe.gpus // (pp * ep * etp), 1)
    # the torch engine leaves expert parameters out of its sharding (llmb.engines.torch.parallel)
    expert_fsdp = expert_shards if engine.distributed_optimizer else 1
    # the torch engine shards gradients and optimizer state (ZeRO-2) beside TP or PP only
    zero2 = not engine.distributed_optimizer and not recipe.fsdp and tp * pp > 1
    sharded = engine.distributed_optimizer or recipe.fsdp or zero2
    tokens = recipe.seq_len * recipe.mbs / (tp * cp)
    interleave = 1 + (pp - 1) / (pp * recipe.vp) if recipe.vp and pp > 1 else 1.0
    held_logits = (
        tokens
        if engine.logits_chunk is None
        else min(tokens, max(1, engine.logits_chunk // arch.vocab))
    )
    stages = _split(list(count.layers), pp)
    best: MemoryEstimate | None = None
    for index, layers in enumerate(stages):
        dense = sum(l.dense for l in layers) / tp
        expert = sum(l.expert for l in layers) / (ep * etp)
        if index == 0:
            dense += count.embedding / tp
        output = 0.0
        if index == pp - 1:
            output = (count.output if (count.output or pp == 1) else count.embedding) / tp
            dense += output + count.final_norm
        weights = engine.weights * (dense + expert)
        grads = engine.gradients * (dense + expert)
        optimizer = engine.optimizer * (
            dense / (dense_shards if sharded else 1) + expert / expert_fsdp
        )
        if recipe.fsdp:
            gathered = 2 * max((l.total for l in layers), default=0) / tp * engine.gathered
            weights = engine.weights * (dense / dense_shards + expert / expert_fsdp) + gathered
            grads = engine.gradients * (dense / dense_shards + expert / expert_fsdp)
        elif zero2:
            # sharded at rest, every layer's gathered bf16 copy kept from forward to backward
            weights = engine.weights * (dense / dense_shards + expert) + engine.gathered * dense
            grads = engine.gradients * (dense / dense_shards + expert)
        weights += engine.expert_copies * expert
        largest = max((l.dense / tp + l.expert / (ep * etp) for l in layers), default=0)
        grads += engine.backward_transient * largest
        in_flight = min(pp - index, recipe.ga) * (interleave if index == 0 else 1.0)
        kept = [activation_bytes_per_token(arch, l.kind, recipe.dtype, engine) for l in layers]
        recompute = min(recipe.recompute_layers, len(kept))
        offload = min(recipe.offload_layers, len(kept) - recompute)
        kept = [engine.residual * arch.hidden] * recompute + kept[recompute + offload :]
        activations = tokens * sum(kept) * in_flight * engine.activation_scale
        logits = (
            engine.logits * held_logits * arch.vocab + engine.output_copies * output
            if index == pp - 1
            else 0.0
        )
        estimate = MemoryEstimate(
            weights_gb=weights / GIB,
            gradients_gb=grads / GIB,
            optimizer_gb=optimizer / GIB,
            activations_gb=activations / GIB,
            logits_gb=logits / GIB,
            stage=index,
            capacity_gb=capacity_gb,
            engine=engine.name,
        )
        if best is None or estimate.total_gb > best.total_gb:
            best = estimate
    assert best is not None
    return best
