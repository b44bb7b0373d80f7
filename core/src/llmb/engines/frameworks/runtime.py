"""What every framework's ``train`` does around the framework itself: set the
production environment and the rank before anything initialises CUDA, run
profiled ranks under nsys, and import the framework with an error that says
where it runs."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
from types import ModuleType

from llmb.errors import LlmbError

DEFAULT_MASTER_PORT = "29500"
# Set in the environment of a worker that runs under nsys (by llmb, or by a backend that wraps it).
NSYS_WRAPPED = "LLMB_NSYS_WRAPPED"


class FrameworkMissing(LlmbError):
    """The production framework cannot be imported: this is not NVIDIA's container."""


def require(module: str, title: str, config: dict) -> ModuleType:
    """``module`` imported, or FrameworkMissing naming the package and the container."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise FrameworkMissing(
            f"{title} (Python package {module}) cannot be imported here ({type(exc).__name__}: {exc}). "
            f"llmb's production engine runs inside NVIDIA's NeMo container, {config['container']} (the "
            f"container of the {config['workload']} {config['variant']} recipes), on GPU nodes: submit the run "
            f"to a cluster (llmb run ... --backend slurm), or run the torch engine here (--backend local)."
        ) from None


def prepare_process(config: dict, rank: int, world: int, local_rank: int) -> None:
    """The production environment (variables already set win) and the
    rendezvous variables torch.distributed reads."""
    for name, value in config["env"].items():
        os.environ.setdefault(name, str(value))
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(world))
    os.environ.setdefault("LOCAL_RANK", str(local_rank))
    if world > 1 and not os.environ.get("MASTER_ADDR"):
        raise LlmbError(
            f"rank {rank} of {world}: MASTER_ADDR is not set; the backend must export the first "
            f"node's address as MASTER_ADDR (and MASTER_PORT) to every rank."
        )
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", DEFAULT_MASTER_PORT)
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(line_buffering=True)  # the log is this process's stdout


def run_under_nsys(config: dict, rank: int, local_rank: int) -> None:
    """A profiled rank re-executes its worker under the configuration's nsys
    command (the framework only opens and closes the capture at the profiled
    steps); the others, and a worker already under nsys, carry on."""
    profiling = config.get("profiling")
    if not profiling or rank not in profiling["ranks"] or os.environ.get(NSYS_WRAPPED) == "1":
        return
    nsys = shutil.which(profiling["nsys"][0])
    if nsys is None:
        print(
            f"[llmb] warning: rank {rank}: {profiling['nsys'][0]} is not on PATH; no profile is recorded",
            file=sys.stderr,
            flush=True,
        )
        return
    os.makedirs(profiling["output_dir"], exist_ok=True)
    metrics = (
        profiling["gpu_metrics_args"] if local_rank == profiling["gpu_metrics_local_rank"] else []
    )
    os.environ[NSYS_WRAPPED] = "1"
    sys.stdout.flush()
    os.execv(
        nsys,
        [
            nsys,
            *profiling["nsys"][1:],
            *metrics,
            sys.executable,
            "-m",
            "llmb.worker",
            *sys.argv[1:],
        ],
    )


VERSIONS_FILE = "framework_versions.json"


def framework_versions(distributions: tuple[str, ...]) -> dict[str, str | None]:
    """The installed version of each distribution (None where it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {}
    for name in distributions:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def record_versions(
    config: dict, rank: int, distributions: tuple[str, ...]
) -> dict[str, str | None]:
    """Log the framework versions this rank runs with; rank 0 also writes them beside
    the run (``<inner_dir>/framework_versions.json``)."""
    found = framework_versions(distributions)
    listed = ", ".join(f"{name} {found[name] or 'not installed'}" for name in distributions)
    print(f"[llmb] rank {rank}: {config['framework']} runs with {listed}", flush=True)
    if rank == 0:
        os.makedirs(config["inner_dir"], exist_ok=True)
        path = os.path.join(config["inner_dir"], VERSIONS_FILE)
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            json.dump(found, handle, indent=1)
        os.replace(path + ".tmp", path)
    return found


def enter(
    config: dict,
    rank: int,
    world: int,
    local_rank: int,
    distributions: tuple[str, ...],
    *packages: tuple[str, str],
) -> None:
    """Everything before the framework runs: the environment and rank, nsys for a
    profiled rank, each ``(module, title)`` of ``packages`` imported, and the
    versions of ``distributions`` recorded."""
    prepare_process(config, rank, world, local_rank)
    run_under_nsys(config, rank, local_rank)
    for module, title in packages:
        require(module, title, config)
    record_versions(config, rank, distributions)


def build_recipe(config: dict):
    """The framework's recipe object with the configuration's overrides applied
    (a Megatron-Bridge ``ConfigContainer``, a NeMo-Run ``Partial``)."""
    from llmb.engines.frameworks.overrides import apply, resolve_ref

    recipe = resolve_ref(config["recipe_function"])(**config["recipe_arguments"])
    return apply(recipe, config["overrides"])
