"""Real runs through the installed CLI: the CPU proxies of DeepSeek-V3 and Kimi-K2 on 2 local ranks (the
torch engine, gloo) train, and ``llmb results`` reads their logs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

LOSS = re.compile(r"\| lm loss: ([0-9.eE+-]+) \|")


@pytest.mark.slow  # real 2-rank runs: CI's, not the default of a plugin author's loop
@pytest.mark.parametrize(
    "command",
    [
        # --set gbs=64: the recipe at its smallest scale with GA 2 or 4, which the proxy keeps (its own GBS
        # would be GA 16 or more: thousands of CPU micro-batches)
        "run deepseekv3 --size 671b --gpu b200 --dtype bf16 --gpus 2 --proxy tiny --set gbs=64",
        "run kimik2 --size 1t --gpu b200 --dtype fp8 --gpus 2 --proxy tiny --set gbs=64",
    ],
    ids=["deepseekv3", "kimik2"],
)
def test_a_tiny_proxy_trains_and_its_log_is_read(llmb, command):
    run = llmb(*command.split(), "--json", timeout=1500)
    summary = run.json()
    assert summary["state"] == "SUCCEEDED", run.stdout[-3000:]
    losses = [float(x) for x in LOSS.findall(Path(summary["log"]).read_text())]
    assert len(losses) == 50
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5  # it learns the mock data's distribution
    (result,) = llmb("results", "--json").json()
    workload = command.split()[1]
    assert result["workload"] == workload and result["status"] == "success"
    assert result["proxy"] is True and result["reference_source"] is None
    assert result["max_iteration"] == 50 and result["samples_in_window"] == 10
    assert result["tokens_per_s"] > 0
