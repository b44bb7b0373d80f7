"""Read a variant's ``production:`` section of a plugin's ``workload.yaml``.

It names what the production framework needs beyond the recipe tables: the
framework's recipe for each size, the seed's profiling defaults, rules the
seed's launcher applies to some recipes only, and the Hugging Face files
``llmb install`` fetches. The format is documented in
``docs/writing-a-workload-plugin.md``; every mistake raises ``ValueError``
naming the key and the valid values (the loader adds where it happened).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmb.env_names import env_name_problem
from llmb.recipes.gpus import DTYPES, catalogue
from llmb.recipes.records import (
    PROFILE_WINDOW,
    HuggingFaceFiles,
    Production,
    ProductionRule,
    RecipeSeries,
)

KEYS = ("recipes", "profile_window", "profile_ranks", "flops_callback", "rules", "huggingface")
RULE_KEYS = ("match", "min_gpus", "max_gpus", "precision", "env", "overrides", "why")
MATCH_KEYS = ("size", "gpu", "dtype", "scaling")
HF_KEYS = ("repos", "assets", "gated")
HF_ASSETS = ("config", "tokenizer")


def _known(raw: Mapping[str, Any], valid: Sequence[str], what: str) -> None:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{what} must be a mapping with keys {', '.join(valid)}")
    unknown = sorted(set(map(str, raw)) - set(valid))
    if unknown:
        raise ValueError(f"unknown {what} keys {unknown}; valid: {', '.join(valid)}")


def _sizes_of(series: Sequence[RecipeSeries]) -> list[str]:
    return list(dict.fromkeys(s.size for s in series))


def _size_map(raw: Any, sizes: list[str], what: str, *, complete: bool) -> dict[str, str]:
    if not isinstance(raw, Mapping) or not raw:
        raise ValueError(f"{what} must map each size ({', '.join(sizes)}) to a name")
    out = {str(k).lower(): str(v).strip() for k, v in raw.items()}
    unknown = [s for s in out if s not in sizes]
    if unknown:
        raise ValueError(
            f"{what} names sizes {unknown} this variant does not have; its sizes: {', '.join(sizes)}"
        )
    missing = [s for s in sizes if s not in out]
    if complete and missing:
        raise ValueError(
            f"{what} lacks sizes {missing}; every size of the variant needs one: {', '.join(sizes)}"
        )
    empty = [s for s, v in out.items() if not v]
    if empty:
        raise ValueError(f"{what} gives an empty name for {empty}")
    return out


def _pair(raw: Any, what: str) -> tuple[int, int]:
    if not isinstance(raw, Sequence) or isinstance(raw, str) or len(raw) != 2:
        raise ValueError(f"{what} must be two integers [first, last], got {raw!r}")
    first, last = (int(v) for v in raw)
    if not 0 <= first < last:
        raise ValueError(f"{what} [{first}, {last}] must have 0 <= first < last")
    return first, last


def _match(raw: Any, sizes: list[str]) -> dict[str, tuple[str, ...]]:
    _known(raw, MATCH_KEYS, "rule match")
    valid = {
        "size": sizes,
        "gpu": list(catalogue()),
        "dtype": list(DTYPES),
        "scaling": ["weak", "strong"],
    }
    out: dict[str, tuple[str, ...]] = {}
    for key, value in raw.items():
        values = tuple(str(v).lower() for v in (value if isinstance(value, list) else [value]))
        bad = [v for v in values if v not in valid[key]]
        if bad:
            raise ValueError(f"rule match {key} {bad} is unknown; valid: {', '.join(valid[key])}")
        out[key] = values
    return out


def _rule(raw: Any, series: Sequence[RecipeSeries]) -> ProductionRule:
    _known(raw, RULE_KEYS, "rule")
    if not str(raw.get("why", "")).strip():
        raise ValueError("a rule needs 'why': where the setting comes from")
    if not {"precision", "env", "overrides"} & set(raw):
        raise ValueError(
            "a rule sets 'precision' (a mixed-precision preset), 'env' (variables) and/or "
            "'overrides' (framework configuration fields)"
        )
    overrides = raw.get("overrides") or {}
    if not isinstance(overrides, Mapping) or not all(
        isinstance(k, str) and k.strip() for k in overrides
    ):
        raise ValueError(
            "rule overrides must map framework configuration paths (model.recompute_modules) to values"
        )
    env = raw.get("env") or {}
    if not isinstance(env, Mapping):
        raise ValueError("rule env must map variable names to values")
    for name in env:
        if problem := env_name_problem(name, "rule env name"):
            raise ValueError(problem)
    rule = ProductionRule(
        match=_match(raw.get("match") or {}, _sizes_of(series)),
        why=" ".join(str(raw["why"]).split()),
        min_gpus=int(raw.get("min_gpus", 0)),
        precision=None if raw.get("precision") is None else str(raw["precision"]).strip(),
        env={str(k): str(v) for k, v in env.items()},
        max_gpus=int(raw.get("max_gpus", 0)),
        overrides=dict(overrides),
    )
    if not any(
        rule.applies(s.size, s.gpu, d, s.scaling, n)
        for s in series
        for d in s.dtypes
        for n in (s.min_gpus, s.max_gpus)
    ):
        raise ValueError(f"rule ({rule.why[:60]}...) matches no recipe of the variant")
    return rule


def _huggingface(raw: Any, sizes: list[str]) -> HuggingFaceFiles:
    _known(raw, HF_KEYS, "huggingface")
    assets = tuple(str(a).lower() for a in raw.get("assets") or ())
    if not assets or any(a not in HF_ASSETS for a in assets):
        raise ValueError(
            f"huggingface assets {list(assets)}: give one or more of {', '.join(HF_ASSETS)}"
        )
    gated = raw.get("gated", False)
    if not isinstance(gated, bool):
        raise ValueError(f"huggingface gated must be true or false, got {gated!r}")
    repos = _size_map(raw.get("repos"), sizes, "huggingface repos", complete=False)
    bad = [r for r in repos.values() if r.count("/") != 1]
    if bad:
        raise ValueError(f"huggingface repos {bad} are not 'owner/name' repository ids")
    return HuggingFaceFiles(repos=repos, assets=assets, gated=gated)


def production_from_dict(raw: Any, series: Sequence[RecipeSeries]) -> Production:
    """The ``production:`` section of a variant whose recipe series are ``series``."""
    _known(raw, KEYS, "production")
    sizes = _sizes_of(series)
    ranks = raw.get("profile_ranks", "all")
    return Production(
        recipes=_size_map(raw.get("recipes"), sizes, "production recipes", complete=True),
        profile_window=_pair(raw.get("profile_window", PROFILE_WINDOW), "profile_window"),
        profile_ranks=None if ranks == "all" else _pair(ranks, "profile_ranks"),
        flops_callback=None if raw.get("flops_callback") is None else str(raw["flops_callback"]),
        rules=tuple(_rule(r, series) for r in raw.get("rules") or ()),
        huggingface=None
        if raw.get("huggingface") is None
        else _huggingface(raw["huggingface"], sizes),
    )
