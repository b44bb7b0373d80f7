"""YAML reading with libyaml's C loader where available (ten times faster,
which matters for CLI start-up), the pure-Python one otherwise."""

from __future__ import annotations

from typing import Any

import yaml

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str | bytes) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader
