"""The device mesh of a parallel layout.

The ranks form a grid ``pp x dp x cp x tp``, row-major, so tensor-parallel
ranks are neighbours (one node's NVLink domain first) and pipeline stages
are the farthest apart, as in Megatron's default order. Expert parallelism
is carved out of the data-parallel dimension: ``dp = edp x ep`` (experts are
split over ``ep`` ranks that hold the same dense layers and see different
data). Named sub-meshes:

* ``pp``, ``cp``, ``tp``: one dimension each;
* ``dp``: the data-parallel ranks (the flattened ``edp x ep`` when EP > 1);
* ``dp_cp``: data parallel and context parallel together, the ranks over
  which dense gradients are reduced and FSDP shards its parameters
  (a CP rank computes the gradient of its part of the sequence);
* ``ep``, ``edp`` (EP > 1 only): the expert-parallel ranks, and the ranks
  that hold the same experts.

``coordinates`` gives a rank's place in the grid without torch, so the data
a rank reads (its data-parallel rank) is known before any process group.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmb.errors import UsageError
from llmb.runs.runspec import ParallelLayout

__all__ = ["GRID", "Meshes", "build_mesh", "check_layout", "coordinates", "data_rank", "describe"]

GRID = ("pp", "dp", "cp", "tp")  # outermost first


def check_layout(layout: ParallelLayout, world: int) -> int:
    """The data-parallel size of ``layout`` over ``world`` ranks; UsageError when it does not fit."""
    sizes = {"TP": layout.tp, "PP": layout.pp, "CP": layout.cp, "EP": layout.ep}
    bad = [
        f"{name} {size}" for name, size in sizes.items() if not isinstance(size, int) or size < 1
    ]
    if bad:
        raise UsageError(
            f"parallel layout: {', '.join(bad)}; every size must be a whole number of at least 1."
        )
    if layout.vp is not None and layout.vp < 1:
        raise UsageError(f"parallel layout: VP {layout.vp}; it must be at least 1, or absent.")
    if layout.recompute_layers < 0:
        raise UsageError(
            f"parallel layout: recompute_layers {layout.recompute_layers}; it must be 0 or more."
        )
    model_parallel = layout.model_parallel()
    if world % model_parallel:
        raise UsageError(
            f"parallel layout TP {layout.tp} x PP {layout.pp} x CP {layout.cp} = {model_parallel} "
            f"does not divide {world} ranks; use a rank count that is a multiple of {model_parallel}."
        )
    dp = world // model_parallel
    if dp % layout.ep:
        raise UsageError(
            f"parallel layout: EP {layout.ep} does not divide the {dp} data-parallel ranks "
            f"({world} ranks / (TP x PP x CP)); expert parallelism splits the data-parallel ranks."
        )
    return dp


def describe(layout: ParallelLayout, world: int) -> str:
    """``layout`` over ``world`` ranks in words, for the run's start-up lines: the sizes, DP derived."""
    dp = check_layout(layout, world)
    words = [f"TP {layout.tp} x PP {layout.pp} x CP {layout.cp} x DP {dp} = {world} ranks"]
    if layout.vp:
        words.append(f"VP {layout.vp}")
    if layout.ep > 1:
        words.append(f"EP {layout.ep} (within DP)")
    if layout.fsdp:
        words.append("FSDP")
    if layout.sequence_parallel and layout.tp > 1:
        words.append("sequence parallel")
    if layout.recompute_layers:
        words.append(f"{layout.recompute_layers} layers recomputed")
    return ", ".join(words)


def coordinates(layout: ParallelLayout, world: int, rank: int) -> dict[str, int]:
    """Rank ``rank``'s place in the ``pp x dp x cp x tp`` grid: ``{"pp": i, "dp": j, "cp": k, "tp": l}``."""
    sizes = {"pp": layout.pp, "dp": check_layout(layout, world), "cp": layout.cp, "tp": layout.tp}
    place, rest = {}, rank
    for name in reversed(GRID):
        place[name] = rest % sizes[name]
        rest //= sizes[name]
    return {name: place[name] for name in GRID}


def data_rank(layout: ParallelLayout, world: int, rank: int) -> int:
    """Which data-parallel replica ``rank`` belongs to: the ranks of one replica read the same batches."""
    return coordinates(layout, world, rank)["dp"]


@dataclass(frozen=True)
class Meshes:
    """The device mesh of a layout and its named sub-meshes (see the module docstring). ``ep`` and
    ``edp`` are None without expert parallelism."""

    root: object
    pp: object
    dp: object
    cp: object
    tp: object
    dp_cp: object
    ep: object | None = None
    edp: object | None = None


def build_mesh(layout: ParallelLayout, world: int, device_type: str) -> Meshes:
    """The ``DeviceMesh`` of ``layout`` over ``world`` ranks and its named sub-meshes (the default
    process group must exist). The flattened ones are kept here: torch no longer slices them from the root."""
    from torch.distributed.device_mesh import init_device_mesh

    dp = check_layout(layout, world)
    if layout.ep > 1:
        root = init_device_mesh(
            device_type,
            (layout.pp, dp // layout.ep, layout.ep, layout.cp, layout.tp),
            mesh_dim_names=("pp", "edp", "ep", "cp", "tp"),
        )
        return Meshes(
            root=root,
            pp=root["pp"],
            dp=root["edp", "ep"]._flatten("dp"),
            cp=root["cp"],
            tp=root["tp"],
            dp_cp=root["edp", "ep", "cp"]._flatten("dp_cp"),
            ep=root["ep"],
            edp=root["edp"],
        )
    root = init_device_mesh(device_type, (layout.pp, dp, layout.cp, layout.tp), mesh_dim_names=GRID)
    return Meshes(
        root=root,
        pp=root["pp"],
        dp=root["dp"],
        cp=root["cp"],
        tp=root["tp"],
        dp_cp=root["dp", "cp"]._flatten("dp_cp"),
    )
