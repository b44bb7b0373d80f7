"""Build a ``Workload`` record from the YAML data file a plugin ships.

The file keeps each seed table as the seed prints it (columns in the seed's
order, ``NA`` where the seed says NA, ``GPUs/2`` formula cells, ``8-128``
ranges), so a test can compare it cell by cell with the seed. Everything else
(series, errata, derived sizes) is computed here. The format is documented
in ``docs/writing-a-workload-plugin.md``.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import fields, replace
from fractions import Fraction
from typing import Any

from llmb.errors import DataError
from llmb.recipes.gpus import DTYPES, catalogue
from llmb.recipes.production_file import production_from_dict
from llmb.recipes.records import (
    FAILURE_KINDS,
    Deprecation,
    Erratum,
    FailureHint,
    ModelArch,
    Provenance,
    RecipeLayout,
    RecipeSeries,
    ReferenceResult,
    SeedRow,
    UpstreamRecipe,
    Variant,
    Workload,
)
from llmb.recipes.scale_expr import ScaleExpr
from llmb.recipes.validity import check_layout
from llmb.yamlio import load_yaml, load_yaml_file

# Seed column headings -> field names. Headings not listed are refused.
COLUMN_NAMES = {
    "size": "size",
    "model size": "size",
    "llama3.1 model size": "size",
    "gpus": "gpus",
    "datatype": "dtype",
    "precision": "dtype",
    "seqlen": "seq_len",
    "layers": "layers",
    "fsdp": "fsdp",
    "tp": "tp",
    "pp": "pp",
    "cp": "cp",
    "ep": "ep",
    "etp": "etp",
    "dp": "dp",
    "vp": "vp",
    "mbs": "mbs",
    "gbs": "gbs",
    "ga": "ga",
    "cg": "cuda_graphs",
}
REQUIRED_COLUMNS = ("size", "gpus", "dtype", "seq_len", "layers", "tp", "pp", "cp", "mbs", "gbs")
SETTABLE = (
    "tp",
    "pp",
    "cp",
    "ep",
    "etp",
    "vp",
    "mbs",
    "gbs",
    "fsdp",
    "cuda_graphs",
    "seq_len",
    "layers",
    "recompute_layers",
    "offload_layers",
)
# The fields that tell one series from another within a table (the rest are
# the table's, the scale's or the provenance).
LAYOUT = tuple(
    f.name
    for f in fields(RecipeLayout)
    if f.name not in ("variant", "gpu", "scaling", "dtypes", "gbs", "provenance")
)
ARCH_FIELDS = {f.name for f in fields(ModelArch)}
FRAMEWORKS = ("megatron_bridge", "nemo2")
MFU_METHODS = ("formula", "log")
SCALINGS = ("weak", "strong")
REFERENCE_COLUMNS = (
    "gpus",
    "size",
    "step_time_s",
    "tokens_per_s",
    "mfu_pct",
    "days_1t",
    "tflops_per_gpu",
    "erratum",
)


@contextmanager
def _context(where: str):
    """Prefix any error raised inside with where it happened in the file."""
    try:
        yield
    except KeyError as exc:
        raise ValueError(f"{where}: missing key {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


def _one_of(value: Any, valid: tuple[str, ...] | list[str], what: str) -> str:
    text = str(value).strip().lower()
    if text not in valid:
        raise ValueError(f"unknown {what} {value!r}; valid: {', '.join(valid)}")
    return text


def load_workload(package: str, resource: str = "workload.yaml") -> Workload:
    """Load ``resource`` from ``package`` (a plugin's own data file)."""
    try:
        raw = _read(package, resource)
    except Exception as exc:  # malformed YAML, missing file
        raise DataError(f"{package}/{resource}: {exc}") from exc
    try:
        workload = workload_from_dict(raw)
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{package}/{resource}: {exc}") from exc
    if summary := raw.get("performance_summary"):  # another data file of the same package
        from llmb.recipes.gpus import catalogue
        from llmb.recipes.summary_file import summary_from_dict

        try:
            workload = replace(
                workload, summary=summary_from_dict(_read(package, str(summary)), set(catalogue()))
            )
        except Exception as exc:  # malformed YAML, a missing file or column
            raise DataError(f"{package}/{summary}: {exc}") from exc
    if cards := raw.get("verification_cards"):  # another data file of the same package
        from llmb.recipes.card_file import cards_from_dict
        from llmb.recipes.gpus import catalogue

        try:
            workload = replace(
                workload, cards=cards_from_dict(_read(package, str(cards)), set(catalogue()))
            )
        except Exception as exc:  # malformed YAML, a missing file or key
            raise DataError(f"{package}/{cards}: {exc}") from exc
    return workload


def _read(package: str, resource: str) -> Any:
    module = importlib.import_module(package)
    origin = getattr(module, "__file__", None)
    if origin and os.path.isfile(path := os.path.join(os.path.dirname(origin), resource)):
        return load_yaml_file(path)
    from importlib.resources import files  # a zipped or otherwise unusual install

    return load_yaml(files(package).joinpath(resource).read_bytes())


# The keys of workload files written before llmb 0.2 named the recipe document a "seed".
_OLD_KEYS = {"seed": "document", "seed_table": "table", "seed_says": "recipe_says"}


def _with_current_keys(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with the old names of the document keys (``seed``, ``seed_table``, ``seed_says``) in
    variants, their tables and errata, notes and references renamed, with a DeprecationWarning:
    a published plugin keeps loading."""
    renamed: set[str] = set()

    def fix(entry: Any, nested: tuple[str, ...] = ()) -> Any:
        if not isinstance(entry, dict):
            return entry
        old = [key for key in _OLD_KEYS if key in entry and _OLD_KEYS[key] not in entry]
        renamed.update(old)
        entry = {(_OLD_KEYS[key] if key in old else key): value for key, value in entry.items()}
        for key in nested:
            if isinstance(entry.get(key), list):
                entry[key] = [fix(item) for item in entry[key]]
        return entry

    out = dict(raw)
    for section, nested in (("variants", ("tables", "errata")), ("notes", ()), ("references", ())):
        if isinstance(raw.get(section), list):
            out[section] = [fix(item, nested) for item in raw[section]]
    if renamed:
        import warnings

        warnings.warn(
            f"workload {raw.get('name')!r}: {', '.join(sorted(renamed))} are the old names of document, "
            f"table and recipe_says; rename them",
            DeprecationWarning,
            stacklevel=3,
        )
    return out


def _name_text(value: Any, what: str, example: str) -> str:
    """A name the file gives (the workload's, an alias, a model family) as the string it must be. YAML
    reads an unquoted ``no``, ``off``, ``yes``, ``on``, ``true``, ``false`` as a boolean and ``null`` (or
    nothing) as null: such a name is refused, saying how to write it, rather than turned into
    ``False``."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, bool) or value is None:
        word = {True: "yes, on or true", False: "no, off or false", None: "null, ~ or nothing"}[
            value
        ]
        raise ValueError(
            f"{what} must be a string, but YAML read it as {value!r} (an unquoted {word}); quote it, "
            f"e.g. {example}"
        )
    raise ValueError(
        f"{what} must be a string of letters and digits, not {type(value).__name__} {value!r}; "
        f"quote it if YAML reads it as something else"
    )


def workload_from_dict(raw: dict[str, Any]) -> Workload:
    with _context("workload"):
        raw = _with_current_keys(raw)
        name = _name_text(raw["name"], "the workload's name", 'name: "no"')
        raw["variants"]
    archs = _architectures(raw.get("architectures") or {})
    with _context("documents"):
        titles = _documents(raw.get("documents") or {})
    variants = []
    for index, variant in enumerate(raw["variants"]):
        with _context(
            f"variant {variant.get('name', index + 1) if isinstance(variant, dict) else index + 1}"
        ):
            variants.append(_variant(variant, titles))
    for variant in variants:
        for series in variant.series:
            if series.size not in archs:
                raise ValueError(
                    f"variant {variant.name}: size {series.size!r} has no architecture entry"
                )
    references = []
    for index, ref in enumerate(raw.get("references") or ()):
        with _context(f"references entry {index + 1}"):
            references.extend(_references(ref, titles))
    with _context("notes"):
        notes = tuple(
            _erratum(e, _title(titles, str(e.get("document", "")))) for e in raw.get("notes") or ()
        )
    known = {n.id for n in notes}
    for ref in references:
        if ref.erratum and ref.erratum not in known:
            raise ValueError(
                f"reference {ref.provenance.describe()} cites unknown erratum {ref.erratum!r}"
            )
    with _context("failure_hints"):
        hints = tuple(
            FailureHint(
                failure=_one_of(h["failure"], FAILURE_KINDS, "failure kind"),
                hint=str(h["hint"]).strip(),
                gpu=None
                if h.get("gpu") is None
                else _one_of(h["gpu"], list(catalogue()), "GPU type"),
                source=str(h.get("source", "")),
            )
            for h in raw.get("failure_hints") or ()
        )
    return Workload(
        name=name,
        description=str(raw.get("description", "")),
        variants=tuple(variants),
        architectures=archs,
        references=tuple(references),
        notes=notes,
        experiment_prefixes=tuple(str(p) for p in raw.get("experiment_prefixes") or ()),
        failure_hints=hints,
        documents=titles,
        aliases=_aliases(name, raw.get("aliases") or ()),
        deprecated=_deprecation(raw.get("deprecated")),
    )


DEPRECATION_KEYS = ("by", "release", "document", "last_release", "commit")


def _deprecation(raw: Any) -> Deprecation | None:
    """``deprecated:``: who deprecated the workload, in which release, and the document that says so
    (required); the last release that shipped its recipe and the document's commit (optional)."""
    if raw is None:
        return None
    with _context("deprecated"):
        if not isinstance(raw, dict):
            raise ValueError(
                "expected a mapping: by, release and document (and optionally last_release, commit), e.g. "
                "{by: NVIDIA/exemplar-performance, release: v26.08.00, document: README.md}"
            )
        unknown = sorted(set(map(str, raw)) - set(DEPRECATION_KEYS))
        if unknown:
            raise ValueError(f"unknown keys {unknown}; valid: {', '.join(DEPRECATION_KEYS)}")
        values = {k: " ".join(str(raw.get(k) or "").split()) for k in DEPRECATION_KEYS}
        missing = [k for k in ("by", "release", "document") if not values[k]]
        if missing:
            raise ValueError(
                f"missing {', '.join(missing)}: say who deprecated it, in which release, where"
            )
        return Deprecation(**values)


def _aliases(name: str, raw) -> tuple[str, ...]:
    """The workload's other names, lower case: words of letters, digits, '.', '_' and '-' (they are
    typed on command lines and used as sweep-file headers), never its own name."""
    with _context("aliases"):
        if not isinstance(raw, list | tuple):
            raise ValueError("aliases must be a list of names, e.g. [pretrain_llama3.1, llama3.1]")
        aliases = tuple(
            dict.fromkeys(_name_text(a, "an alias", 'aliases: ["no"]').lower() for a in raw)
        )
        for alias in aliases:
            if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", alias) or alias == name.lower():
                raise ValueError(
                    f"alias {alias!r}: expected a name of letters, digits, '.', '_' and '-' other "
                    f"than the workload's own ({name})"
                )
        return aliases


# ---------------------------------------------------------------- architectures


def _architectures(raw: dict[str, Any]) -> dict[str, ModelArch]:
    """Sizes in file order; ``base: <size>`` copies an earlier size and
    changes the keys given (head_dim follows hidden/heads unless given)."""
    out: dict[str, ModelArch] = {}
    for size, spec in raw.items():
        size = str(size)
        with _context(f"architecture {size}"):
            spec = dict(spec)
            base = spec.pop("base", None)
            unknown = set(spec) - ARCH_FIELDS
            if unknown:
                raise ValueError(
                    f"unknown keys {sorted(unknown)}; valid: {', '.join(sorted(ARCH_FIELDS))}"
                )
            if spec.get("published_params") is not None:
                # YAML reads 56e9 as a string
                spec["published_params"] = float(spec["published_params"])
            if "family" in spec:
                spec["family"] = _name_text(spec["family"], "family", 'family: "no"')
            if base is not None:
                if str(base) not in out:
                    raise ValueError(f"base {base!r} is not defined above it")
                merged = {**out[str(base)].__dict__, **spec, "size": size}
                if "head_dim" not in spec and {"hidden", "heads"} & set(spec):
                    merged["head_dim"] = merged["hidden"] // merged["heads"]
                out[size] = ModelArch(**merged)
                continue
            spec.setdefault("head_dim", spec["hidden"] // spec["heads"])
            out[size] = ModelArch(size=size, **spec)
    return out


# ---------------------------------------------------------------- recipe tables


def _documents(raw: Any) -> dict[str, str]:
    """Recipe document file -> its public title, the name users are shown."""
    if not isinstance(raw, dict):
        raise ValueError("documents must map each recipe document's file name to its public title")
    return {str(k): " ".join(str(v).split()) for k, v in raw.items()}


def _title(titles: dict[str, str], seed: str) -> str:
    """What users are shown for a document: its public title, else the file's own name."""
    return titles.get(seed, seed)


def _variant(raw: dict[str, Any], titles: dict[str, str]) -> Variant:
    name = str(raw["name"])
    seed = str(raw["document"])
    title = _title(titles, seed)
    framework = _one_of(raw["framework"], FRAMEWORKS, "framework")
    seed_rows = []
    for table in raw["tables"]:
        with _context(f"table {table.get('table', '?')}"):
            seed_rows.extend(
                _seed_rows(name, Provenance(seed=seed, title=title, table=None, rows=()), table)
            )
    seed_rows = tuple(seed_rows)
    errata = tuple(_erratum(e, title) for e in raw.get("errata") or ())
    amendments = [(e, erratum) for e, erratum in zip(raw.get("errata") or (), errata, strict=True)]
    amendments += [(a, None) for a in raw.get("adjustments") or ()]
    series = _series(seed_rows, amendments)
    window = tuple(int(x) for x in raw.get("window", (35, 44)))
    production = None
    if raw.get("production") is not None:
        with _context("production"):
            production = production_from_dict(raw["production"], series)
    upstream = None
    if raw.get("upstream") is not None:
        with _context("upstream"):
            upstream = _upstream(raw["upstream"])
    container = str(raw.get("container") or "").strip()
    by_gpu = {}
    if raw.get("containers_by_gpu") is not None:
        with _context("containers_by_gpu"):
            by_gpu = _containers_by_gpu(raw["containers_by_gpu"], container, series)
    return Variant(
        name=name,
        framework=framework,
        seed=seed,
        container=container,
        containers_by_gpu=by_gpu,
        window=(window[0], window[1]),
        description=str(raw.get("description", "")),
        defaults={k: str(v).lower() for k, v in (raw.get("defaults") or {}).items()},
        series=series,
        seed_rows=seed_rows,
        errata=errata,
        log_tflops_valid=_cell_bool(raw.get("log_tflops_valid", True)),
        mfu_from=_one_of(raw.get("mfu_from", "formula"), MFU_METHODS, "MFU method"),
        production=production,
        upstream=upstream,
    )


def _containers_by_gpu(raw: Any, default: str, series: tuple[RecipeSeries, ...]) -> dict[str, str]:
    """``containers_by_gpu:``: GPU type -> the container image the recipe runs in on it, where that is not
    the variant's ``container`` (the default, which every other GPU type of its tables runs in)."""
    if not isinstance(raw, dict) or not raw:
        raise ValueError(
            "expected a mapping of GPU types to container images, e.g. "
            "{gb200: 'nvcr.io#nvidia/nemo:25.07.01'}"
        )
    if not default:
        raise ValueError("needs the variant's container too: the image of its other GPU types")
    tables = list(dict.fromkeys(s.gpu for s in series))
    out: dict[str, str] = {}
    for key, value in raw.items():
        gpu = _one_of(key, list(catalogue()), "GPU type")
        if gpu not in tables:
            raise ValueError(
                f"{gpu} has no table in this variant; its GPU types: {', '.join(tables)}"
            )
        if gpu in out:
            raise ValueError(f"{gpu} is named twice")
        image = value.strip() if isinstance(value, str) else ""
        if not image or any(c.isspace() for c in image):
            raise ValueError(
                f"{gpu}: expected one container image, e.g. nvcr.io#nvidia/nemo:25.07.01, got {value!r}"
            )
        out[gpu] = image
    return out


def _upstream(raw: Any) -> UpstreamRecipe:
    """The public recipe a variant's document is (``upstream:``), and the collection's current one."""
    if not isinstance(raw, dict):
        raise ValueError("upstream must be a mapping: repository, release, commit, path, current_*")
    valid = {f.name for f in fields(UpstreamRecipe)}
    if unknown := set(raw) - valid:
        raise ValueError(f"unknown keys {sorted(unknown)}; valid: {', '.join(sorted(valid))}")
    return UpstreamRecipe(**{k: " ".join(str(v).split()) for k, v in raw.items()})


def _cell_none(value: Any) -> Any:
    # "" is a cell the document leaves blank (DeepSeek-V3's B200 BF16 VP): nothing given, as NA
    return None if value is None or str(value).strip().upper() in ("", "NA", "N/A") else value


def _dtype_cell(value: str) -> str:
    """A precision cell without the scaling recipe a document adds in parentheses: the MLPerf
    GPT-OSS recipe's ``FP8 (MX)`` is FP8 (how FP8 runs is the variant's production rules')."""
    return re.sub(r"\s*\([^)]*\)\s*$", "", value)


def _cell_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ValueError(f"expected True or False, got {value!r}")


def _cell_int(value: Any) -> int | None:
    value = _cell_none(value)
    return None if value is None else int(value)


def _parse_gpus(value: Any) -> tuple[int, int]:
    text = str(value).strip()
    if "-" in text:
        lo, hi = (int(p) for p in text.split("-", 1))
        return lo, hi
    return int(text), int(text)


def _seed_rows(variant: str, document: Provenance, table: dict[str, Any]) -> Iterable[SeedRow]:
    columns = [COLUMN_NAMES.get(str(c).lower(), str(c).lower()) for c in table["columns"]]
    unknown = [c for c in columns if c not in COLUMN_NAMES.values()]
    if unknown:
        raise ValueError(
            f"unknown columns {unknown}; known: {', '.join(sorted(set(COLUMN_NAMES.values())))}"
        )
    # A table without a size column (the document names the size in the heading above it) says
    # it once, as ``size:`` beside ``gpu:``.
    table_size = table.get("size")
    if table_size is not None and "size" in columns:
        raise ValueError("size is given both as the table's size: and as a column")
    # A table without a Layers column (Kimi-K2's) gives the model's layer count once, as ``layers:``,
    # from the model's public config (the file's comment names it).
    table_layers = table.get("layers")
    if table_layers is not None and "layers" in columns:
        raise ValueError("layers is given both as the table's layers: and as a column")
    given = {"size": table_size, "layers": table_layers}
    missing = [c for c in REQUIRED_COLUMNS if c not in columns and given.get(c) is None]
    if missing:
        raise ValueError(f"missing columns {missing}")
    gpu = _one_of(table["gpu"], list(catalogue()), "GPU type")
    scaling = _one_of(table.get("scaling", "weak"), SCALINGS, "scaling")
    provenance_table = int(table["table"])
    for index, cells in enumerate(table["rows"]):
        with _context(f"row {index + 1}"):
            if len(cells) != len(columns):
                raise ValueError(f"{len(cells)} cells for {len(columns)} columns")
            row = dict(zip(columns, cells, strict=True))
            yield SeedRow(
                variant=variant,
                gpu=gpu,
                scaling=scaling,
                size=str(row["size"] if table_size is None else table_size).lower(),
                dtypes=tuple(
                    _one_of(_dtype_cell(d), DTYPES, "dtype") for d in str(row["dtype"]).split("/")
                ),
                gpus=_parse_gpus(row["gpus"]),
                seq_len=int(row["seq_len"]),
                layers=int(row["layers"] if table_layers is None else table_layers),
                fsdp=_cell_bool(row.get("fsdp", False)),
                cuda_graphs=_cell_bool(row.get("cuda_graphs", False)),
                tp=int(row["tp"]),
                pp=int(row["pp"]),
                cp=int(row["cp"]),
                ep=_cell_int(row.get("ep")),
                etp=_cell_int(row.get("etp")),
                vp=_cell_int(row.get("vp")),
                mbs=int(row["mbs"]),
                gbs=ScaleExpr.parse(row["gbs"]),
                dp=_printed_or(row.get("dp")),
                ga=_printed_or(row.get("ga")),
                provenance=replace(document, table=provenance_table, rows=(index,)),
            )


def _printed_or(value: Any) -> ScaleExpr:
    """A printed DP/GA cell; tables without the column read as ``NA`` (0)."""
    value = _cell_none(value)
    return ScaleExpr.constant(0) if value is None else ScaleExpr.parse(value)


def _erratum(raw: dict[str, Any], document: str) -> Erratum:
    return Erratum(
        id=str(raw["id"]),
        document=document,
        recipe_says=str(raw["recipe_says"]).strip(),
        resolution=str(raw["resolution"]).strip(),
        source=str(raw.get("source", "")).strip(),
        kind=str(raw.get("kind", "figure")),
    )


def _matches(match: dict[str, Any], row: SeedRow, dtype: str) -> bool:
    for key, want in match.items():
        if key == "table":
            have: Any = row.provenance.table
        elif key == "gpus":  # the scale as printed: "8-128" or "1024"
            low, high = row.gpus
            have = f"{low}-{high}" if row.is_range else low
        elif key == "dtype":
            have = dtype
        else:
            have = getattr(row, key)
        if str(have).lower() != str(want).lower():
            return False
    return True


def _amend(row: SeedRow, settings: dict[str, Any]) -> SeedRow:
    changes: dict[str, Any] = {}
    for key, value in settings.items():
        if key not in SETTABLE:
            raise ValueError(f"amendment sets {key!r}; settable: {', '.join(SETTABLE)}")
        if key == "gbs":
            changes[key] = ScaleExpr.parse(value)
        elif key in ("fsdp", "cuda_graphs"):
            changes[key] = _cell_bool(value)
        else:
            changes[key] = _cell_int(value)
    return replace(row, **changes)


def _series(
    rows: tuple[SeedRow, ...], amendments: list[tuple[dict[str, Any], Erratum | None]]
) -> tuple[RecipeSeries, ...]:
    """One series per (dtype, configuration): explicit rows that differ only
    in scale merge; each amendment applies to the rows its ``match`` selects."""
    used = [False] * len(amendments)
    groups: dict[tuple, list[tuple[SeedRow, tuple[Erratum, ...], tuple[str, ...], set[str]]]] = {}
    for row in rows:
        for dtype in row.dtypes:
            amended, errata, notes, changed = row, [], [], set()
            for i, (raw, erratum) in enumerate(amendments):
                if _matches(raw.get("match") or {}, row, dtype):
                    amended = _amend(amended, raw.get("set") or {})
                    changed.update(raw.get("set") or {})
                    used[i] = True
                    if erratum is not None:
                        errata.append(erratum)
                    else:
                        notes.append(str(raw["why"]).strip())
            key = (
                row.provenance.table,
                dtype,
                row.is_range,
                row.gpus if row.is_range else None,
                *(getattr(amended, f) for f in LAYOUT),
            )
            groups.setdefault(key, []).append(
                (replace(amended, dtypes=(dtype,)), tuple(errata), tuple(notes), changed)
            )
    for (raw, _), was_used in zip(amendments, used, strict=True):
        if not was_used:
            raise ValueError(f"amendment {raw.get('id', raw.get('why'))!r} matches no row")
    return tuple(_merge(members) for members in groups.values())


def _merge(
    members: list[tuple[SeedRow, tuple[Erratum, ...], tuple[str, ...], set[str]]],
) -> RecipeSeries:
    first, errata, notes, _ = members[0]
    rows = [m[0] for m in members]
    layout = {f.name: getattr(first, f.name) for f in fields(RecipeLayout)}
    layout["gbs"] = _series_gbs(rows)
    layout["provenance"] = replace(first.provenance, rows=tuple(r.provenance.rows[0] for r in rows))
    series = RecipeSeries(
        **layout,
        min_gpus=min(r.gpus[0] for r in rows),
        max_gpus=max(r.gpus[1] for r in rows),
        listed_gpus=tuple(sorted(r.gpus[0] for r in rows)) if not first.is_range else first.gpus,
        is_range=first.is_range,
        errata=errata,
        adjustments=notes,
        amended=frozenset().union(*(m[3] for m in members)),
    )
    for gpus in sorted({series.min_gpus, series.max_gpus, *series.listed_gpus}):
        problem = check_layout(series, gpus)
        if problem:
            raise ValueError(
                f"{series.provenance.describe()} ({series.size} {series.dtypes[0]} on {series.gpu}) "
                f"is impossible at {gpus} GPUs: {problem}; add an erratum that resolves it"
            )
    return series


def _series_gbs(rows: list[SeedRow]) -> ScaleExpr:
    """The GBS rule of a series: a seed formula as printed, or one inferred
    from explicit rows (constant GBS per GPU under weak scaling, constant
    GBS under strong scaling)."""
    if len(rows) == 1 and rows[0].is_range:
        return rows[0].gbs
    scaling = rows[0].scaling
    if scaling == "strong":
        values = {r.gbs.at(r.gpus[0]) for r in rows}
        if len(values) != 1:
            raise ValueError(f"strong-scaling rows with different GBS: {sorted(values)}")
        return ScaleExpr.constant(int(values.pop()))
    ratios = {Fraction(r.gbs.at(r.gpus[0])) / r.gpus[0] for r in rows}
    if len(ratios) != 1:
        raise ValueError(
            f"weak-scaling rows {[r.provenance.rows[0] + 1 for r in rows]} do not keep GBS per GPU constant"
        )
    return ScaleExpr.per_gpu_of(ratios.pop())


# ---------------------------------------------------------------- references


def _references(raw: dict[str, Any], titles: dict[str, str]) -> Iterable[ReferenceResult]:
    columns = [str(c) for c in raw["columns"]]
    unknown = [c for c in columns if c not in REFERENCE_COLUMNS]
    if unknown:
        raise ValueError(f"unknown columns {unknown}; known: {', '.join(REFERENCE_COLUMNS)}")
    for index, cells in enumerate(raw["rows"]):
        row = dict(zip(columns, cells, strict=True))
        yield ReferenceResult(
            variant=str(raw["variant"]),
            size=str(row.get("size", raw.get("size"))).lower(),
            gpu=str(raw["gpu"]).lower(),
            dtype=str(raw["dtype"]).lower(),
            gpus=int(row["gpus"]),
            step_time_s=float(row["step_time_s"]),
            tokens_per_s=_opt_float(row.get("tokens_per_s")),
            mfu_pct=_opt_float(row.get("mfu_pct")),
            days_1t=_opt_float(row.get("days_1t")),
            tflops_per_gpu=_opt_float(row.get("tflops_per_gpu")),
            provenance=Provenance(
                seed=str(raw["document"]),
                title=_title(titles, str(raw["document"])),
                table=None if raw.get("table") is None else int(raw["table"]),
                rows=(index,),
            ),
            scaling=_one_of(raw.get("scaling", "weak"), SCALINGS, "scaling"),
            note=str(raw.get("note", "") or ""),
            erratum=_cell_none(row.get("erratum")),
        )


def _opt_float(value: Any) -> float | None:
    value = _cell_none(value)
    if value is None or str(value).strip().lower() == "n/a":
        return None
    return float(value)
