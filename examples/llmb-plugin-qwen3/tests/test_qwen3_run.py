"""A real run through the installed CLI: the CPU proxy of the H100 30B recipe on 2 local ranks (the torch
engine, gloo), then ``llmb results`` reading its log."""

from __future__ import annotations

import pytest


@pytest.mark.slow  # a real 2-rank run: CI's, not the default of a plugin author's loop
def test_a_tiny_proxy_runs_and_its_log_is_read(llmb):
    # GBS 128 at the recipe's 16 GPUs: GA 8 where the recipe's GBS 1024 takes 64 (the proxy keeps the
    # recipe's GA): 8x less training for the same question, does the workload run and its log read?
    command = "run qwen3 --size 30b --gpu h100 --dtype bf16 --gpus 2 --proxy tiny --set gbs=128"
    run = llmb(*command.split(), timeout=1500)
    assert "SUCCEEDED" in run.stdout, run.stdout[-3000:]
    (result,) = llmb("results", "--json").json()
    assert result["workload"] == "qwen3" and result["size"] == "30b" and result["gpu"] == "h100"
    assert result["status"] == "success" and result["proxy"] is True
    assert result["max_iteration"] == 50
    assert result["window"] == "35-44" and result["samples_in_window"] == 10
    assert result["time_mean_ms"] > 0 and result["tokens_per_s"] > 0
    assert result["reference_source"] is None  # a proxy is never compared with published figures
