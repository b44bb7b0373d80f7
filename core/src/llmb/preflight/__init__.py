"""``llmb preflight``: find the slow node before the benchmark does.

    expected.py   the figures a healthy node of a GPU type reaches (data/gpus.yaml's dense peaks,
                  data/gpu_bandwidth.yaml's HBM, NVLink and NIC bandwidth) and the documented
                  thresholds below which a node is flagged
    pairing.py    the node pairs of the cross-node test: O(log N) rounds, and which node a slow
                  pair points at
    measure.py    what each rank measures through torch (GEMM, memory bandwidth, all-reduce)
    gpu_info.py   nvidia-smi -q -x: a node's GPUs (type, count, driver, ECC, clocks)
    transport.py  NCCL's transport per node, from its own set-up lines (llmb.results.formats.nccl)
    worker.py     the job's side: ``python -m llmb.worker RUN_JSON`` with engine ``preflight``
    verdict.py    measurements -> per-node figures, flags and the verdict (preflight.json)
    job.py        the submission (a job like a run's) and its end (the report written)

Reading a preflight file back for ``--exclude-from`` is a run's option: ``llmb.runs.exclusion``.
"""
