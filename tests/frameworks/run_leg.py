"""Everything the contract tests ask of one framework leg, in one process.

    python run_leg.py CHECKER CONFIGS.json RESULTS.json CATALOGUE_CONFIGS.json CATALOGUE.json

runs in the leg's Python 3.12 environment (``envs.py``): the leg's checker (``check_megatron_bridge.py``
or ``check_nemo2.py``) over CONFIGS.json into RESULTS.json, then ``field_catalogue.py`` over
CATALOGUE_CONFIGS.json into CATALOGUE.json, each as it runs alone. Importing a framework is most of
what checking it costs (Megatron-Bridge and what it pulls in, some 7,000 modules: about 20 s of CPU
here), so the leg's three tests share one import instead of paying it three times. Each part's
failure is its own: the second runs whatever the first did, and the exit status is the worse.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _part(run) -> int:
    try:
        return run() or 0
    except Exception:  # noqa: BLE001 - said on stderr; the test finds the part's output missing
        traceback.print_exc()
        return 1


def main(argv: list[str]) -> int:
    checker, configs, results, catalogue_configs, catalogue = argv[1:6]
    check = _module(os.path.splitext(os.path.basename(checker))[0])
    checked = _part(lambda: check.main(configs, results))  # every checker's main(CONFIGS, RESULTS)
    listed = _part(lambda: _module("field_catalogue").main(catalogue_configs, catalogue))
    return max(checked, listed)


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    sys.exit(main(sys.argv))
