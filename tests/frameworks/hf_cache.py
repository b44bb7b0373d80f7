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
    for commit in (*PINNED_REVISIONS.get(repo, ()), COMMIT):
        path = os.path.join(base, "snapshots", commit, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    return path


# Qwen's published values beside the architecture (config.json of Qwen/Qwen3-30B-A3B and
# Qwen/Qwen3-235B-A22B, model_type qwen3_moe).
QWEN3_MOE = {
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-06,
    "max_position_embeddings": 40960,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "router_aux_loss_coef": 0.001,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
}


# Revisions a recipe pins beside the repository (Megatron-Bridge 0.6's Qwen3 30B recipes read
# Qwen/Qwen3-30B-A3B at this commit): the same config.json is written there too.
PINNED_REVISIONS = {"Qwen/Qwen3-30B-A3B": ("ad44e777bcd18fa416d9da3bd8f70d33ebb85d39",)}


def qwen3_moe_config(arch) -> dict:
    """A Qwen3 MoE config.json from an architecture record (the qwen3 workload plugin's)."""
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_act": "silu",
        "hidden_size": arch.hidden,
        "intermediate_size": arch.ffn,
        "moe_intermediate_size": arch.moe_ffn,
        "num_experts": arch.experts,
        "num_experts_per_tok": arch.topk,
        "num_attention_heads": arch.heads,
        "num_key_value_heads": arch.query_groups,
        "head_dim": arch.head_dim,
        "num_hidden_layers": arch.layers,
        "max_window_layers": arch.layers,
        "vocab_size": arch.vocab,
        "tie_word_embeddings": arch.tied_embeddings,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "rope_scaling": None,
        "sliding_window": None,
        "use_sliding_window": False,
        "output_router_logits": False,
        "torch_dtype": "bfloat16",
        "initializer_range": 0.02,
        **QWEN3_MOE,
    }


def write_model_configs(home: str, host) -> list[str]:
    """config.json of every Llama repository a recipe reads, from the llama31 workload's architectures,
    and of the Qwen3 MoE repositories where the qwen3 workload plugin (llmb-plugin-qwen3) is installed."""
    workloads = host.workloads()
    workload = workloads["llama31"]
    written = []
    if "qwen3" in workloads:
        qwen3 = workloads["qwen3"]
        production = next(v for v in qwen3.variants if v.production).production
        for size, repo in production.huggingface.repos.items():
            config = qwen3_moe_config(qwen3.architecture(size))
            written.append(write_file(home, repo, "config.json", json.dumps(config, indent=2)))
    for size, repos in RECIPE_REPOS["llama"].items():
        arch = workload.architecture(size)
        for repo in repos:
            written.append(
                write_file(
                    home, repo, "config.json", json.dumps(llama_config(arch, repo), indent=2)
                )
            )
    return written
