"""llmb-backend-kubernetes: one JobSet per run (``llmb run --backend kubernetes``)."""
