"""The torch engine: plain PyTorch implementations of the benchmark model families.

``llmb.engines.torch.blocks`` holds the reusable building blocks (norms, rotary
embedding, grouped-query attention, MLPs, routed MoE, the Mamba2 mixer) and
the causal-LM assembly; each workload plugin composes its family from them in
its ``llmb_build_model`` hook. Modules here import torch; nothing on the CLI's
import path may import them (see ``llmb.plugins.hookspecs.llmb_build_model``).
"""
