"""The fields ``--framework-arg`` may set, read from a real framework.

    python field_catalogue.py CONFIGS.json OUT.json

runs in a framework's Python 3.12 environment (``tests/frameworks/envs.py``) with ``llmb`` importable.
For each ``{"id", "config"}`` of CONFIGS.json (llmb's configuration of every published row, the default
mode) it builds the recipe object exactly as the worker does (the recipe function, then llmb's
overrides) and lists its plain-valued fields with ``llmb.engines.frameworks.fields.walk``. OUT.json:
``{"framework", "versions", "fields": {path: kind}}``, the union over the rows.
``tests/test_framework_contracts.py`` runs it in every leg and compares the fields present in all of a
framework's legs with what ``llmb/data/framework_fields.json`` ships (``--write`` there rewrites it).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys


def build(config: dict):
    from llmb.engines.frameworks.overrides import apply, resolve_ref

    device = contextlib.nullcontext()
    if config["framework"] == "megatron_bridge":
        # recipes that read the device to pick their MoE dispatcher (DeepSeek-V3's) answered for the row's
        # GPU type, as the checker does
        from check_megatron_bridge import the_rows_gpu

        device = the_rows_gpu(config)
    with contextlib.redirect_stdout(io.StringIO()), device:
        recipe = resolve_ref(config["recipe_function"])(**config["recipe_arguments"])
        return apply(recipe, config["overrides"])


def versions(framework: str) -> dict[str, str | None]:
    from llmb.engines.frameworks import megatron_bridge, nemo2
    from llmb.engines.frameworks.runtime import framework_versions

    module = megatron_bridge if framework == "megatron_bridge" else nemo2
    return framework_versions(module.DISTRIBUTIONS)


def main(configs_path: str, out_path: str) -> int:
    from llmb.engines.frameworks.fields import walk

    with open(configs_path, encoding="utf-8") as handle:
        items = json.load(handle)
    fields: dict[str, dict] = {}
    framework = items[0]["config"]["framework"] if items else ""
    for item in items:
        for path, kind in walk(build(item["config"])).items():
            fields.setdefault(path, kind)
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(
            {
                "framework": framework,
                "versions": versions(framework),
                "fields": dict(sorted(fields.items())),
            },
            handle,
            indent=1,
            default=str,
        )
    print(f"{framework}: {len(fields)} fields over {len(items)} configurations")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
