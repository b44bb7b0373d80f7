"""Certifying a cluster against the published suite (``llmb certify``).

The workflow of the NVIDIA DGX Cloud Benchmarking Exemplar validation guide:
run every installed workload's published configurations for one GPU type
at one scale, judge each run by the same gates, re-run a workload that
failed, and hand in one archive of the suite.

- ``suite``: what to run (the published configurations, or a suite file)
  and the suite's record under ``$LLMB_INSTALL/certify/<id>/``;
- ``gates``: the pass/fail gates of one run;
- ``verdict``: every run of a suite judged, the best per configuration,
  the verdict per workload.
"""
