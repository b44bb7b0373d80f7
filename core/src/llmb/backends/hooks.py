"""The local backend as a plugin (``llmb_backends``), registered by name by ``llmb.plugins.host``;
its implementation is imported when a command uses it."""

from __future__ import annotations

from llmb import hookimpl


@hookimpl
def llmb_backends() -> list:
    from llmb.backends import Backend

    def load():
        from llmb.backends.local import LocalBackend

        return LocalBackend()

    return [Backend("local", "this machine: one process per rank, state on disk", load)]
