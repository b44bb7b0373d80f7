"""The engines that train inside a job; ``llmb.worker`` picks one by ``RunSpec.engine``.

    torch/       the torch engine: plain PyTorch, runs anywhere torch does (CPU included)
    frameworks/  the production frameworks' drivers: Megatron-Bridge and NeMo 2, inside NVIDIA's container

Both are imported only by the worker, never on the CLI's path. Why they are part of the
core rather than plugins: docs/design.md.
"""
