"""The README's walkthroughs, as the commands a user would type."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def walkthrough_commands(heading: str) -> list[str]:
    """The first indented command block of the README's ``## <heading>`` section."""
    readme = README.read_text()
    section = readme.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"\n\n((?:    \S.*\n)+)", section)
    assert block, f"the command block of README's {heading!r} is missing"
    return [line[4:] for line in block.group(1).splitlines()]
