"""The worker every rank runs: ``python -m llmb.worker RUN_JSON``.

It reads the ``RunSpec`` and runs its engine: the torch engine, the
production framework (``llmb.engines.frameworks``) inside NVIDIA's container, or
``llmb preflight``'s measurements (engine ``preflight``, ``llmb.preflight.worker``). The
rank comes from the launcher: ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` (the local
backend, torchrun), else Slurm's ``SLURM_PROCID``/``SLURM_NTASKS``/
``SLURM_LOCALID`` (``srun``). An exception is printed with a ``[rankN]:``
prefix on every line (as torchrun does), so that the failure reason can be
told from the run's log, and the process exits 1. A rank that native code
ends (an abort, a segmentation fault) prints every thread's Python stack
first (``faulthandler``), so the log says where it was: in a step, or
tearing down after training finished.

Its first line (each node's local rank 0) says which Python runs it and where
llmb's dependencies come from: ``[llmb] worker: Python 3.12.3 (aarch64);
click 8.1.8 (the environment's), PyYAML 6.0.2 (the environment's), pluggy
1.6.0 (llmb's copy), ...``: the environment's own packages, or the copies of
the worker library's ``.fallback`` (``llmb.install.worker_library``). When
one cannot be imported at all, the line says which and why, and every rank
exits 1 before anything else of llmb is imported.

Before training, each node's local rank 0 checks the node's GPUs against
the run's ``--gpu``, and rank 0 records the job's side of ``provenance.json``
(``llmb.lifecycle.provenance``).

The worker makes this process's plugin host (``llmb.plugins.host.process_host``:
the installed plugins and those ``LLMB_PLUGINS`` names) and passes it to the
torch engine; nothing under ``llmb.engines`` makes its own.
"""

from __future__ import annotations

import faulthandler
import importlib
import importlib.metadata
import json
import os
import platform
import sys
import traceback
import warnings

NEEDED = (("click", "click"), ("PyYAML", "yaml"), ("pluggy", "pluggy"), ("structlog", "structlog"))


def placement(env=os.environ) -> tuple[int, int, int]:
    """(rank, world size, local rank) from the launcher's variables."""

    def first(*names: str, default: str) -> int:
        for name in names:
            if env.get(name, "").strip():
                return int(env[name])
        return int(default)

    rank = first("RANK", "SLURM_PROCID", default="0")
    world = first("WORLD_SIZE", "SLURM_NTASKS", default="1")
    local = first("LOCAL_RANK", "SLURM_LOCALID", default=str(rank))
    return rank, world, local


def dependencies() -> tuple[str, bool]:
    """The worker's first line: this Python, and the version and origin of each of llmb's dependencies
    (under the library's ``.fallback``: llmb's copy); and whether every one of them imports."""
    library = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    fallback = os.path.join(os.path.realpath(library), ".fallback") + os.sep
    found, broken = [], []
    for dist, name in NEEDED:
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a broken package raises anything
            broken.append(f"{dist} ({type(exc).__name__}: {' '.join(str(exc).split())})")
            continue
        where = os.path.realpath(getattr(module, "__file__", None) or "")
        origin = "llmb's copy" if where.startswith(fallback) else "the environment's"
        found.append(f"{dist} {_version(dist, module, where)} ({origin})")
    python = f"Python {platform.python_version()} ({platform.machine()})"
    if broken:
        return f"[llmb] worker: {python}; cannot import what llmb needs: {', '.join(broken)}", False
    return f"[llmb] worker: {python}; {', '.join(found)}", True


def _version(dist: str, module, where: str) -> str:
    """The version of the distribution beside the package imported (not another copy's on the path)."""
    for found in importlib.metadata.distributions(
        name=dist, path=[os.path.dirname(os.path.dirname(where))]
    ):
        return found.version
    with warnings.catch_warnings():  # click and structlog deprecate __version__
        warnings.simplefilter("ignore")
        return str(getattr(module, "__version__", "unknown"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    rank = 0
    faulthandler.enable(all_threads=True)  # into the run's log, which is this process's stderr
    try:
        rank, world, local_rank = placement()
        line, usable = dependencies()  # before anything heavy: what this environment gives llmb
        if local_rank == 0:
            print(line, file=sys.stdout if usable else sys.stderr, flush=True)
        if not usable:
            return 1
        with open(argv[0], encoding="utf-8") as handle:
            from llmb.runs.runspec import ENGINES, RunSpec

            spec = RunSpec.from_dict(json.load(handle))
        if spec.engine not in ENGINES:
            raise ValueError(
                f"unknown engine {spec.engine!r}; this llmb knows {', '.join(ENGINES)}"
            )
        from llmb.lifecycle.provenance import start_job

        # the GPU check; rank 0 records provenance
        start_job(spec, rank=rank, world=world, local_rank=local_rank)
        engine_entry(spec.engine)(spec, rank=rank, world=world, local_rank=local_rank)
        if spec.engine == "torch" and (spec.profile or {}).get("kind") != "nsys":
            end_without_finalizing(0)
    except BaseException as exc:  # noqa: BLE001 - report everything, including KeyboardInterrupt
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            return 0
        lines = traceback.format_exception(exc)
        text = "".join(lines).rstrip("\n")
        sys.stdout.flush()
        sys.stderr.write("".join(f"[rank{rank}]: {line}\n" for line in text.split("\n")))
        sys.stderr.flush()
        return 1
    return 0


def engine_entry(engine: str):
    """The function that runs ``engine`` on this rank: ``(spec, rank=, world=, local_rank=)``. The torch
    engine is given this process's plugin host (the one the worker makes), which builds its model and
    answers its per-step hook (``llmb_before_step``)."""
    if engine == "preflight":
        from llmb.preflight.worker import run

        return run
    if engine == "torch":
        from functools import partial

        from llmb.engines.torch.train import train
        from llmb.plugins.host import process_host

        return partial(train, host=process_host())
    from llmb.engines.frameworks import train  # imports the framework lazily, inside the container

    return train


def end_without_finalizing(code: int) -> None:
    """Exit now, skipping the interpreter's finalization. A finished torch-engine rank has nothing left
    to finalize (its log lines are flushed here, its files closed, a torch.profiler trace written at its
    stop step), while torch's distributed teardown during finalization was seen to abort ranks that had
    finished every step ("terminate called without an active exception", no Python frame). Not under
    nsys, which completes its report from the profiled process's exit, nor for the production
    frameworks, whose own exit handlers may have work to do."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
