"""Run by a virtual environment's own interpreter (tests/test_plugin_wheels.py): ``llmb plan --json`` of
every published row of one workload, at each printed GPU count (both ends of a range), in one process,
and one JSON list on stdout: each row's request, what the table prints (DP and GA where printed) and
what the plan gives."""

from __future__ import annotations

import contextlib
import io
import json
import sys

from llmb.cli import main
from llmb.plugins.host import PluginHost


def plan(host, args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args, host=host)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return code, out.getvalue(), err.getvalue()


def rows(name: str) -> list[dict]:
    host = PluginHost()
    workload = host.workload(name)
    found = []
    for variant in workload.variants:
        for row in variant.seed_rows:
            for dtype in row.dtypes:
                for gpus in sorted(set(row.gpus)):
                    args = [
                        "plan",
                        workload.name,
                        "--variant",
                        variant.name,
                        "--size",
                        row.size,
                        "--gpu",
                        row.gpu,
                        "--dtype",
                        dtype,
                        "--gpus",
                        str(gpus),
                        "--json",
                        *(["--strong-scaling"] if row.scaling == "strong" else []),
                    ]
                    code, out, err = plan(host, args)
                    printed = {k: int(getattr(row, k).at(gpus)) or None for k in ("dp", "ga")}
                    found.append(
                        {
                            "args": args,
                            "source": row.provenance.describe(),
                            "printed": {**printed, "tp": row.tp, "pp": row.pp, "mbs": row.mbs},
                            "code": code,
                            "plan": json.loads(out) if code == 0 else None,
                            "stderr": err,
                        }
                    )
    return found


if __name__ == "__main__":
    json.dump(rows(sys.argv[1]), sys.stdout)
