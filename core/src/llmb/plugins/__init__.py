"""The plugin system: how llmb finds and calls workloads, backends and profilers.

hookspecs.py    every hook llmb calls, with its contract (the one place hooks are defined)
host.py         the pluggy manager: registers the core's own plugins and the installed ones,
                and answers "which workloads, backends, profilers are there"
entrypoints.py  discovery of installed plugins (the ``llmb`` entry-point group)
names.py        which workload each name and alias means, refereed once where the host indexes them
                (a plugin never takes over another workload's names, nor llmb-run's for a built-in)
guard.py        the one guard around every call of a plugin's hook implementations: a failure names
                the plugin and the hook; only a real Ctrl-C interrupts
(the core's own hook implementations live with their stage: recipes/defaults.py, runs/profiling.py,
                results/hooks.py, lifecycle/hooks.py, backends/hooks.py, preflight/hooks.py)
"""
