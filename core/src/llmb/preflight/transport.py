"""NCCL's transport per node, from NCCL's own set-up lines in the job's log.

The lines (``NCCL_DEBUG=INFO``) are read by llmb's results parser
(``llmb.results.formats.nccl.NcclTransportReader``), fed each host's lines apart: NCCL
prefixes every line with ``host:pid:tid [dev]``, so a node whose NCCL fell back to
TCP sockets is named, not only the job.
"""

from __future__ import annotations

import re

from llmb.results.formats import NcclTransportReader

_HOST = re.compile(r"(?:^|\s)([\w.-]+):\d+:\d+ \[\d+\] NCCL INFO ")


def per_host(text: str) -> dict[str, dict]:
    """host -> {"channels", "networks", "plugins", "over_sockets"} for every host with set-up lines."""
    lines: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "NCCL INFO" in line and (m := _HOST.search(line)):
            lines.setdefault(m.group(1), []).append(line)
    out = {}
    for host, found in lines.items():
        reader = NcclTransportReader()
        reader.feed(("\n".join(found) + "\n").encode())
        transport = reader.finish()
        if transport is None:
            continue
        multi_node = len(lines) > 1
        out[host] = {
            "channels": transport.channels,
            "networks": list(transport.networks),
            "plugins": list(transport.plugins),
            "over_sockets": transport.over_sockets(2 if multi_node else 1),
        }
    return out


def host_of(node: str, hosts: list[str]) -> str | None:
    """The NCCL host name of a Slurm node: the same name, or its short form."""
    short = node.split(".")[0]
    return next((h for h in hosts if h == node or h.split(".")[0] == short), None)
