"""llmb test-fixture plugin; the hooks live in ``plugin``, the data in ``workload.yaml``."""
