"""Pipeline parallelism, expert parallelism and float8 training of the torch engine, on CPU.

Each layout runs as real processes (one per rank, gloo) through
``tests/engine_parallel_runs.py`` and is compared with the unsharded model
trained in this process on the same global batches from the same weights:
losses and gradient norms step by step. Float8 is torchao's CPU emulation
(the same casts to e4m3 / e5m2, products in float32), compared with the
float32 run the engine does on CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import engine_parallel_runs as runs
import pytest
import torch
from llmb.engines.torch.parallel.experts import expert_range
from llmb.engines.torch.parallel.float8 import (
    apply_float8,
    choose_precision,
    float8_eligible,
    record_precision,
)
from llmb.engines.torch.parallel.pipeline import split_layers, stage_ids

HANG_GUARD = 900  # seconds for a whole multi-process run: a guard against a hang, not a speed limit
EXACT = dict(rel=2e-5, abs=2e-5)  # float32 sums in another order: a few ulps of a loss near 6.4


def launch(scenario: str, world: int, tmp_path: Path) -> list[dict]:
    """Run ``scenario`` on ``world`` ranks; each rank's JSON result, in rank order."""
    store = tmp_path / "store"
    outs = [tmp_path / f"rank{rank}.json" for rank in range(world)]
    logs = [tmp_path / f"rank{rank}.log" for rank in range(world)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = []
    for rank in range(world):
        with open(logs[rank], "w") as log:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        str(Path(runs.__file__)),
                        scenario,
                        str(rank),
                        str(world),
                        str(store),
                        str(outs[rank]),
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=Path(runs.__file__).parent,
                )
            )
    try:
        for proc in procs:
            proc.wait(timeout=HANG_GUARD)
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        raise
    finally:
        for proc in procs:
            proc.wait()
    tails = "\n".join(f"--- rank {r}:\n{logs[r].read_text()[-3000:]}" for r in range(world))
    assert [p.returncode for p in procs] == [0] * world, tails
    return [json.loads(out.read_text()) for out in outs]


def assert_same_training(results: list[dict], reference: dict) -> None:
    for rank, result in enumerate(results):
        assert result["losses"] == pytest.approx(reference["losses"], **EXACT), rank
        assert result["grad_norms"] == pytest.approx(reference["grad_norms"], **EXACT), rank


# --------------------------------------------------------------------------
# Pipeline parallelism


def test_layer_split_is_even_and_counts_embedding_and_loss_slots():
    assert split_layers(4, 2) == [range(0, 2), range(2, 4)]
    assert split_layers(7, 3) == [range(0, 3), range(3, 5), range(5, 7)]
    # Llama 3.1 405b in Megatron-Bridge: 126 layers, embedding and loss as one layer each, PP 8 x VP 8.
    split = split_layers(126, 64, embedding_slot=True, loss_slot=True)
    assert [len(r) for r in split] == [1] + [2] * 62 + [1]
    assert split[-1] == range(125, 126)
    with pytest.raises(ValueError, match="do not fill 8 pipeline stages"):
        split_layers(4, 8)


def test_interleaved_stages_are_placed_round_robin():
    assert stage_ids(0, 4, 1) == [0]
    assert stage_ids(1, 4, 2) == [1, 5]
    assert stage_ids(3, 4, 3) == [3, 7, 11]


@pytest.mark.parametrize(
    ("scenario", "stages"),
    [("pp", [[0], [1]]), ("pp-vp2", [[0, 2], [1, 3]])],
    ids=["1f1b", "interleaved-1f1b"],
)
def test_pipeline_trains_like_the_unsharded_model(tmp_path, scenario, stages):
    """Two ranks, GA 4 micro-batches per step, 4 steps of the Llama 3.1 tiny proxy."""
    results = launch(scenario, 2, tmp_path)
    assert_same_training(results, runs.reference(runs.PIPELINE))
    assert [r["stages"] for r in results] == stages
    model, _ = runs.tiny_model(runs.PIPELINE.workload)
    everything = sorted(name for name, _ in model.named_parameters())
    held = [set(r["parameters"]) for r in results]
    assert not held[0] & held[1]
    assert sorted(held[0] | held[1]) == everything  # the model's own names, each on one rank
    assert "embedding.weight" in held[0] and {"final_norm.weight", "output.weight"} <= held[1]
    per_layer = {
        layer: rank
        for rank, names in enumerate(held)
        for name in names
        if name.startswith("layers.")
        for layer in [int(name.split(".")[1])]
    }
    expected = {0: 0, 1: 0, 2: 1, 3: 1} if scenario == "pp" else {0: 0, 1: 1, 2: 0, 3: 1}
    assert per_layer == expected


