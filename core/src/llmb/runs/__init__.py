"""Runs: from a resolved recipe to a finished job with its result recorded.

Submission:
    runspec.py            RunSpec, the one record a job is built from; the engines' layouts
    run_option_values.py  ``llmb run``'s options beyond the recipe, flags > env > cluster file
    capability.py         what this machine can run (without importing torch)
    checkpoint_metadata.py reading a checkpoint's index without running its code
    experiment.py         the experiment directory: its name, recipe.json, the log's path
    launch.py             RunSpec -> experiment -> a backend's submit; the one path ``run`` and ``sweep`` share
    profiling.py          the profilers (``llmb_profile`` hook), a core plugin
    provenance.py         provenance.json, what a run ran with: read, one section written (lifecycle/provenance.py
                          records them)
    job_env.py            a job's environment as written down, secrets redacted
    exclusion.py          a preflight file read back: the nodes ``--exclude-from`` keeps a job off

In the job (``llmb.worker``):
    gpu_seen.py           the GPUs the job sees, checked against the run's GPU type

Following and ending:
    jobs.py               job records under ``$LLMB_INSTALL/jobs``: state, attempts, exit, cancel
    follow.py             progress while a job runs
    flaky.py              the flaky-failure signatures that earn a retry
    outcome.py            a finished job's log parsed and its result stored

Many runs:
    sweeps.py             sweep files and ``llmb sweep``'s combinations
    sweep_runner.py       submitting and following a sweep's tasks
"""
