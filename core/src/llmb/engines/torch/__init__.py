"""The torch engine: plain PyTorch implementations of the benchmark model families.

``llmb.engines.torch.blocks`` holds the reusable building blocks (norms, rotary
embedding, grouped-query attention, MLPs, routed MoE, the Mamba2 mixer) and
the causal-LM assembly; each workload plugin composes its family from them in
its ``llmb_build_model`` hook. Modules here import torch; nothing on the CLI's
import path may import them (see ``llmb.plugins.hookspecs.llmb_build_model``).

The training run, torchtitan's way, one part per module:

    train.py        ``train(spec, rank, world, local_rank, host=...)``: ``Engine`` (one rank's parts) and the loop
    runtime.py      the rank: device, process group, rank 0's printing, NVTX ranges, the GC cadence
    model.py        the model built on the meta device by the workload's plugin; its precision; start-up lines
    parallelize.py  per-block compile, materialisation and the parallel layout (the ``parallel`` package)
    optim.py        AdamW, the learning-rate schedule, the clipping norm
    step.py         one training step: GA micro-batches, or one pipeline-schedule step; then the optimizer
    profiler.py     the profiling window (nsys capture or torch.profiler trace) as a context manager
    checkpoint.py   ``torch.distributed.checkpoint`` save and load, with the framework's timing lines
    logfmt.py       Megatron-Bridge's log lines
    loss.py         the chunked cross-entropy; kernels.py: the fused kernels the blocks use
    parallel/       the parallel layouts (DDP, FSDP2, TP, PP, EP, recompute, float8, Transformer Engine)
"""
