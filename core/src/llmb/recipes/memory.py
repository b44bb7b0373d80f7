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


@dataclass(frozen=True)
class MemoryEstimate:
    weights_gb: float
    gradients_gb: float
    optimizer_gb: float
    activations_gb: float
    logits_gb: float
    stage: int
    capacity_gb: float | None

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


def activation_bytes_per_token(arch: ModelArch, kind: str, dtype: str) -> float:
    """Bytes one layer keeps for backward per token, before any TP/CP split."""
    h, d = arch.hidden, arch.head_dim
    gemm_in = GEMM_INPUT_BYTES.get(dtype, 2.0)

    def attention() -> float:
        qkv = arch.heads * d + 2 * arch.query_groups * d
        return 2 * h + gemm_in * h + 2 * qkv + gemm_in * arch.heads * d

    def mlp(ffn: int) -> float:
        fc1_out = (2 if arch.gated else 1) * ffn
        return 2 * h + gemm_in * h + 2 * fc1_out + gemm_in * ffn

    def moe() -> float:
        routed = arch.topk * (mlp(arch.moe_ffn) - 2 * h)  # each copy of a token
        shared = mlp(arch.shared_expert_ffn) - 2 * h if arch.shared_expert_ffn else 0
        return 2 * h + routed + shared

    def mamba() -> float:
        d_in = mamba_d_inner(arch)
        groups_state = 2 * arch.mamba_groups * arch.mamba_state
        in_proj_out = 2 * d_in + groups_state + arch.mamba_heads
        chunk_states = (
            4 * arch.mamba_heads * arch.mamba_head_dim * arch.mamba_state / max(arch.mamba_chunk, 1)
        )
        return (
            2 * h
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


def estimate_memory(recipe: Recipe, arch: ModelArch, capacity_gb: float | None) -> MemoryEstimate:
    """The estimate for the pipeline stage that needs the most memory."""
    arch = arch.with_layers(recipe.layers)
    count = count_params(arch)
    tp, pp, cp = recipe.tp, recipe.pp, recipe.cp
    ep, etp = recipe.ep or 1, recipe.etp or 1
    dense_shards = recipe.dp * cp
    expert_shards = max(recipe.gpus // (pp * ep * etp), 1)
    tokens = recipe.seq_len * recipe.mbs / (tp * cp)
    interleave = 1 + (pp - 1) / (pp * recipe.vp) if recipe.vp and pp > 1 else 1.0
    stages = _split(list(count.layers), pp)
    best: MemoryEstimate | None = None
    for index, layers in enumerate(stages):
        dense = sum(l.dense for l in layers) / tp
        expert = sum(l.expert for l in layers) / (ep * etp)
        if index == 0:
            dense += count.embedding / tp
        if index == pp - 1:
            dense += (count.output if (count.output or pp == 1) else count.embedding) / tp
            dense += count.final_norm
        weights = WEIGHT_BYTES * (dense + expert)
        grads = GRAD_BYTES * (dense + expert)
        optimizer = OPTIMIZER_BYTES * (dense / dense_shards + expert / expert_shards)
        if recipe.fsdp:
            gathered = 2 * max((l.total for l in layers), default=0) / tp * WEIGHT_BYTES
            weights = WEIGHT_BYTES * (dense / dense_shards + expert / expert_shards) + gathered
            grads = GRAD_BYTES * (dense / dense_shards + expert / expert_shards)
        in_flight = min(pp - index, recipe.ga) * (interleave if index == 0 else 1.0)
        kept = [activation_bytes_per_token(arch, l.kind, recipe.dtype) for l in layers]
        recompute = min(recipe.recompute_layers, len(kept))
        offload = min(recipe.offload_layers, len(kept) - recompute)
        kept = [2 * arch.hidden] * recompute + kept[recompute + offload :]
        activations = tokens * sum(kept) * in_flight
        logits = 2 * tokens * arch.vocab if index == pp - 1 else 0.0
        estimate = MemoryEstimate(
            weights_gb=weights / GIB,
            gradients_gb=grads / GIB,
            optimizer_gb=optimizer / GIB,
            activations_gb=activations / GIB,
            logits_gb=logits / GIB,
            stage=index,
            capacity_gb=capacity_gb,
        )
        if best is None or estimate.total_gb > best.total_gb:
            best = estimate
    assert best is not None
    return best
