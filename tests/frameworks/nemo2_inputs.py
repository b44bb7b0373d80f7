"""The inputs of ``check_nemo2.py``: llmb's NeMo 2 configurations and an offline Hugging Face cache.

    .venv/bin/python tests/frameworks/nemo2_inputs.py OUT_DIR

writes ``OUT_DIR/configs.json`` (every NeMo 2 seed row at its smallest tested
scale in each run mode of ``contract_configs.MODES``) and ``OUT_DIR/hf_home``:
for every Hugging Face tokenizer the configurations name, a stand-in of the
repository's tokenizer (a word-level fast tokenizer with the model's
vocabulary size and the Llama special tokens) and a ``config.json``, in the
layout ``llmb install`` writes (``llmb.install.hf``). The real tokenizers are gated;
recipe construction only needs a loadable tokenizer of the right vocabulary.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from contract_configs import configurations  # noqa: E402
from hf_cache import write_file  # noqa: E402

BOS, EOS, PAD = "<|begin_of_text|>", "<|end_of_text|>", "<|finetune_right_pad_id|>"


def tokenizer_files(vocab_size: int) -> dict[str, str]:
    """tokenizer.json and tokenizer_config.json of a word-level tokenizer of ``vocab_size`` entries."""
    special = [BOS, EOS, PAD]
    vocab = {f"t{i}": i for i in range(vocab_size - len(special))}
    vocab.update({token: vocab_size - len(special) + i for i, token in enumerate(special)})
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": vocab[t],
                "content": t,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for t in special
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "t0"},
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "model_max_length": 131072,
        "clean_up_tokenization_spaces": True,
    }
    return {
        "tokenizer.json": json.dumps(tokenizer),
        "tokenizer_config.json": json.dumps(config, indent=2),
    }


def model_config(config: dict) -> dict:
    m = config["model"]
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": m["vocab_size"],
        "num_hidden_layers": m["full_layers"],
        "max_position_embeddings": m["seq_len"],
    }


def main(out_dir: str) -> None:
    from llmb.plugins.host import PluginHost

    os.makedirs(out_dir, exist_ok=True)
    entries = [
        {"id": id_, "config": config} for id_, config in configurations(PluginHost(), "nemo2")
    ]
    with open(os.path.join(out_dir, "configs.json"), "w", encoding="utf-8") as handle:
        json.dump(entries, handle, indent=1)
    home = os.path.join(out_dir, "hf_home")
    repos = write_hf_stand_ins(home, [entry["config"] for entry in entries])
    print(f"{len(entries)} configurations; Hugging Face stand-ins for {', '.join(repos)} in {home}")


def write_hf_stand_ins(home: str, configs: list[dict]) -> list[str]:
    """A stand-in tokenizer and config.json for every Hugging Face tokenizer ``configs`` name."""
    repos = {}
    for config in configs:
        if config["tokenizer"]["library"] == "huggingface":
            repos.setdefault(config["tokenizer"]["name"], config)
    for repo, config in sorted(repos.items()):
        for name, text in tokenizer_files(config["model"]["vocab_size"]).items():
            write_file(home, repo, name, text)
        write_file(home, repo, "config.json", json.dumps(model_config(config), indent=2))
    return sorted(repos)


if __name__ == "__main__":
    main(sys.argv[1])
