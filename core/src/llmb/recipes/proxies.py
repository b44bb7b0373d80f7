"""Proxies: smaller models that keep a family's structure.

Two kinds, both labelled as proxies wherever a run is reported and never
compared with the published figures:

* ``--layers N``: the seeds' own proxy (Llama 3.1's 405b-Proxy rows): the
  full width with fewer layers (a hybrid pattern is cut to its first N).
* ``--proxy tiny``: a CPU-sized shrink that keeps what makes each family
  itself: the ratio of query heads to KV groups, the FFN-to-hidden ratios,
  gating, norms, the MoE routing (top-k, shared expert, which layers are
  MoE) and the hybrid Mamba/attention/MLP pattern.

``proxy_run`` says what a proxy run is and every way it differs from the
published recipe (layout, batch, model, sequence, precision): ``llmb plan
--proxy`` shows that list and ``llmb run`` warns with it, once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llmb.errors import UsageError
from llmb.recipes.records import ModelArch, Recipe


@dataclass(frozen=True)
class ProxyShape:
    name: str
    description: str
    head_dim: int  # the least; doubled until every projection's width is a multiple of ALIGNMENT
    query_groups: int
    vocab: int
    seq_len: int
    layers: int  # the minimum; hybrid and MoE models take what their structure needs
    experts: int
    mamba_head_dim: int
    mamba_state: int
    mamba_chunk: int


# Every linear layer of a proxy (but the output layer and the router) has both dimensions a multiple
# of 16, as float8 matrix products need (llmb.engines.torch.parallel.float8): an fp8 recipe's proxy
# computes all of them in float8 where the GPU has it, as the full model does.
ALIGNMENT = 16

# tiny: sized so that every workload's default 50 steps (its recipe's GA micro-batches each) take well
# under a minute with 2 ranks on 2 CPU cores (benchmarks/proxy_wall_time.py). At this size a micro-batch
# costs per-operation overhead more than arithmetic: heads of 8 channels (16 where the GQA ratio is odd,
# to keep the widths multiples of 16), so widths of 32-128; Mamba2 heads of 8 channels, its scan in one
# chunk (the scan's result does not depend on its chunking; more chunks only add the operations that
# carry the state across them). The sequence, 64, is no shorter because the synthetic tokens are uniform
# noise: all a proxy can learn in 50 steps is to flatten its initial logits, and that signal against the
# gradient's noise grows as sqrt(tokens per step / width). Halving the width and the sequence together
# (from 16-channel heads and 128 tokens) keeps the loss falling as reliably as before, which
# ``llmb certify``'s loss gate checks; a 32-token sequence did not.
PROXIES = {
    "tiny": ProxyShape(
        name="tiny",
        description="a few layers, width 32-128, sequence 64: a fraction of a second per step on a 2-core CPU",
        head_dim=8,
        query_groups=1,
        vocab=512,
        seq_len=64,
        layers=4,
        experts=8,
        mamba_head_dim=8,
        mamba_state=16,
        mamba_chunk=64,
    ),
}


def _multiple(value: float, of: int = ALIGNMENT) -> int:
    return max(of, int(round(value / of)) * of)


def _hybrid_layers(pattern: str, minimum: int) -> int:
    """The shortest prefix of ``pattern`` that has every layer kind in it."""
    kinds = set(pattern)
    for end in range(1, len(pattern) + 1):
        if set(pattern[:end]) == kinds:
            return max(end, min(minimum, len(pattern)))
    return len(pattern)


def _latent_attention(arch: ModelArch) -> dict:
    """A proxy's multi-head latent attention (DeepSeek-V3, Kimi-K2): both low-rank paths kept, every
    width ALIGNMENT (a head of ALIGNMENT channels not rotated, ALIGNMENT rotated; a value of ALIGNMENT;
    latents of 2 ALIGNMENT and ALIGNMENT), so that every projection stays a multiple of it."""
    if not arch.kv_lora_rank:
        return {}
    return dict(
        rope_head_dim=ALIGNMENT,
        v_head_dim=ALIGNMENT,
        q_lora_rank=2 * ALIGNMENT if arch.q_lora_rank else 0,
        kv_lora_rank=ALIGNMENT,
    )


def _grouped_routing(arch: ModelArch, experts: int, layers: int) -> dict:
    """DeepSeekMoE's group-limited routing on a proxy's ``experts``: groups of two (the group score sums a
    group's best two), half of them kept, the top-k within them; and dense first layers leaving half the
    layers MoE."""
    changes = {}
    if arch.dense_layers:
        changes["dense_layers"] = min(arch.dense_layers, layers // 2)
    if arch.expert_groups > 1:
        groups = min(arch.expert_groups, experts // 2)
        kept = max(1, groups // 2)
        changes.update(
            expert_groups=groups, topk_groups=kept, topk=min(arch.topk, kept * (experts // groups))
        )
    return changes


def shrink(arch: ModelArch, proxy: str) -> ModelArch:
    """``arch`` shrunk to the named proxy shape."""
    if proxy not in PROXIES:
        raise UsageError(f"unknown --proxy {proxy!r}; valid: {', '.join(PROXIES)}.")
    shape = PROXIES[proxy]
    ratio = max(1, arch.heads // max(arch.query_groups, 1))  # query heads per KV group
    heads = ratio * shape.query_groups
    head_dim = shape.head_dim
    # q, and k|v
    while (heads * head_dim) % ALIGNMENT or (2 * shape.query_groups * head_dim) % ALIGNMENT:
        head_dim *= 2
    hidden = heads * head_dim
    scale = hidden / arch.hidden
    layers = min(arch.layers, shape.layers)
    if arch.moe_layer_step:
        layers = max(layers, 2 * arch.moe_layer_step)  # dense and MoE layers both present
    pattern = None
    if arch.layer_pattern:
        layers = _hybrid_layers(arch.layer_pattern, shape.layers)
        pattern = arch.layer_pattern[:layers]
    mamba = {}
    if arch.mamba_heads:
        d_inner = arch.mamba_expand * hidden
        mamba_head_dim = shape.mamba_head_dim
        # in_proj's width: 2 d_inner + B, C + heads
        while (d_inner // mamba_head_dim) % ALIGNMENT and mamba_head_dim > 1:
            mamba_head_dim //= 2
        mamba_heads = max(1, d_inner // mamba_head_dim)
        groups = max(1, mamba_heads * arch.mamba_groups // arch.mamba_heads)
        while mamba_heads % groups:
            groups -= 1
        mamba = dict(
            mamba_heads=mamba_heads,
            mamba_head_dim=mamba_head_dim,
            mamba_state=shape.mamba_state,
            mamba_groups=groups,
            mamba_chunk=shape.mamba_chunk,
        )
    experts = min(arch.experts, shape.experts) if arch.experts else 0
    return replace(
        arch,
        size=f"{arch.size}-{proxy}",
        layers=layers,
        layer_pattern=pattern,
        hidden=hidden,
        heads=heads,
        query_groups=shape.query_groups,
        head_dim=2 * ALIGNMENT if arch.kv_lora_rank else head_dim,  # MLA: see _latent_attention
        ffn=_multiple(arch.ffn * scale),
        moe_ffn=_multiple(arch.moe_ffn * scale) if arch.moe_ffn else 0,
        shared_expert_ffn=_multiple(arch.shared_expert_ffn * scale)
        if arch.shared_expert_ffn
        else 0,
        experts=experts,
        vocab=shape.vocab,
        published_params=None,
        source=f"{proxy} proxy of {arch.size} ({arch.source})",
        **mamba,
        **_latent_attention(arch),
        **_grouped_routing(arch, experts, layers),
    )


# --------------------------------------------------------------------------
# What a proxy run changes from the published recipe: ``llmb plan --proxy`` shows it and ``llmb run``
# warns with it, both from ``proxy_run`` (one list, so the two can never disagree).


@dataclass(frozen=True)
class Difference:
    """One setting a proxy runs otherwise than the published recipe: ``what`` as users read it (``CP``,
    ``layers``, ``precision``), the recipe's value and the proxy's."""

    what: str
    published: object
    proxy: object

    def text(self) -> str:
        return f"{self.what} {_shown(self.published)} -> {_shown(self.proxy)}"

    def as_dict(self) -> dict:
        return {
            "what": self.what,
            "published": self.published,
            "proxy": self.proxy,
            "text": self.text(),
        }


def _shown(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:,}" if isinstance(value, int) and value >= 10000 else str(value)


# The model's dimensions a proxy may change, in the order users read them.
ARCH_FIELDS = (
    ("layers", "layers"),
    ("hidden", "hidden"),
    ("ffn", "FFN"),
    ("heads", "heads"),
    ("query_groups", "query groups"),
    ("head_dim", "head dim"),
    ("vocab", "vocab"),
    ("experts", "experts"),
    ("topk", "top-k"),
    ("moe_ffn", "expert FFN"),
    ("shared_expert_ffn", "shared expert FFN"),
    ("mamba_heads", "Mamba heads"),
    ("mamba_head_dim", "Mamba head dim"),
    ("mamba_state", "Mamba state"),
    ("mamba_groups", "Mamba groups"),
    ("mamba_chunk", "Mamba chunk"),
)
# The recipe's settings a proxy may change: its layout, batch and memory options.
RECIPE_FIELDS = (
    ("gpus", "GPUs"),
    ("tp", "TP"),
    ("pp", "PP"),
    ("cp", "CP"),
    ("vp", "VP"),
    ("ep", "EP"),
    ("etp", "ETP"),
    ("dp", "DP"),
    ("mbs", "MBS"),
    ("ga", "GA"),
    ("gbs", "GBS"),
    ("fsdp", "FSDP"),
    ("cuda_graphs", "CUDA graphs"),
    ("recompute_layers", "recompute layers"),
    ("offload_layers", "offload layers"),
)


def proxy_recipe(recipe: Recipe, ranks: int) -> Recipe:
    """What the torch engine runs a proxy of ``recipe`` with over ``ranks``: data parallel only (TP, PP
    and CP 1, no VP, EP 1), the recipe's MBS and GA, so GBS = MBS x GA x ranks; no FSDP, recompute, CPU
    offload or CUDA graphs (the torch engine applies none of them to a proxy)."""
    return replace(
        recipe,
        gpus=ranks,
        nodes=1 if ranks <= recipe.gpus_per_node else ranks // recipe.gpus_per_node,
        tp=1,
        pp=1,
        cp=1,
        vp=None,
        ep=1 if recipe.ep else None,
        etp=1 if recipe.etp else None,
        dp=ranks,
        gbs=recipe.mbs * recipe.ga * ranks,
        fsdp=False,
        cuda_graphs=False,
        recompute_layers=0,
        offload_layers=0,
    )


def precision_change(dtype: str, computed: str) -> str | None:
    """What the torch engine computes a ``dtype`` recipe in, where it is not that precision; None where it is.
    ``computed``: ``llmb.runs.runspec.compute_dtype``'s answer (float32 on CPU, bfloat16 on GPU, auto on a
    cluster's nodes, decided there)."""
    if computed == "float32":
        return "float32 (on CPU)"
    if dtype == "bf16":
        return None
    on_gpu = (
        f"Transformer Engine's {dtype} where installed and the GPU supports it, else bfloat16"
        if dtype in ("nvfp4", "mxfp8", "fp8_mx")
        else "torchao float8 on GPUs of SM 8.9 or newer, else bfloat16"
    )
    return on_gpu + ("; float32 on CPU nodes" if computed == "auto" else "")


@dataclass(frozen=True)
class ProxyRun:
    """A proxy run as ``llmb run`` makes it: the published recipe it is cut from, the layout and batch it
    runs (``ran``), its model and sequence, and every difference from the published recipe."""

    flag: str  # --proxy tiny | --layers N | --fit
    # tiny | layersN | --fit's layersN[-expertsE][-vocabV]: the experiment name's _proxy-<label>
    label: str
    published: Recipe
    ran: Recipe
    full: ModelArch
    arch: ModelArch
    seq_len: int
    engine: str
    device: str
    compute_dtype: str
    differences: tuple[Difference, ...]

    @property
    def smallest_scale(self) -> bool:
        """The GPU count asked for is not one the recipe tests: its smallest tested scale was taken."""
        return self.ran.gpus != self.published.gpus

    def warning(self) -> str:
        """What ``llmb run`` says of it, once: the recipe it takes and every difference from it."""
        taken = f" at {self.published.gpus} GPUs" + (
            " (its smallest tested scale)" if self.smallest_scale else ""
        )
        changes = ", ".join(d.text() for d in self.differences) or "nothing"
        return (
            f"{self.flag} runs the published recipe{taken} with these differences: {changes}; "
            f"its results are not compared with the published figures."
        )

    def as_dict(self) -> dict:
        r = self.ran
        return {
            "proxy": self.label,
            "flag": self.flag,
            "engine": self.engine,
            "ranks": r.gpus,
            "device": self.device,
            "compute_dtype": self.compute_dtype,
            "published_gpus": self.published.gpus,
            "smallest_scale": self.smallest_scale,
            "arch": dict(self.arch.__dict__),
            "seq_len": self.seq_len,
            "layout": {
                "tp": r.tp,
                "pp": r.pp,
                "cp": r.cp,
                "vp": r.vp,
                "ep": r.ep,
                "etp": r.etp,
                "dp": r.dp,
                "mbs": r.mbs,
                "ga": r.ga,
                "gbs": r.gbs,
                "fsdp": r.fsdp,
                "cuda_graphs": r.cuda_graphs,
                "recompute_layers": r.recompute_layers,
                "offload_layers": r.offload_layers,
            },
            "differences": [d.as_dict() for d in self.differences],
            "warning": self.warning(),
        }


def proxy_run(
    recipe: Recipe,
    full: ModelArch,
    arch: ModelArch,
    seq_len: int,
    *,
    flag: str,
    label: str,
    ranks: int,
    engine: str,
    device: str,
    compute_dtype: str,
) -> ProxyRun:
    """The proxy of ``recipe`` (its model ``full``) that runs ``arch`` at ``seq_len`` over ``ranks``: on the
    torch engine data parallel (``proxy_recipe``) in ``compute_dtype``; on the production engine (``--layers
    N``) in the recipe's own layout and precision."""
    torch_engine = engine == "torch"
    ran = proxy_recipe(recipe, ranks) if torch_engine else recipe
    found = [
        Difference(what, getattr(recipe, key), getattr(ran, key))
        for key, what in RECIPE_FIELDS
        if getattr(recipe, key) != getattr(ran, key)
    ]
    found += [
        Difference(what, getattr(full, key), getattr(arch, key))
        for key, what in ARCH_FIELDS
        if getattr(full, key) != getattr(arch, key)
    ]
    if seq_len != recipe.seq_len:
        found.append(Difference("sequence", recipe.seq_len, seq_len))
    precision = precision_change(recipe.dtype, compute_dtype) if torch_engine else None
    if precision:
        found.append(Difference("precision", recipe.dtype, precision))
    return ProxyRun(
        flag=flag,
        label=label,
        published=recipe,
        ran=ran,
        full=full,
        arch=arch,
        seq_len=seq_len,
        engine=engine,
        device=device,
        compute_dtype=compute_dtype,
        differences=tuple(found),
    )


def reduction_conflict(proxy: str | None, layers: int | None, fit: bool) -> str | None:
    """The one refusal of a run reduced more than one way (``--proxy``, ``--layers``, ``--fit``: each is a
    whole choice of model), None for at most one. ``llmb run``, ``plan``, ``sweep`` and ``certify`` refuse
    it as their shared options are read (``llmb.cli.run_options``), a sweep file's section as its task is
    prepared (``llmb.runs.runspec.proxy_arch``): in the same words."""
    given = [
        flag
        for flag, on in (
            (f"--proxy {proxy}", bool(proxy)),
            (f"--layers {layers}", layers is not None),
            ("--fit", bool(fit)),
        )
        if on
    ]
    if len(given) < 2:
        return None
    return (
        f"{' and '.join(given)} each reduce the run; give one of them: --proxy NAME (a CPU-sized "
        f"model of the workload's structure), --layers N (the full width with N layers) or --fit (the "
        f"largest slice of the model each GPU holds)."
    )


def proxy_flag(proxy: str | None, layers: int | None, fit: bool = False) -> str:
    """``--proxy tiny``, ``--layers N`` or ``--fit``, as the user asked for it."""
    if fit:
        return "--fit"
    return f"--proxy {proxy}" if proxy else f"--layers {layers}"
