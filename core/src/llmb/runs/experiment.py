"""Experiment names and directories in the seeds' layout:

    <install>/workloads/<workload>/experiments/<name>/<name>_<timestamp>/<name>/log-<name>.out

with ``recipe.json`` (what was asked for and what ran) in the
``<name>_<timestamp>`` run directory. Names follow Megatron-Bridge's
(``pretrain_llama3_8b_nvfp4_gpus8_tp1_pp1_cp1_vpNone_ep1_mbs4_gbs128``) with
``_proxy-<kind>`` appended for proxy runs.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from llmb.paths import workload_dir
from llmb.recipes.records import Recipe

RECIPE_FILE = "recipe.json"


def experiment_name(recipe: Recipe, proxy: str | None = None) -> str:
    def value(v: object) -> str:
        return "None" if v is None else str(v)

    name = (
        f"pretrain_{recipe.workload}_{recipe.size}_{recipe.dtype}_gpus{recipe.gpus}_tp{recipe.tp}_pp{recipe.pp}"
        f"_cp{recipe.cp}_vp{value(recipe.vp)}_ep{value(recipe.ep)}_mbs{recipe.mbs}_gbs{recipe.gbs}"
    )
    return f"{name}_proxy-{proxy}" if proxy else name


@dataclass(frozen=True)
class ExperimentDir:
    name: str
    run_dir: str  # <name>_<timestamp>
    inner: str  # <name>_<timestamp>/<name>
    log: str

    @property
    def recipe_file(self) -> str:
        return os.path.join(self.run_dir, RECIPE_FILE)


def _layout(run_dir: str, name: str) -> ExperimentDir:
    inner = os.path.join(run_dir, name)
    return ExperimentDir(name, run_dir, inner, os.path.join(inner, f"log-{name}.out"))


def locate(workload: str, name: str, root: str | None = None) -> ExperimentDir:
    """Where ``create`` would put a run now, creating nothing (a dry run)."""
    base = os.path.join(root or os.path.join(workload_dir(workload), "experiments"), name)
    return _layout(os.path.join(base, f"{name}_{int(time.time())}"), name)


def create(workload: str, name: str, root: str | None = None) -> ExperimentDir:
    """A fresh run directory; the timestamp moves on until the name is free."""
    base = os.path.join(root or os.path.join(workload_dir(workload), "experiments"), name)
    os.makedirs(base, exist_ok=True)
    stamp = int(time.time())
    while True:
        run_dir = os.path.join(base, f"{name}_{stamp}")
        try:
            os.mkdir(run_dir)
            break
        except FileExistsError:
            stamp += 1
    where = _layout(run_dir, name)
    os.makedirs(where.inner)
    return where


def write_json(path: str, data: dict) -> None:
    """Atomically: readers see the old file or the new one, never half."""
    write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def write_text(path: str, text: str) -> None:
    """Atomically, as ``write_json``."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:  # a full disk, an interrupt: leave no half-written temporary behind
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def read_json(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
