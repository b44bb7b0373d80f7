"""NVFP4 / MXFP8 rows through Transformer Engine's layers (``llmb.engines.torch.parallel.transformer_engine``).

Transformer Engine's CUDA extension cannot load on a machine without a GPU,
so ``transformer_engine.pytorch`` is replaced here by a stand-in with the
documented interface the engine uses: ``Linear(in_features, out_features,
bias=, params_dtype=, device=)``, ``autocast(enabled=, recipe=)``,
``is_nvfp4_available(return_reason=True)`` / ``is_mxfp8_available``, and the
recipe classes of ``transformer_engine.common.recipe``. Its Linear computes
as ``nn.Linear``, so a converted model must give the unconverted one's
output exactly.
"""

from __future__ import annotations

import contextlib
import io
import sys
import types
from dataclasses import replace

import pytest
import torch
from llmb.engines.torch.parallel import transformer_engine as te_path
from llmb.engines.torch.parallel.float8 import Precision, choose_precision
from llmb.engines.torch.train import Engine
from test_engine_step import STEPS, tiny_spec

CUDA = torch.device("cuda")  # a device object only: nothing runs on it


class FakeTE:
    """What the engine calls of ``transformer_engine.pytorch``, recording the recipes it was entered with."""

    def __init__(self, available: bool = True) -> None:
        self.available, self.entered = available, []
        fake = self

        class Linear(torch.nn.Linear):
            def __init__(
                self, in_features, out_features, bias=True, params_dtype=None, device="cuda"
            ):
                super().__init__(
                    in_features, out_features, bias=bias, dtype=params_dtype, device=device
                )

        @contextlib.contextmanager
        def autocast(enabled=True, recipe=None):
            fake.entered.append(type(recipe).__name__)
            yield

        self.module = types.SimpleNamespace(
            Linear=Linear,
            autocast=autocast,
            is_nvfp4_available=lambda return_reason=False: (
                fake.available,
                "" if fake.available else "needs SM 10.0",
            ),
            is_mxfp8_available=lambda return_reason=False: (
                fake.available,
                "" if fake.available else "needs SM 10.0",
            ),
        )
        self.recipes = types.SimpleNamespace(
            NVFP4BlockScaling=type("NVFP4BlockScaling", (), {}),
            MXFP8BlockScaling=type("MXFP8BlockScaling", (), {}),
        )


@pytest.fixture
def fake_te(monkeypatch):
    fake = FakeTE()
    monkeypatch.setitem(sys.modules, "transformer_engine", types.ModuleType("transformer_engine"))
    monkeypatch.setitem(sys.modules, "transformer_engine.pytorch", fake.module)
    monkeypatch.setitem(
        sys.modules, "transformer_engine.common", types.ModuleType("transformer_engine.common")
    )
    monkeypatch.setitem(sys.modules, "transformer_engine.common.recipe", fake.recipes)
    return fake


def test_without_transformer_engine_a_block_scaled_row_computes_in_bf16_and_says_why(monkeypatch):
    # import fails, as on a CPU machine
    monkeypatch.setitem(sys.modules, "transformer_engine.pytorch", None)
    assert te_path.availability("nvfp4", CUDA, 1) == (
        False,
        "Transformer Engine is not installed here (it is in NVIDIA's NeMo container)",
    )
    chosen = choose_precision("nvfp4", CUDA, "bfloat16")
    assert chosen.name == "bfloat16" and chosen.te is None and "not installed" in chosen.warning
    assert "GPU kernels" in choose_precision("mxfp8", torch.device("cpu"), "float32").warning


def test_with_transformer_engine_the_row_runs_its_own_format(fake_te):
    from llmb.runs.runspec import BLOCK_SCALED

    # a recipe for every format planning names
    assert set(te_path.BLOCK_SCALED_RECIPES) == set(BLOCK_SCALED)
    assert choose_precision("nvfp4", CUDA, "bfloat16") == Precision(
        "nvfp4-transformer-engine", te="nvfp4"
    )
    assert choose_precision("mxfp8", CUDA, "bfloat16").te == "mxfp8"
    tp = choose_precision("nvfp4", CUDA, "bfloat16", tensor_parallel=2)  # TE's own TP is not driven
    assert tp.te is None and "TP 2" in tp.warning
    fake_te.available = False
    unsupported = choose_precision("nvfp4", CUDA, "bfloat16")
    assert unsupported.te is None and "needs SM 10.0" in unsupported.warning
    assert choose_precision("bf16", CUDA, "bfloat16") == Precision("bfloat16")


def test_converted_linears_keep_their_weights_and_outputs(fake_te, host):
    from llmb.engines.torch import blocks
    from llmb.recipes.proxies import shrink

    work = host.workload("llama31")
    arch = shrink(work.architecture(work.sizes()[0]), "tiny")
    torch.manual_seed(0)
    model = blocks.initialize(host.build_model(work, arch))
    tokens = torch.randint(0, arch.vocab, (2, 16))
    expected = model(tokens)
    before = {name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert te_path.apply_te_linears(model) > 0
    converted = {name for name, m in model.named_modules() if isinstance(m, fake_te.module.Linear)}
    assert (
        converted
        and converted < before
        and not any(n.endswith(("output", "router")) for n in converted)
    )
    torch.testing.assert_close(model(tokens), expected, rtol=0, atol=0)
    with te_path.te_autocast("mxfp8")():
        pass
    assert fake_te.entered == ["MXFP8BlockScaling"]


class TransformerEngineRow(Engine):
    """The engine as a GPU node with Transformer Engine would choose for an nvfp4 row."""

    def choose_precision(self):
        return Precision("nvfp4-transformer-engine", te="nvfp4")


def test_the_engine_converts_and_runs_every_forward_under_the_rows_recipe(fake_te, host):
    spec = replace(tiny_spec(host, ga=2), dtype="nvfp4")
    engine = TransformerEngineRow(spec, 0, 1, 0, host)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        engine.build()
    assert "[llmb] precision: nvfp4-transformer-engine" in out.getvalue().splitlines()
    assert any(isinstance(m, fake_te.module.Linear) for m in engine.model.modules())
    losses = [engine.step(step)[0] for step in range(1, STEPS + 1)]
    engine.close()
    assert all(loss == loss for loss in losses)
    # each micro-batch's forward
    assert fake_te.entered == ["NVFP4BlockScaling"] * (STEPS * spec.ga)
