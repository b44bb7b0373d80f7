"""The errors llmb raises on purpose. The CLI prints their message, never a
traceback, and exits with ``exit_code``."""

from __future__ import annotations


class LlmbError(Exception):
    """Something llmb can explain. Exit code 1 unless a subclass says otherwise."""

    exit_code = 1


class UsageError(LlmbError):
    """The user asked for something invalid; the message names the bad value
    and lists the valid ones. Exit code 2."""

    exit_code = 2


class RecipeError(UsageError):
    """A request that no recipe can satisfy (size, GPU type, dtype, scale...)."""


class PluginError(LlmbError):
    """A plugin that failed to load or misbehaved, reported when it is selected."""


class DataError(LlmbError):
    """A plugin's data file is malformed. Raised while loading it."""
