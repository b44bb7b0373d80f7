"""The plugin host: discovers plugins, indexes their records, dispatches hooks.

Discovery reads the entry-point group ``llmb``, then the modules named in
``LLMB_PLUGINS`` (comma-separated). A plugin that fails to import
(or whose registration hook raises) is recorded as failed and reported as a
warning; the rest keeps working, and selecting a workload that the failed
plugin would have provided raises ``PluginError`` with the original error.
Whatever the import raises counts, ``KeyboardInterrupt`` and ``SystemExit``
too: only a real Ctrl-C (a SIGINT that reached this process meanwhile) ends
the command.

Each plugin's hook implementations are guarded when it is registered
(``llmb.plugins.guard``): one that fails when called is named, with the hook,
whichever way it is called. The workloads' names and aliases are refereed
once, where they are indexed (``workloads``, ``llmb.plugins.names``): no plugin
takes over a name another workload holds, or llmb-run's for a built-in.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pluggy

from llmb.errors import PluginError, UsageError
from llmb.plugins import hookspecs
from llmb.plugins.entrypoints import entry_points
from llmb.plugins.guard import CtrlC as _CtrlC
from llmb.plugins.guard import guard_plugin, raised
from llmb.plugins.names import referee
from llmb.recipes.errata_figures import with_corrected_figures
from llmb.recipes.records import (
    ModelArch,
    ModelFlops,
    Recipe,
    RecipeRequest,
    Workload,
    WorkloadIndex,
    workload_named,
)
from llmb.recipes.resolve import without_idle_vp

GROUP = "llmb"
PLUGINS_VARIABLE = "LLMB_PLUGINS"  # more plugins, by module name: ``_named_plugins``
# The core's own plugins, one per stage that answers hooks, registered by name (as pytest loads its
# own): the host imports no later stage, and each module imports what it needs when called.
CORE_PLUGINS = (
    "llmb.recipes.defaults",
    "llmb.runs.profiling",
    "llmb.results.hooks",
    "llmb.lifecycle.hooks",
    "llmb.backends.hooks",
    "llmb.preflight.hooks",
)


@dataclass(frozen=True)
class PluginInfo:
    """What ``llmb plugins`` shows about one discovered plugin."""

    name: str
    module: str
    distribution: str | None
    version: str | None
    status: str  # "loaded" | "failed"
    error: str | None = None
    workloads: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()

    def provider(self) -> str:
        if self.distribution:
            return f"{self.distribution} {self.version}"
        return self.name

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "module": self.module,
            "distribution": self.distribution,
            "version": self.version,
            "status": self.status,
            "error": self.error,
            "workloads": list(self.workloads),
            "backends": list(self.backends),
        }


def _describe(exc: BaseException) -> str:
    """What a plugin raised (through the guard: its own exception), ``Type: message``."""
    exc = raised(exc)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class PluginHost:
    """One per process, made by its entry point (the CLI, the worker, the local supervisor: ``process_host``)
    and passed to what needs it; tests make their own."""

    def __init__(self, *, discover: bool = True, extra_plugins: Iterable[tuple[str, object]] = ()):
        self.pm = pluggy.PluginManager(GROUP)
        self.pm.add_hookspecs(hookspecs)
        for name in CORE_PLUGINS:
            self.pm.register(importlib.import_module(name), name=name)
        self._infos: dict[str, PluginInfo] = {}
        self._workloads: dict[str, Workload] | None = None
        self._backends: dict[str, Any] | None = None
        self._impls: dict[str, Any] = {}
        self._owner: dict[str, str] = {}  # workload name -> plugin name
        self._broken_workloads: dict[str, str] = {}  # workload name -> reason
        self._ignored: set[tuple[str, str]] = set()  # (plugin, hook) plain impls from non-owners
        if discover:
            self._discover()
        for name, plugin in extra_plugins:
            self.add_plugin(name, plugin)

    @property
    def log(self):
        """The plugin host's logger, made on first use: structlog (and the asyncio it
        imports) costs a command that has nothing to say a twentieth of a second."""
        from llmb.log import get_logger

        return get_logger("llmb.plugins")

    # ------------------------------------------------------------ discovery

    def _discover(self) -> None:
        with _CtrlC() as ctrl_c:
            self._installed_plugins(ctrl_c)
            self._named_plugins(ctrl_c)
        ctrl_c.check()

    def _installed_plugins(self, ctrl_c: _CtrlC) -> None:
        seen: set[tuple[str, str]] = set()
        for ep in entry_points(group=GROUP):
            if (ep.name, ep.value) in seen:
                continue  # the same distribution on sys.path twice
            seen.add((ep.name, ep.value))
            dist_name, version = ep.distribution, ep.version
            key = f"{dist_name or '?'}:{ep.name}"
            try:
                plugin = ep.load()
                self.pm.register(plugin, name=key)
            except BaseException as exc:  # noqa: BLE001 - whatever an import raises (a sys.exit, a KeyboardInterrupt of its own) is a warning
                ctrl_c.check()  # ... but a real Ctrl-C ends the command
                self._failed(key, ep.name, ep.value, dist_name, version, exc)
                continue
            self._loaded(key, plugin, PluginInfo(ep.name, ep.value, dist_name, version, "loaded"))

    def _named_plugins(self, ctrl_c: _CtrlC) -> None:
        """The modules named in ``LLMB_PLUGINS`` (comma-separated, importable: as pytest's PYTEST_PLUGINS),
        registered under their module name after the installed plugins. Set in a run's environment, the
        variable reaches its ranks, whose worker loads them too (tests load ``tests/fault_plugin.py`` so).
        One that fails to import is reported as an installed plugin would be."""
        for name in filter(
            None, (part.strip() for part in os.environ.get(PLUGINS_VARIABLE, "").split(","))
        ):
            try:
                plugin = importlib.import_module(name)
                self.pm.register(plugin, name=name)
            except BaseException as exc:  # noqa: BLE001 - as an entry point's import failure
                ctrl_c.check()
                self._failed(name, name, name, None, None, exc)
                continue
            self._loaded(name, plugin, PluginInfo(name, name, None, None, "loaded"))

    def add_plugin(self, name: str, plugin: object) -> None:
        """Register an in-process plugin (tests, site configuration)."""
        self.pm.register(plugin, name=name)
        module = getattr(plugin, "__name__", repr(plugin))
        self._loaded(name, plugin, PluginInfo(name, module, None, None, "loaded"))
        self._workloads = None

    def _loaded(self, key: str, plugin: object, info: PluginInfo) -> None:
        """A plugin registered: its hook implementations guarded (``llmb.plugins.guard``: what one of
        them raises when called names the plugin and the hook; only a real Ctrl-C interrupts)."""
        self._infos[key] = info
        guard_plugin(self.pm, plugin, info.provider())

    def _failed(
        self,
        key: str,
        name: str,
        module: str,
        dist: str | None,
        version: str | None,
        exc: BaseException,
    ) -> None:
        info = PluginInfo(name, module, dist, version, "failed", _describe(exc))
        self._infos[key] = info
        self._broken_workloads[name] = f"plugin {info.provider()} failed to load: {info.error}"
        self.log.warning(
            "plugin failed to load; its workloads are unavailable",
            plugin=name,
            provider=info.provider(),
            error=info.error,
        )

    def plugins(self) -> list[PluginInfo]:
        self.workloads()  # fills in which plugin registered which workload
        self.backends()  # ... and which backend
        return sorted(self._infos.values(), key=lambda i: (i.status != "loaded", i.name))

    # ------------------------------------------------------------ workloads

    def workloads(self) -> dict[str, Workload]:
        if self._workloads is not None:
            return self._workloads
        found: dict[str, list[tuple[str, Workload]]] = {}
        for impl in self.pm.hook.llmb_workloads.get_hookimpls():
            key = impl.plugin_name
            try:
                with _CtrlC() as ctrl_c:
                    records = list(impl.function() or ())
                ctrl_c.check()
            except BaseException as exc:  # noqa: BLE001 - as at import: only a real Ctrl-C ends the command
                if ctrl_c.pressed:
                    raise
                info = self._infos.get(key)
                if info is not None:
                    self._failed(key, info.name, info.module, info.distribution, info.version, exc)
                else:
                    self._broken_workloads[key] = f"plugin {key} failed: {_describe(exc)}"
                continue
            for record in records:
                if not isinstance(record, Workload):
                    self.log.warning(
                        "plugin returned a non-Workload record; ignored",
                        plugin=key,
                        record=repr(record)[:80],
                    )
                    continue
                found.setdefault(record.name, []).append((key, record))
        result: dict[str, Workload] = {}
        keys: dict[str, str] = {}
        for name, providers in found.items():
            if len(providers) > 1:
                who = " and ".join(self._provider(k) for k, _ in providers)
                reason = f"it is registered by both {who}; uninstall one of them"
                self._broken_workloads[name] = reason
                self.log.warning("duplicate workload refused", workload=name, providers=who)
                continue
            keys[name], result[name] = providers[0]
        # Which workload each name and alias means, refereed once for every command (llmb.plugins.names).
        refereed = referee(result, {name: self._provider(key) for name, key in keys.items()})
        for refusal in refereed.refusals:
            self.log.warning(refusal.text)
        for name, why in refereed.refused.items():
            self._broken_workloads[name] = f"llmb refused it: {why}"
        for name in refereed.workloads:
            key = keys[name]
            self._owner[name] = key
            if key in self._infos:
                info = self._infos[key]
                self._infos[key] = PluginInfo(
                    **{**info.__dict__, "workloads": info.workloads + (name,)}
                )
        self._workloads = WorkloadIndex(sorted(refereed.workloads.items()), refereed.unresolved)
        # Erratum-affected published figures, recomputed with each workload's own FLOPs formula
        # (the owners are known now, so its hook can be called).
        for name, workload in self._workloads.items():
            self._workloads[name] = with_corrected_figures(workload, self.model_flops)
        return self._workloads

    def _provider(self, key: str) -> str:
        info = self._infos.get(key)
        return info.provider() if info else key

    def workload(self, name: str) -> Workload:
        """The workload called ``name``; UsageError listing the valid ones."""
        workloads = self.workloads()
        key = name.strip().lower()
        if (found := workload_named(workloads, key)) is not None:
            return found
        if key in self._broken_workloads:
            raise PluginError(f"workload {key!r} is unavailable: {self._broken_workloads[key]}.")
        valid = ", ".join(workloads) or "none (install a plugin such as llmb-plugin-llama31)"
        raise UsageError(f"unknown workload {name!r}; installed workloads: {valid}.")

    def broken(self) -> dict[str, str]:
        self.workloads()
        return dict(self._broken_workloads)

    # ------------------------------------------------------------ per-workload hooks

    def _for_workload(self, hook: str, workload: Workload) -> Any:
        """The hook caller restricted to ``workload``'s own plugin, the core's
        defaults, and the wrappers of plugins that own no workload (site
        plugins). A site plugin's plain implementation would compete with the
        owner by registration order, so it is left out, with a warning."""
        owner = self._owner.get(workload.name)
        owners = set(self._owner.values())
        remove = {key for key in owners if key != owner}
        for impl in getattr(self.pm.hook, hook).get_hookimpls():
            key = impl.plugin_name
            if key in owners or key in CORE_PLUGINS or impl.wrapper or impl.hookwrapper:
                continue
            remove.add(key)
            if (key, hook) not in self._ignored:
                self._ignored.add((key, hook))
                self.log.warning(
                    "plugin implements a per-workload hook without owning a workload; "
                    "only wrappers (wrapper=True) are called",
                    plugin=key,
                    hook=hook,
                )
        plugins = [self.pm.get_plugin(key) for key in remove]
        return self.pm.subset_hook_caller(
            hook, remove_plugins=[p for p in plugins if p is not None]
        )

    def resolve(self, request: RecipeRequest) -> Recipe:
        workload = self.workload(request.workload)
        recipe = self._for_workload("llmb_resolve_recipe", workload)(
            workload=workload, request=request
        )
        if not isinstance(recipe, Recipe):
            raise PluginError(f"the {workload.name} plugin resolved no recipe for {request}.")
        return without_idle_vp(recipe)  # a plugin's own resolution too: no VP without a pipeline

    def model_flops(self, workload: Workload, arch: ModelArch, seq_len: int) -> ModelFlops | None:
        return self._for_workload("llmb_model_flops", workload)(
            workload=workload, arch=arch, seq_len=seq_len
        )

    def build_model(self, workload: Workload, arch: ModelArch) -> Any:
        """The torch module of ``workload`` at ``arch`` (imports torch)."""
        model = self._for_workload("llmb_build_model", workload)(workload=workload, arch=arch)
        if model is None:
            raise PluginError(
                f"the {workload.name} plugin provides no model for the torch engine "
                f"(it implements no llmb_build_model)."
            )
        return model

    # ------------------------------------------------------------ 1:N contributions

    def profile(self, request) -> list:
        """Every profiler's contribution to a run (None answers dropped)."""
        return [c for c in self.pm.hook.llmb_profile(request=request) if c is not None]

    def backends(self) -> dict:
        """Registered backends by name."""
        if self._backends is not None:
            return self._backends
        found: dict[str, object] = {}
        for impl in self.pm.hook.llmb_backends.get_hookimpls():
            try:
                with _CtrlC() as ctrl_c:
                    records = list(impl.function() or ())
                ctrl_c.check()
            except BaseException as exc:  # noqa: BLE001 - as at import: only a real Ctrl-C ends the command
                if ctrl_c.pressed:
                    raise
                self.log.warning(
                    "plugin's backends failed; skipped",
                    plugin=impl.plugin_name,
                    error=_describe(exc),
                )
                continue
            for record in records:
                if record.name in found:
                    self.log.warning(
                        "duplicate backend refused", backend=record.name, plugin=impl.plugin_name
                    )
                    continue
                found[record.name] = record
                info = self._infos.get(impl.plugin_name)
                if info is not None:
                    self._infos[impl.plugin_name] = PluginInfo(
                        **{**info.__dict__, "backends": info.backends + (record.name,)}
                    )
        self._backends = found
        return found

    def backend_impl(self, name: str):
        """The loaded implementation of backend ``name``, one per host: a backend keeps
        what it may reuse between calls (a cluster's access token, a connection)."""
        if name not in self._impls:
            self._impls[name] = self.backend(name).load()
        return self._impls[name]

    def backend(self, name: str):
        backends = self.backends()
        if name not in backends:
            raise UsageError(
                f"unknown backend {name!r}; installed backends: {', '.join(backends)} "
                f"(cluster backends come with llmb-backend-slurm, llmb-backend-runai and llmb-backend-kubernetes)."
            )
        return backends[name]

    def flaky_signatures(self) -> tuple[str, ...]:
        """Every plugin's flaky-failure signatures, the core's first, each once. A plugin whose
        hook fails, or returns something other than non-empty strings, is skipped with a warning."""
        found: dict[str, None] = {}
        # registration order: core first
        for impl in self.pm.hook.llmb_flaky_signatures.get_hookimpls():
            try:
                signatures = list(impl.function() or ())
            except Exception as exc:  # noqa: BLE001
                self.log.warning(
                    "plugin's flaky signatures failed; skipped",
                    plugin=impl.plugin_name,
                    error=_describe(exc),
                )
                continue
            bad = [s for s in signatures if not isinstance(s, str) or not s.strip()]
            if bad:
                self.log.warning(
                    "plugin's flaky signatures must be non-empty strings; its list is skipped",
                    plugin=impl.plugin_name,
                    bad=repr(bad[0])[:80],
                )
                continue
            found.update(dict.fromkeys(signatures))
        return tuple(found)

    def log_parsers(self) -> list:
        """Every registered ``LogParser``, the core's first; a duplicate name is refused."""
        found: dict[str, object] = {}
        for impl in self.pm.hook.llmb_log_parsers.get_hookimpls():  # registration order: core first
            try:
                parsers = list(impl.function() or ())
            except Exception as exc:  # noqa: BLE001
                self.log.warning(
                    "plugin's log parsers failed; skipped",
                    plugin=impl.plugin_name,
                    error=_describe(exc),
                )
                continue
            for parser in parsers:
                if parser.name in found:
                    self.log.warning(
                        "duplicate log parser refused", parser=parser.name, plugin=impl.plugin_name
                    )
                    continue
                found[parser.name] = parser
        return list(found.values())


_process_host: PluginHost | None = None


def process_host() -> PluginHost:
    """The plugin host of this process, made on first use: for an entry point (``llmb``'s command
    line, ``python -m llmb.worker``, the local supervisor), which passes it on."""
    global _process_host
    if _process_host is None:
        _process_host = PluginHost()
    return _process_host
