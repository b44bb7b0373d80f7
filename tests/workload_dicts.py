"""A minimal workload data file as a dict, for tests that build their own."""

from __future__ import annotations

import copy


def minimal_workload(name: str = "mini") -> dict:
    """One 1b size, one variant, one H100 table with an 8-16 GPU range row."""
    return copy.deepcopy(
        {
            "name": name,
            "architectures": {
                "1b": {
                    "family": "llama",
                    "layers": 4,
                    "hidden": 256,
                    "ffn": 512,
                    "heads": 4,
                    "query_groups": 4,
                    "vocab": 1000,
                    "activation": "swiglu",
                    "norm": "rmsnorm",
                }
            },
            "variants": [
                {
                    "name": "v",
                    "framework": "nemo2",
                    "document": "doc.md",
                    "tables": [
                        {
                            "table": 2,
                            "gpu": "h100",
                            "columns": [
                                "Size",
                                "GPUs",
                                "Precision",
                                "SeqLen",
                                "Layers",
                                "TP",
                                "PP",
                                "CP",
                                "MBS",
                                "GBS",
                            ],
                            "rows": [["1b", "8-16", "BF16", 128, 4, 1, 1, 1, 1, "GPUs"]],
                        }
                    ],
                }
            ],
        }
    )
