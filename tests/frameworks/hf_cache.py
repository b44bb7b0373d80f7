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


# The published values of deepseek-ai/DeepSeek-V3's and moonshotai/Kimi-K2-Instruct's config.json that
# the architecture records do not carry (the llmb-plugin-deepseekv3 workloads deepseekv3 and kimik2).
DEEPSEEK_V3_EXTRA = {
    "deepseekv3": {
        "rms_norm_eps": 1e-06,
        "max_position_embeddings": 163840,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "rope_scaling": {
            "type": "yarn",
            "factor": 40,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
    },
    "kimik2": {
        "rms_norm_eps": 1e-06,
        "max_position_embeddings": 131072,
        "bos_token_id": 163584,
        "eos_token_id": 163585,
        "rope_scaling": {
            "type": "yarn",
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 1.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
    },
}


def deepseek_v3_config(arch, extra: dict) -> dict:
    """A DeepSeek-V3-family config.json (MLA, DeepSeekMoE) from an architecture record. Kimi-K2's own
    file says model_type kimi_k2 with remote code (configuration_deepseek.py); the stand-in names the
    model type transformers knows, deepseek_v3, whose fields are the same."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_act": "silu",
        "hidden_size": arch.hidden,
        "intermediate_size": arch.ffn,
        "moe_intermediate_size": arch.moe_ffn,
        "num_hidden_layers": arch.layers,
        "num_attention_heads": arch.heads,
        "num_key_value_heads": arch.query_groups,
        "vocab_size": arch.vocab,
        "q_lora_rank": arch.q_lora_rank,
        "kv_lora_rank": arch.kv_lora_rank,
        "qk_nope_head_dim": arch.head_dim - arch.rope_head_dim,
        "qk_rope_head_dim": arch.rope_head_dim,
        "v_head_dim": arch.v_head_dim,
        "n_routed_experts": arch.experts,
        "n_shared_experts": arch.shared_expert_ffn // arch.moe_ffn,
        "num_experts_per_tok": arch.topk,
        "first_k_dense_replace": arch.dense_layers,
        "moe_layer_freq": arch.moe_layer_step,
        "n_group": arch.expert_groups or 1,
        "topk_group": arch.topk_groups or 1,
        "topk_method": "noaux_tc",
        "scoring_func": arch.router_score,
        "norm_topk_prob": True,
        "routed_scaling_factor": arch.routed_scaling,
        "num_nextn_predict_layers": arch.mtp_layers,
        "rope_theta": arch.rope_base,
        "tie_word_embeddings": arch.tied_embeddings,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "aux_loss_alpha": 0.001,
        "seq_aux": True,
        "ep_size": 1,
        "pretraining_tp": 1,
        "torch_dtype": "bfloat16",
        "initializer_range": 0.02,
        **extra,
    }


# OpenAI's published values beside the architecture (config.json of openai/gpt-oss-120b and
# openai/gpt-oss-20b, model_type gpt_oss); the stand-in leaves out the checkpoint's mxfp4
# quantization_config (no weights are loaded).
GPT_OSS = {
    "rms_norm_eps": 1e-05,
    "max_position_embeddings": 131072,
    "initial_context_length": 4096,
    "swiglu_limit": 7.0,
    "router_aux_loss_coef": 0.9,
    "output_router_logits": False,
    "eos_token_id": 200002,
    "pad_token_id": 199999,
}


def gpt_oss_config(arch) -> dict:
    """A GPT-OSS config.json from an architecture record (the gptoss workload plugin's)."""
    kinds = ("sliding_attention", "full_attention")
    return {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "hidden_act": "silu",
        "hidden_size": arch.hidden,
        "intermediate_size": arch.moe_ffn,
        "num_local_experts": arch.experts,
        "num_experts_per_tok": arch.topk,
        "experts_per_token": arch.topk,
        "num_attention_heads": arch.heads,
        "num_key_value_heads": arch.query_groups,
        "head_dim": arch.head_dim,
        "num_hidden_layers": arch.layers,
        "vocab_size": arch.vocab,
        "tie_word_embeddings": arch.tied_embeddings,
        "attention_bias": arch.attention_bias,
        "attention_dropout": 0.0,
        "sliding_window": arch.sliding_window,
        "layer_types": [kinds[(i + 1) % arch.full_attention_step == 0] for i in range(arch.layers)],
        "rope_theta": arch.rope_base,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": arch.rope_scaling_factor,
            "original_max_position_embeddings": arch.rope_original_positions,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
        },
        "torch_dtype": "bfloat16",
        "initializer_range": 0.02,
        "use_cache": True,
        **GPT_OSS,
    }


def write_model_configs(home: str, host) -> list[str]:
    """config.json of every Llama repository a recipe reads, from the llama31 workload's architectures,
    of the Qwen3 MoE repositories where the qwen3 workload plugin (llmb-plugin-qwen3) is installed, of
    DeepSeek-V3's and Kimi-K2's where llmb-plugin-deepseekv3 is, and of GPT-OSS's where llmb-plugin-gptoss is."""
    workloads = host.workloads()
    workload = workloads["llama31"]
    written = []
    if "qwen3" in workloads:
        qwen3 = workloads["qwen3"]
        production = next(v for v in qwen3.variants if v.production).production
        for size, repo in production.huggingface.repos.items():
            config = qwen3_moe_config(qwen3.architecture(size))
            written.append(write_file(home, repo, "config.json", json.dumps(config, indent=2)))
    for name, extra in DEEPSEEK_V3_EXTRA.items():  # where llmb-plugin-deepseekv3 is installed
        if name not in workloads:
            continue
        production = next(v for v in workloads[name].variants if v.production).production
        for size, repo in production.huggingface.repos.items():
            config = deepseek_v3_config(workloads[name].architecture(size), extra)
            written.append(write_file(home, repo, "config.json", json.dumps(config, indent=2)))
    if "gptoss" in workloads:  # where llmb-plugin-gptoss is installed: 120b's and the MLPerf 20b's
        gptoss = workloads["gptoss"]
        for variant in gptoss.variants:
            for size, repo in variant.production.huggingface.repos.items():
                config = gpt_oss_config(gptoss.architecture(size))
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
