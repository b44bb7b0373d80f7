"""The plugin system: how llmb finds and calls workloads, backends and profilers.

hookspecs.py    every hook llmb calls, with its contract (the one place hooks are defined)
host.py         the pluggy manager: registers the core's own plugins and the installed ones,
                and answers "which workloads, backends, profilers are there"
entrypoints.py  discovery of installed plugins (the ``llmb`` entry-point group)
(the core's own hook implementations live with their stage: recipes/defaults.py, runs/profiling.py,
                results/hooks.py, lifecycle/hooks.py, backends/hooks.py, preflight/hooks.py)
"""
