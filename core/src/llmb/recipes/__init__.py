"""Recipes: from a workload's published tables to one resolved recipe and what it implies.

Records and files:
    records.py          the typed records (Workload, ModelArch, Recipe, RecipeRequest, ...)
    workload_file.py    a plugin's ``workload.yaml``: its recipe tables, read and checked
    production_file.py  a variant's ``production:`` section (the frameworks' settings)
    gpus.py             the GPU catalogue: types, GPUs per node, peak FLOPS per dtype

Resolution:
    resolve.py          a RecipeRequest against the tables: scale rules, overrides, DP and GA
    scale_expr.py       the recipe documents' scale formulas (``GPUs``, ``GPUs*16``, ...)
    validity.py         whether a parallel layout fits a GPU count
    overrides.py        ``--set key=value``: what may be overridden, with its type
    proxies.py          smaller models that keep a family's structure (``--proxy``)

What a recipe implies:
    flops.py, params.py model FLOPs per sample and parameter counts
    metrics.py          the published performance formulas (tokens/s, TFLOPS/GPU, MFU, time to train)
    memory.py           the per-GPU memory estimate
    errata_figures.py   published figures an erratum corrects
    planning.py         ``llmb plan``: everything llmb can say before running
"""
