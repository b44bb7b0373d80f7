"""llmb workload plugin; the hooks live in ``plugin``, the data in ``workload.yaml``."""
