"""Slurm job states (squeue's %T, sacct's State) onto llmb's."""

from __future__ import annotations

LLMB_STATE = {
    "PENDING": "QUEUED",
    "CONFIGURING": "QUEUED",
    "REQUEUED": "QUEUED",
    "REQUEUE_HOLD": "QUEUED",
    "REQUEUE_FED": "QUEUED",
    "RESV_DEL_HOLD": "QUEUED",
    "RUNNING": "RUNNING",
    "COMPLETING": "RUNNING",
    "SUSPENDED": "RUNNING",
    "STOPPED": "RUNNING",
    "SIGNALING": "RUNNING",
    "STAGE_OUT": "RUNNING",
    "RESIZING": "RUNNING",
    "COMPLETED": "SUCCEEDED",
    "FAILED": "FAILED",
    "OUT_OF_MEMORY": "FAILED",
    "SPECIAL_EXIT": "FAILED",
    "CANCELLED": "CANCELLED",
    "REVOKED": "CANCELLED",
    "TIMEOUT": "TIMEOUT",
    "DEADLINE": "TIMEOUT",
    "NODE_FAIL": "INFRA_FAILED",
    "BOOT_FAIL": "INFRA_FAILED",
    "PREEMPTED": "INFRA_FAILED",
}

# Worth a fresh job elsewhere: the infrastructure failed, not the benchmark.
INFRASTRUCTURE = frozenset({"NODE_FAIL", "BOOT_FAIL", "PREEMPTED"})


def normalise(state: str) -> str:
    """``CANCELLED by 0`` -> ``CANCELLED``; ``RUNNING+`` style suffixes dropped."""
    return state.strip().split()[0].rstrip("+").upper() if state.strip() else ""


def llmb_state(slurm_state: str) -> str:
    return LLMB_STATE.get(normalise(slurm_state), "UNKNOWN")