# --------------------------------------------------------------------------
# Expert parallelism


def test_expert_parallel_layer_equals_the_unsharded_layer(tmp_path):
    """Output, input gradient and every parameter's gradient of a lone MoE layer, two routings."""
    launch("ep-block", 2, tmp_path)
    saved = [torch.load(tmp_path / f"rank{rank}.json.pt") for rank in range(2)]
    empty_experts = 0
    for label, config in runs.MOE_CONFIGS.items():
        moe, tokens, probe = runs.moe_block(config)
        x = tokens.clone().requires_grad_(True)
        y = moe(x)
        (y * probe).sum().backward()
        empty_experts += int(
            (
                torch.bincount(
                    moe.route(tokens.reshape(-1, config["hidden"]))[1].flatten(),
                    minlength=config["experts"],
                )
                == 0
            ).sum()
        )
        grads = {
            name: p.grad if p.grad is not None else torch.zeros_like(p)
            for name, p in moe.named_parameters()
        }
        local = config["experts"] // 2
        for rank in range(2):
            mine = saved[rank][label]
            torch.testing.assert_close(
                mine["output"], y[rank].detach(), msg=f"{label} output, rank {rank}"
            )
            torch.testing.assert_close(
                mine["input_grad"], x.grad[rank], msg=f"{label} input grad, rank {rank}"
            )
            held = [f"experts.{e}." for e in range(rank * local, (rank + 1) * local)]
            assert all(
                name.startswith(("router.", "shared_expert.", *held)) for name in mine["parameters"]
            )
            for name, grad in mine["grads"].items():
                # the whole EP group's tokens: the unsharded gradient
                if name.startswith("experts."):
                    torch.testing.assert_close(grad, grads[name], msg=f"{label} {name}")
        for name in grads:
            # per rank, as under data parallelism: they sum to it
            if not name.startswith("experts."):
                torch.testing.assert_close(
                    saved[0][label]["grads"][name] + saved[1][label]["grads"][name],
                    grads[name],
                    msg=f"{label} {name}",
                )
    assert empty_experts > 0  # the case that crashed DDP: an expert with no tokens


def test_expert_parallel_trains_like_the_unsharded_model(tmp_path):
    """Llama 4 tiny proxy (8 experts per MoE layer, 4 per rank), two data-parallel ranks under DDP."""
    results = launch("ep-train", 2, tmp_path)
    assert_same_training(results, runs.reference(runs.EXPERTS))
    assert [r["converted"] for r in results] == [2, 2]  # both MoE layers of AEAE
    assert {name.split(".")[5] for name in results[0]["experts"]} == {"0", "1", "2", "3"}
    assert {name.split(".")[5] for name in results[1]["experts"]} == {"4", "5", "6", "7"}


def test_experts_split_into_contiguous_equal_shares():
    assert [expert_range(128, 8, r) for r in (0, 7)] == [range(0, 16), range(112, 128)]
    with pytest.raises(
        ValueError, match="6 experts do not split evenly over an expert-parallel group of 4"
    ):
        expert_range(6, 4, 0)


# --------------------------------------------------------------------------
# Through the engine's entry: parallelize


@pytest.mark.parametrize(
    ("scenario", "world", "layout", "module"),
    [
        ("parallelize-pp2-dp2", 4, runs.PIPELINE_DP, "Pipeline"),
        ("parallelize-pp2-vp2-dp2", 4, runs.PIPELINE_DP, "Pipeline"),
        ("parallelize-ep2", 2, runs.EXPERTS, "DistributedDataParallel"),
    ],
    ids=["pp2-dp2", "pp2-vp2-dp2", "ep2"],
)
def test_parallelize_lays_out_pipelines_and_experts(tmp_path, scenario, world, layout, module):
    """PP with two data-parallel replicas (each stage sharded over them by ``parallelize``'s wrapping),
    and EP under DDP, as the engine's step drives them, against the unsharded model."""
    results = launch(scenario, world, tmp_path)
    assert_same_training(results, runs.reference(layout))
    assert {r["module"] for r in results} == {module}


# --------------------------------------------------------------------------
# Float8


