"""The core's own hook implementations: the defaults that workload plugins
may replace (both run ``trylast``, so any plugin answer comes first)."""

from __future__ import annotations

from llmb import hookimpl
from llmb.recipes.flops import megatron_bridge_sample
from llmb.recipes.records import ModelArch, ModelFlops, Recipe, RecipeRequest, Workload
from llmb.recipes.resolve import resolve_from_tables


@hookimpl(trylast=True)
def llmb_resolve_recipe(workload: Workload, request: RecipeRequest) -> Recipe:
    return resolve_from_tables(workload, request)


@hookimpl(trylast=True)
def llmb_model_flops(workload: Workload, arch: ModelArch, seq_len: int) -> ModelFlops | None:
    return megatron_bridge_sample(arch, seq_len)


@hookimpl
def llmb_log_parsers() -> list:
    from llmb.results.parsers import BUILTIN_PARSERS

    return list(BUILTIN_PARSERS)


@hookimpl
def llmb_backends() -> list:
    from llmb.backends import Backend

    def load():
        from llmb.backends.local import LocalBackend

        return LocalBackend()

    return [Backend("local", "this machine: one process per rank, state on disk", load)]


@hookimpl
def llmb_flaky_signatures() -> list[str]:
    from llmb.runs.flaky import builtin_signatures

    return list(builtin_signatures())
