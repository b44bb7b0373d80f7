"""The worker every rank runs: ``python -m llmb.worker RUN_JSON``.

It reads the ``RunSpec`` and runs its engine. An exception is printed with
a ``[rankN]:`` prefix on every line (as torchrun does), so that the failure
reason can be told from the run's log, and the process exits 1.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    rank = int(os.environ.get("RANK", "0"))
    try:
        with open(argv[0], encoding="utf-8") as handle:
            from llmb.runspec import RunSpec

            spec = RunSpec.from_dict(json.load(handle))
        if spec.engine != "torch":
            raise ValueError(f"unknown engine {spec.engine!r}")
        from llmb.engine.train import train

        train(spec, rank=rank, world=int(os.environ.get("WORLD_SIZE", "1")),
              local_rank=int(os.environ.get("LOCAL_RANK", str(rank))))
    except BaseException as exc:  # noqa: BLE001 - report everything, including KeyboardInterrupt
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            return 0
        lines = traceback.format_exception(exc)
        text = "".join(lines).rstrip("\n")
        sys.stdout.flush()
        sys.stderr.write("".join(f"[rank{rank}]: {line}\n" for line in text.split("\n")))
        sys.stderr.flush()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
