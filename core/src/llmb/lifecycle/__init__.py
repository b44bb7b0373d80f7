"""A run's life, owned by the core: prepare, submit, reconcile.

prepare.py            a request -> a prepared run (RunSpec, recipe.json, job record to be), writing nothing
submit.py             a prepared run written and handed to the backend, or described (a dry run)
outcome.py            a finished job's log parsed and its result stored
flaky.py              the flaky-failure signatures that earn a retry
follow.py             progress while a job runs
provenance.py         what the submission and the job record in provenance.json, and the job's GPU check
run_option_values.py  ``llmb run``'s options beyond the recipe, flags > env > cluster file
sweep_runner.py       submitting and following a sweep's tasks
"""
