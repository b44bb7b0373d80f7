"""llmb's Slurm backend: ``llmb run ... --backend slurm``."""