def test_precision_is_chosen_from_the_recipe_and_the_device():
    cpu = torch.device("cpu")
    assert choose_precision("bf16", cpu, "float32").name == "float32"
    plain = choose_precision("fp8", cpu, "float32")
    assert (plain.name, plain.float8) == (
        "float32",
        None,
    ) and "emulation for tests only" in plain.warning
    emulated = choose_precision("fp8", cpu, "float32", emulate_on_cpu=True)
    assert (emulated.name, emulated.float8, emulated.emulate, emulated.warning) == (
        "fp8-tensorwise-emulated",
        "tensorwise",
        True,
        None,
    )
    nvfp4 = choose_precision("nvfp4", cpu, "float32")
    assert nvfp4.name == "float32" and "Transformer Engine" in nvfp4.warning
    assert nvfp4.lines() == ["[llmb] precision: float32", f"[llmb] warning: {nvfp4.warning}."]
    assert emulated.lines() == ["[llmb] precision: fp8-tensorwise-emulated"]


def test_precision_is_recorded_beside_the_planned_dtype(tmp_path):
    (tmp_path / "recipe.json").write_text(json.dumps({"dtype": "fp8", "compute_dtype": "auto"}))
    record_precision(
        str(tmp_path), choose_precision("fp8", torch.device("cpu"), "float32", emulate_on_cpu=True)
    )
    recorded = json.loads((tmp_path / "recipe.json").read_text())
    assert recorded == {
        "dtype": "fp8",
        "compute_dtype": "auto",
        "compute_precision": "fp8-tensorwise-emulated",
    }


FLOAT8_LAYOUT = runs.Layout("llama31", steps=4, mbs=2, ga=2)
# e4m3 keeps 3 mantissa bits (a relative rounding error of at most 1/16 per element); over a dot
# product of 256-832 terms the errors mostly cancel. Measured: the loss moves by at most 2e-3 from
# the float32 run over 4 steps (tensorwise), 5e-4 (rowwise). The bound is 10x that: a broken
# cast (wrong scale, a layer left out of backward) moves the loss by far more, and an idle
# conversion not at all (the second assertion).
FLOAT8_TOLERANCE = 0.02


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_float8_emulation_trains_close_to_full_precision(recipe):
    pytest.importorskip("torchao")
    model, arch = runs.tiny_model(FLOAT8_LAYOUT.workload)
    linears = {name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert apply_float8(model, recipe, emulate=True) == len(linears) - 1  # all but the output layer
    kinds = {name: type(m).__name__ for name, m in model.named_modules() if name in linears}
    assert kinds.pop("output") == "Linear" and set(kinds.values()) == {"Float8Linear"}

    full = runs.reference(FLOAT8_LAYOUT)
    low = runs.reference(FLOAT8_LAYOUT, float8=recipe)
    assert all(torch.isfinite(torch.tensor(low["losses"])))
    assert low["losses"] == pytest.approx(full["losses"], abs=FLOAT8_TOLERANCE)
    assert max(abs(a - b) for a, b in zip(low["losses"], full["losses"], strict=True)) > 1e-6


def test_float8_leaves_the_router_and_unaligned_layers_alone():
    assert not float8_eligible(torch.nn.Linear(64, 8), "layers.1.1.mixer.router")
    assert not float8_eligible(torch.nn.Linear(64, 512), "output")
    assert not float8_eligible(torch.nn.Linear(80, 24), "layers.0.0.mixer.q_proj")
    assert float8_eligible(torch.nn.Linear(80, 32), "layers.0.0.mixer.q_proj")
    with pytest.raises(
        ValueError, match="unknown float8 recipe 'delayed'; known: rowwise, tensorwise"
    ):
        apply_float8(torch.nn.Linear(16, 16), "delayed")


def test_every_tiny_proxy_computes_every_projection_in_float8(host):
    """The tiny shape keeps each linear layer's widths multiples of 16: an fp8 recipe's proxy converts all
    of them (but the output layer and the router), as the full model's run does."""
    from llmb.recipes.proxies import shrink

    for workload in host.workloads().values():
        for size, arch in workload.architectures.items():
            with torch.device("meta"):
                model = host.build_model(workload, shrink(arch, "tiny"))
            left = [
                name
                for name, m in model.named_modules()
                if isinstance(m, torch.nn.Linear)
                and name.rsplit(".", 1)[-1] not in ("output", "router")
                and not float8_eligible(m, name)
            ]
            assert left == [], (workload.name, size, left)
