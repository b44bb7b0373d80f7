"""llmb's Run:ai backend: ``llmb run ... --backend runai``."""
