"""``--fit``: the largest slice of the published model that each GPU of a torch-engine run holds.

The slice keeps the full width (hidden, heads, FFN, each expert's shape, the router's top-k) and is
chosen from the torch engine's memory estimate (``llmb.recipes.memory.TORCH``) against the GPU type's
memory less the estimate's margin, in this order:

1. fewer layers: the longest prefix of the layer pattern that fits, never shorter than the shortest
   prefix holding every layer kind (dense and MoE, Mamba, attention and MLP);
2. a MoE model whose shortest such prefix does not fit: fewer experts per MoE layer (at least top-k),
   then again as many layers as fit with them;
3. a hybrid pattern that still does not fit: a shorter prefix, without every kind;
4. the last resort, when even that does not fit because of the embedding and output layer (Nemotron-4
   340B's 256,000 x 18,432, twice): a smaller vocabulary, a multiple of 128 (Megatron pads its
   vocabulary so), for the embedding and output layer both. The run's model FLOPs are those of the
   vocabulary it ran, so its MFU stays true to what ran; like every slice it is a proxy, never judged
   against the published figure.

Nothing fits (one layer alone exceeds the GPU): ``UsageError``. A torch-engine run keeps every parameter
on each of its GPUs (data parallel), so the slice does not depend on the GPU count.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llmb.errors import UsageError
from llmb.recipes.memory import TORCH, MemoryEstimate, estimate_memory
from llmb.recipes.records import ModelArch, Recipe

# Megatron pads the vocabulary to a multiple of this; a sliced vocabulary is one too.
VOCAB_MULTIPLE = 128
# The layer kinds (``ModelArch.layer_kinds``) as a slice that lacks one says it.
KIND_WORDS = {"A": "dense", "E": "MoE", "M": "Mamba", "*": "attention", "-": "MLP"}
# The share of the GPU's memory a slice's estimate may take: the rest is the estimate's margin.
FIT_FRACTION = 1 - TORCH.margin


@dataclass(frozen=True)
class Fit:
    """The slice ``--fit`` runs: the published model ``full`` cut to ``arch``, its estimate and the
    budget it was chosen against (the GPU type's memory times ``FIT_FRACTION``)."""

    full: ModelArch
    arch: ModelArch
    memory: MemoryEstimate
    gpu: str  # what holds one rank's share: the GPU type, or "CPU rank"
    capacity_gb: float
    # where the capacity is from where it is not the GPU's own memory (a CPU rank's share of the host)
    capacity_words: str = ""

    @property
    def budget_gb(self) -> float:
        return self.capacity_gb * FIT_FRACTION

    @property
    def label(self) -> str:
        """The experiment name's ``_proxy-<label>``: ``layers3``, ``layers2-experts10``, ``layers1-vocab23680``
        (the same ``layersN`` a ``--layers N`` run has: the same model)."""
        parts = [f"layers{self.arch.layers}"]
        if self.arch.experts != self.full.experts:
            parts.append(f"experts{self.arch.experts}")
        if self.arch.vocab != self.full.vocab:
            parts.append(f"vocab{self.arch.vocab}")
        return "-".join(parts)

    def differences(self) -> tuple[str, ...]:
        full, arch = self.full, self.arch
        out = []
        if arch.layers != full.layers:
            missing = sorted(set(full.layer_kinds()) - set(arch.layer_kinds()))
            without = ", ".join(f"{KIND_WORDS.get(k, k)} layer" for k in missing)
            lost = f" (without any {without})" if missing else ""
            out.append(f"layers {full.layers} -> {arch.layers}{lost}")
        if arch.experts != full.experts:
            out.append(
                f"experts {full.experts} -> {arch.experts} per MoE layer (top-{arch.topk}, "
                f"expert shape unchanged)"
            )
        if arch.vocab != full.vocab:
            out.append(f"vocab {full.vocab:,} -> {arch.vocab:,} (embedding and output layer)")
        return tuple(out)

    def text(self) -> str:
        changes = ", ".join(self.differences()) or "none: the whole model fits"
        per = "rank" if self.capacity_words else "GPU"
        return (
            f"--fit: the largest slice of {self.full.family} {self.full.size} that one {self.gpu} "
            f"({_capacity(self.capacity_gb, self.capacity_words)}) holds by the torch engine's "
            f"estimate: {changes}; estimated {self.memory.total_gb:.1f} GiB per {per} (at most "
            f"{self.budget_gb:.1f} GiB: {FIT_FRACTION:.0%} of {'its share' if self.capacity_words else 'the GPU'}, "
            f"the rest the estimate's margin)."
        )

    def as_dict(self) -> dict:
        return {
            "label": self.label,
            "layers": self.arch.layers,
            "experts": self.arch.experts,
            "topk": self.arch.topk,
            "vocab": self.arch.vocab,
            "differences": list(self.differences()),
            "memory": self.memory.as_dict(),
            "budget_gb": round(self.budget_gb, 2),
            "text": self.text(),
        }


def shortest_complete_prefix(kinds: str) -> int:
    """The length of the shortest prefix of ``kinds`` that holds every kind in it."""
    every = set(kinds)
    for end in range(1, len(kinds) + 1):
        if set(kinds[:end]) == every:
            return end
    return len(kinds)


def torch_estimate(recipe: Recipe, arch: ModelArch, capacity_gb: float | None) -> MemoryEstimate:
    """The torch engine's estimate of ``arch`` (any slice) run with ``recipe``'s layout and batch."""
    return estimate_memory(replace(recipe, layers=arch.layers), arch, capacity_gb, TORCH)


def _largest(low: int, high: int, fits) -> int | None:
    """The largest n in [low, high] with fits(n), for a ``fits`` true up to some n and false after."""
    if low > high or not fits(low):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def _capacity(gb: float, words: str) -> str:
    """``80 GiB`` (a GPU's memory), or ``11.5 GiB: this machine's 23.0 GiB (...) over 2 ranks``."""
    return f"{gb:.1f} GiB{words}" if words else f"{gb:g} GiB"


def largest_slice(
    recipe: Recipe, full: ModelArch, gpu: str, capacity_gb: float, capacity_words: str = ""
) -> Fit:
    """The slice of ``full`` that ``recipe`` (the layout and batch the torch engine runs: a proxy's, data
    parallel) fits into ``capacity_gb`` less the margin; UsageError when none does."""
    budget = capacity_gb * FIT_FRACTION

    def estimate(arch: ModelArch) -> MemoryEstimate:
        return torch_estimate(recipe, arch, capacity_gb)

    def fits(arch: ModelArch) -> bool:
        return estimate(arch).total_gb <= budget

    def done(arch: ModelArch) -> Fit:
        return Fit(full, arch, estimate(arch), gpu, capacity_gb, capacity_words)

    def most_layers(arch: ModelArch, low: int) -> ModelArch | None:
        found = _largest(low, full.layers, lambda n: fits(arch.with_layers(n)))
        return None if found is None else arch.with_layers(found)

    shortest = shortest_complete_prefix(full.layer_kinds())
    if (sliced := most_layers(full, shortest)) is not None:
        return done(sliced)
    least = full.with_layers(shortest)
    if full.experts:
        experts = _largest(full.topk, full.experts, lambda e: fits(least.with_experts(e)))
        if experts is not None:
            fewer = full.with_experts(experts)
            return done(most_layers(fewer, shortest) or least.with_experts(experts))
        least = least.with_experts(full.topk)
    if full.layer_pattern and shortest > 1:
        found = _largest(1, shortest - 1, lambda n: fits(full.with_layers(n)))
        if found is not None:
            return done(full.with_layers(found))
    vocab = _largest(
        1,
        full.vocab // VOCAB_MULTIPLE,
        lambda v: fits(replace(least, vocab=v * VOCAB_MULTIPLE)),
    )
    if vocab is not None:
        return done(replace(least, vocab=vocab * VOCAB_MULTIPLE))
    alone = estimate(replace(least, vocab=VOCAB_MULTIPLE))
    raise UsageError(
        f"--fit: no slice of {full.family} {full.size} fits one {gpu} "
        f"({_capacity(capacity_gb, capacity_words)}): "
        f"{least.layers} layer(s) alone need ~{alone.total_gb:.1f} GiB per "
        f"{'rank' if capacity_words else 'GPU'} by the torch engine's "
        f"estimate. Run it over more GPUs with the production engine on a cluster."
    )
