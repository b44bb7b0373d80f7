"""An offline Hugging Face cache with the model configs the frameworks' recipes read.

Megatron-Bridge's Llama recipes build their model provider from the Hugging
Face ``config.json`` of the repository they name (no weights). The contract
tests write those files from the workloads' own architecture data into a
cache laid out as ``llmb install`` lays it out (``llmb.install.hf``), so the real
recipes run with ``HF_HUB_OFFLINE=1``. What the architecture records do not
carry (RoPE base and scaling, norm epsilon, context length) is taken from
Meta's published config.json of each repository.
"""

from __future__ import annotations

import json
import os

from llmb.install.hf import REVISION, repo_dir

COMMIT = "0" * 40
# Meta's published values beside the architecture (config.json of each repository).
LLAMA3 = {
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-05,
    "max_position_embeddings": 8192,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
}
LLAMA31_ROPE_SCALING = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3",
}
# Repositories whose config.json each recipe reads, beyond the workloads' own lists.
RECIPE_REPOS = {
    "llama": {
        "8b": ("meta-llama/Meta-Llama-3-8B", "meta-llama/Meta-Llama-3.1-8B"),
        "70b": ("meta-llama/Meta-Llama-3-70B", "meta-llama/Meta-Llama-3.1-70B"),
        "405b": ("meta-llama/Meta-Llama-3.1-405B", "meta-llama/Llama-3.1-405B"),
    }
}


def llama_config(arch, repo: str) -> dict:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": arch.hidden,
        "intermediate_size": arch.ffn,
        "num_attention_heads": arch.heads,
        "num_key_value_heads": arch.query_groups,
        "num_hidden_layers": arch.layers,
        "vocab_size": arch.vocab,
        "tie_word_embeddings": arch.tied_embeddings,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "bfloat16",
        "initializer_range": 0.02,
        **LLAMA3,
    }
    if "3.1" in repo:
        config.update(
            max_position_embeddings=131072,
            rope_scaling=LLAMA31_ROPE_SCALING,
            eos_token_id=[128001, 128008, 128009],
        )
    return config


def write_file(home: str, repo: str, name: str, text: str) -> str:
    base = repo_dir(home, repo)
    os.makedirs(os.path.join(base, "refs"), exist_ok=True)
    with open(os.path.join(base, "refs", REVISION), "w", encoding="utf-8") as handle:
        handle.write(COMMIT)
    path = os.path.join(base, "snapshots", COMMIT, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def write_model_configs(home: str, host) -> list[str]:
    """config.json of every Llama repository a recipe reads, from the llama31 workload's architectures."""
    workload = host.workloads()["llama31"]
    written = []
    for size, repos in RECIPE_REPOS["llama"].items():
        arch = workload.architecture(size)
        for repo in repos:
            written.append(
                write_file(
                    home, repo, "config.json", json.dumps(llama_config(arch, repo), indent=2)
                )
            )
    return written
