"""The torch engine's training loop (one process per rank).

Synthetic tokens (seeded per rank), AdamW with the benchmarks' schedule
(linear warm-up over 10 steps, cosine decay to step 50), gradient
accumulation over the recipe's GA with DDP's gradient sync on the last
micro-batch only, gradient clipping at 1.0, bf16 autocast on GPU. Rank 0
writes Megatron-Bridge's log lines (``engines/torch/logfmt.py``). NVTX ranges mark
step, forward, backward and optimizer on GPU; the profiling window opens
and closes nsys's capture or a torch.profiler trace. Checkpoints are
``torch.distributed.checkpoint`` (``.distcp``) with the save/load timing
lines of the workload's framework.

Speed: AdamW's fused kernel where the device has one (else its multi-tensor
``foreach`` one), multi-tensor gradient clipping, DDP reducing straight from
its buckets (``gradient_as_bucket_view``), each decoder layer compiled on its
own (``compile_blocks``: on GPU by default, on CPU with ``--compile``) before
the DDP wrapping, so the gradient reduction still overlaps backward; loss and
grad norm stay on the device until the step's one host read (the log prints
every iteration); Python's garbage collector runs every ``GC_EVERY`` steps
instead of whenever allocations trigger it (``GarbageCollection``).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import math
import os
import resource
import sys
import time
from datetime import timedelta

from llmb.engines.torch import logfmt, parallel
from llmb.runs.checkpoint_metadata import safe_reader
from llmb.runs.runspec import RunSpec

MAX_LR, MIN_LR, WARMUP_STEPS, DECAY_STEPS = 3e-4, 3e-5, 10, 50
CLIP_NORM = 1.0
# Python's garbage collector: automatic collection off, generations 0-1 collected every GC_EVERY steps,
# so every rank collects at the same step instead of whenever its allocations trigger it (a rank that
# collects mid-step stalls the others at the next gradient reduction). 50: outside the seeds' statistics
# windows (e.g. steps 35-44) of a default 50-step run.
GC_EVERY = 50
# Fault injection: test hooks, to test how backends report and retry a failing rank.
# LLMB_FAIL_AT_STEP: "STEP" or "STEP:RANK" makes that rank (default: every rank) raise at that step;
# LLMB_FAIL_MESSAGE: the message it raises (e.g. a flaky signature; default: "injected failure ...");
# LLMB_FAIL_ONCE=PATH: raise only while PATH does not exist, and create it (a retry then succeeds;
#   give it with STEP:RANK, since one rank creates it);
# LLMB_NAN_FROM_STEP=STEP: the loss is NaN from that step on (a diverging run: it logs grad norm nan).
FAIL_AT_STEP = "LLMB_FAIL_AT_STEP"
FAIL_MESSAGE = "LLMB_FAIL_MESSAGE"
FAIL_ONCE = "LLMB_FAIL_ONCE"
NAN_FROM_STEP = "LLMB_NAN_FROM_STEP"
# LLMB_FLOAT8_EMULATE=1: an fp8 recipe on CPU runs torchao's float8 emulation (a test of the numerics, slower
# than float32; on GPU the real float8 kernels run without it).
FLOAT8_EMULATE = "LLMB_FLOAT8_EMULATE"


def injected_failure(step: int, rank: int) -> str | None:
    """The message this rank raises at ``step`` (LLMB_FAIL_AT_STEP), or None."""
    value = os.environ.get(FAIL_AT_STEP)
    if not value:
        return None
    at, _, who = value.partition(":")
    if int(at) != step or (who and int(who) != rank):
        return None
    once = os.environ.get(FAIL_ONCE)
    if once:
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            return None  # an earlier attempt failed here already
    return os.environ.get(FAIL_MESSAGE) or f"injected failure at step {step} on rank {rank} ({FAIL_AT_STEP})"


def injected_nan(step: int) -> bool:
    """Whether LLMB_NAN_FROM_STEP makes this step's loss NaN."""
    value = os.environ.get(NAN_FROM_STEP)
    return bool(value) and step >= int(value)


def learning_rate(step: int) -> float:
    """Linear warm-up to MAX_LR over WARMUP_STEPS, cosine decay to MIN_LR at step DECAY_STEPS."""
    if step <= WARMUP_STEPS:
        return MAX_LR * step / WARMUP_STEPS
    if step >= DECAY_STEPS:
        return MIN_LR
    progress = (step - WARMUP_STEPS) / (DECAY_STEPS - WARMUP_STEPS)
    return MIN_LR + 0.5 * (MAX_LR - MIN_LR) * (1 + math.cos(math.pi * progress))


def _nvtx(enabled: bool):
    """A ``range(name)`` context factory: NVTX on GPU, nothing on CPU."""
    if not enabled:
        return lambda name: contextlib.nullcontext()
    try:
        import nvtx  # the nvtx package, when installed

        return lambda name: nvtx.annotate(name)
    except ImportError:
        import torch

        return torch.cuda.nvtx.range


def cpu_threads() -> int:
    """Threads for one CPU rank: OMP_NUM_THREADS when set (the cluster's or the user's word), else 1.
    Measured here: two threads per rank were 1.1-1.4x slower than one on a quiet machine, and 10-40x
    slower on a loaded one, where ranks that spin-wait for each other's threads stall."""
    if os.environ.get("OMP_NUM_THREADS", "").strip().isdigit():
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    return 1


def resolve_device(spec: RunSpec, cuda: bool, record: bool) -> RunSpec:
    """An ``auto`` device decided where the job runs; rank 0 records it in ``recipe.json``."""
    from dataclasses import replace

    from llmb.runs import experiment

    device, dtype = ("cuda", "bfloat16") if cuda else ("cpu", "float32")
    if record:
        path = os.path.join(spec.run_dir, experiment.RECIPE_FILE)
        data = experiment.read_json(path)
        if data is not None:
            data.update({"device": device, "compute_dtype": dtype})
            experiment.write_json(path, data)
    return replace(spec, device=device, compute_dtype=dtype)


class GarbageCollection:
    """Python's garbage collector on a fixed cadence: ``start`` collects fully and turns automatic
    collection off, ``after_step(step)`` collects generations 0 and 1 every ``every`` steps, ``stop``
    turns automatic collection back on (when it was on at ``start``)."""

    def __init__(self, every: int = GC_EVERY):
        self.every = every
        self.was_enabled = gc.isenabled()

    def start(self) -> None:
        self.was_enabled = gc.isenabled()
        gc.collect()
        gc.disable()

    def after_step(self, step: int) -> None:
        if step % self.every == 0:
            gc.collect(1)

    def stop(self) -> None:
        if self.was_enabled:
            gc.enable()


def fused_devices() -> set[str]:
    """Device types with a fused AdamW kernel in this torch (CUDA; CPU and others since torch 2.4)."""
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
    except ImportError:
        return {"cuda"}
    return set(_get_fused_kernels_supported_devices())


def make_optimizer(parameters):
    """AdamW with the benchmarks' settings (betas 0.9/0.95, weight decay 0.1): one fused kernel for all
    parameters where their device has one, else the multi-tensor (``foreach``) implementation."""
    import torch

    params = list(parameters)
    fused = all(p.device.type in fused_devices() and p.is_floating_point() for p in params)
    # one parameter group per kind (plain tensors, DTensors of each mesh): a fused or foreach kernel takes
    # one kind at a time (expert parallelism leaves the experts plain beside FSDP's DTensors)
    groups: dict[int, list] = {}
    for p in params:
        groups.setdefault(id(getattr(p, "device_mesh", None)), []).append(p)
    return torch.optim.AdamW([{"params": group} for group in groups.values()], lr=learning_rate(1),
                             betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8,
                             **({"fused": True} if fused else {"foreach": True}))


def sharded_build(layout, world: int) -> bool:
    """Whether the model is laid out on the meta device and only this rank's share materialised: under
    FSDP, TP and PP (what a full-size row needs to fit); not under DDP, which starts from whole weights."""
    return world > 1 and (layout.fsdp or layout.tp > 1 or layout.pp > 1)


def wants_compile(asked: bool | None, cuda: bool) -> bool:
    """Per-block ``torch.compile``: as asked (``--compile`` / ``--no-compile``), else on GPU only."""
    return cuda if asked is None else bool(asked)


def compile_blocks(model) -> int:
    """``torch.compile`` each decoder layer of ``model`` (its ``layers``) in place; how many.

    Per block, not the whole model: one compiled graph serves every layer of a kind, compile time does
    not grow with depth, and DDP/FSDP wrapped around the compiled layers still reduce each bucket's
    gradients while backward goes on. ``Module.compile`` keeps the parameter names (no ``_orig_mod``),
    so checkpoints read the same compiled or not."""
    layers = list(model.layers.children())
    for layer in layers:
        layer.compile()
    return len(layers)


def flops_line(spec: RunSpec) -> str:
    """The start-up line with both FLOP counts: the workload's seed formula (the log's MODEL_TFLOP/s/GPU)
    and Megatron-Bridge's (causal attention), so MFU compares with either."""
    from llmb.recipes.flops import megatron_bridge_sample

    ours = spec.flops_per_sample
    megatron = megatron_bridge_sample(spec.model_arch(), spec.seq_len)
    line = f"[llmb] model FLOPs per sample: {ours:.4e} (the workload's formula: the logged MODEL_TFLOP/s/GPU)"
    if megatron is None:
        return line + "; Megatron-Bridge's formula does not describe this architecture"
    line += f"; Megatron-Bridge's count (causal attention): {megatron.per_sample:.4e}"
    if ours:
        line += f" (TFLOP/s on that count: the logged value x {megatron.per_sample / ours:.4f})"
    return line


class Engine:
    gc_every = GC_EVERY

    def __init__(self, spec: RunSpec, rank: int, world: int, local_rank: int):
        import torch

        self.torch = torch
        if spec.device == "auto":
            spec = resolve_device(spec, torch.cuda.is_available(), record=rank == 0)
        self.spec, self.rank, self.world = spec, rank, world
        self.cuda = spec.device == "cuda"
        if self.cuda:
            torch.cuda.set_device(local_rank)
            self.device = torch.device("cuda", local_rank)
        else:
            self.device = torch.device("cpu")
            torch.set_num_threads(cpu_threads())
        self.distributed = world > 1
        if self.distributed:
            import torch.distributed as dist

            dist.init_process_group("nccl" if self.cuda else "gloo", rank=rank, world_size=world,
                                    timeout=timedelta(minutes=10))
        self.range = _nvtx(self.cuda)
        self.compile = wants_compile(spec.compile, self.cuda)
        self.gc = GarbageCollection(self.gc_every)
        self.bf16_autocast = self.cuda and spec.compute_dtype == "bfloat16"
        self.te_autocast = None  # set by build when Transformer Engine's layers compute the row's format

    def autocast(self):
        """The context of a forward pass: bf16 autocast on GPU, and Transformer Engine's autocast with the
        row's recipe when its layers compute the row's nvfp4 / mxfp8 (``self.precision.te``)."""
        stack = contextlib.ExitStack()
        if self.bf16_autocast:
            stack.enter_context(self.torch.autocast("cuda", dtype=self.torch.bfloat16))
        if self.te_autocast is not None:
            stack.enter_context(self.te_autocast())
        return stack

    def say(self, *lines: str) -> None:
        if self.rank == 0:
            for line in lines:
                print(line, flush=True)

    # ------------------------------------------------------------ set-up

    def build(self) -> None:
        torch, spec = self.torch, self.spec
        from llmb.engines.torch import blocks
        from llmb.engines.torch.parallel.float8 import apply_float8, record_precision
        from llmb.engines.torch.parallel.materialize import materialize, meta_template
        from llmb.engines.torch.parallel.pipeline import Pipeline
        from llmb.plugins.host import PluginHost

        host = PluginHost()
        workload = host.workload(spec.workload)
        arch = spec.model_arch()
        # Built on the meta device (no memory, no wasted init), then materialised where it runs and
        # initialised there, each sub-module from its own seed: every rank starts from the same weights,
        # and a sharded layout is laid out on meta first and materialises only this rank's share.
        with torch.device("meta"):
            model = host.build_model(workload, arch)
        total = sum(p.numel() for p in model.parameters())
        embedding = arch.vocab * arch.hidden * (1 if arch.tied_embeddings else 2)
        label = f" ({spec.proxy} proxy)" if spec.proxy else ""
        self.precision = self.choose_precision()
        self.say(
            f"[llmb] torch engine: {spec.workload} {spec.size}{label}, {spec.ranks} rank(s) on {spec.device}, "
            f"computing in {spec.compute_dtype} (recipe {spec.dtype}), MBS {spec.mbs} x GA {spec.ga} x DP "
            f"{spec.layout.dp(self.world)} = GBS {spec.gbs}, sequence {spec.seq_len}, {spec.steps} steps",
            f"[llmb] parallel layout: {parallel.describe(spec.layout, self.world)}",
            *self.precision.lines(),
            *logfmt.parameters(total - embedding, embedding, total),
            flops_line(spec),
        )
        if self.rank == 0:
            record_precision(spec.run_dir, self.precision)
        if self.precision.float8:
            apply_float8(model, self.precision.float8, emulate=self.precision.emulate)
        if self.precision.te:
            from llmb.engines.torch.parallel.transformer_engine import apply_te_linears, te_autocast

            apply_te_linears(model)
            self.te_autocast = te_autocast(self.precision.te)
        self.model = model
        if sharded_build(spec.layout, self.world):
            template = meta_template(model)
            self.module = self.wrap(model)
            stages = self.module.modules if isinstance(self.module, Pipeline) else None
            materialize(model, template, spec.seed, self.device, stages)
            self.prepare(stages or [model])
        else:  # DDP (and EP's) wrapping starts from real weights: it checks them across ranks
            blocks.initialize(model.to_empty(device=self.device), spec.seed)
            self.prepare([model])
            self.module = self.wrap(model)
        self.pipeline = self.module if isinstance(self.module, Pipeline) else None
        self.experts = spec.layout.ep > 1
        self.optimizer = make_optimizer(self.pipeline.parameters() if self.pipeline else self.model.parameters())
        self.gc.start()
        # seeded by the data-parallel rank: the ranks of one model replica (TP, PP, CP) read the same batches
        self.generator = torch.Generator().manual_seed(spec.seed * 1000 + parallel.data_rank(spec.layout, self.world,
                                                                                               self.rank))
        self.vocab = arch.vocab

    def choose_precision(self):
        """What this run computes in (``llmb.engines.torch.parallel.float8.choose_precision``): float8 for an fp8
        recipe on a GPU that has float8 matrix products, else the run's compute dtype, with the reason."""
        from llmb.engines.torch.parallel.float8 import choose_precision

        emulate = os.environ.get(FLOAT8_EMULATE) == "1"
        return choose_precision(self.spec.dtype, self.device, self.spec.compute_dtype, emulate_on_cpu=emulate,
                                tensor_parallel=self.spec.layout.tp)

    def wrap(self, model):
        """The module to train: ``model`` with each layer compiled when asked (first, so that the
        wrapping sees the compiled layers; compiling is lazy, so this works on meta weights too), laid
        out as the run's parallel layout asks (``llmb.engines.torch.parallel.parallelize``: DDP over the ranks
        when it is data parallel only, with gradients as views into DDP's reduction buckets; FSDP2,
        tensor parallel, pipeline stages, expert parallel, recompute)."""
        if self.compile:
            compile_blocks(model)
        return parallel.parallelize(model, self.spec, self.world)

    def prepare(self, modules) -> None:
        """Build what the model would otherwise build on its first call, before any layer is traced: the
        RoPE tables of the run's sequence length on this device. A compiled layer graph broken around
        their construction was seen to fail intermittently in torch 2.13 (AOTAutograd replaying the views
        of q|k|v it returned: "shape '[<garbage>, ...]' is invalid")."""
        from llmb.engines.torch.blocks import RotaryEmbedding

        for module in modules:
            for sub in module.modules():
                if isinstance(sub, RotaryEmbedding):
                    sub.angles(self.spec.seq_len, self.device)

    # ------------------------------------------------------------ checkpoints

    def _reduce(self, value: float, op: str) -> float:
        if not self.distributed:
            return value
        import torch.distributed as dist

        tensor = self.torch.tensor([value], dtype=self.torch.float64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.MIN)
        return float(tensor.item())

    def _state(self):
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optim_state = get_state_dict(self.module, self.optimizer)
        return {"model": model_state, "optim": optim_state}

    def digest(self) -> str:
        """sha256 over the model's weights, whole, in name order (on rank 0; every rank must call it)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        whole = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        sha = hashlib.sha256()
        for name, tensor in sorted(whole.items()):
            sha.update(name.encode())
            sha.update(tensor.detach().to("cpu").contiguous().view(-1).view(self.torch.uint8).numpy().tobytes())
        return sha.hexdigest()

    def save(self, step: int) -> None:
        import torch.distributed.checkpoint as dcp

        path = self.spec.checkpoint_save_dir
        os.makedirs(path, exist_ok=True)
        started = time.time()
        begin = time.perf_counter()
        dcp.save(self._state(), checkpoint_id=path)
        ms = (time.perf_counter() - begin) * 1000
        low, high = self._reduce(ms, "min"), self._reduce(ms, "max")
        self.say(*logfmt.checkpoint_saved(self.spec.checkpoint_format, step, path, low, high, started),
                 f"[llmb] weights sha256 after save: {self.digest()}")

    def load(self) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        path = self.spec.checkpoint_load_dir
        started = time.time()
        begin = time.perf_counter()
        state = self._state()
        dcp.load(state, storage_reader=safe_reader(path))  # never pickle.load on the index (llmb.runs.checkpoint_metadata)
        set_state_dict(self.module, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        ms = (time.perf_counter() - begin) * 1000
        low, high = self._reduce(ms, "min"), self._reduce(ms, "max")
        self.say(*logfmt.checkpoint_loaded(self.spec.checkpoint_format, path, low, high, started),
                 f"[llmb] weights sha256 after load: {self.digest()}")

    # ------------------------------------------------------------ training

    def memory_line(self, step: int) -> str:
        torch = self.torch
        gib = 2**30
        if self.cuda:
            fields = {
                "mem-allocated-gigabytes": torch.cuda.memory_allocated() / gib,
                "mem-max-allocated-gigabytes": torch.cuda.max_memory_allocated() / gib,
                "mem-reserved-gigabytes": torch.cuda.memory_reserved() / gib,
                "mem-max-reserved-gigabytes": torch.cuda.max_memory_reserved() / gib,
            }
        else:
            fields = {"max-rss-gigabytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / gib}
        return logfmt.memory(step, self.rank, fields)

    def micro_batch(self):
        torch, spec = self.torch, self.spec
        tokens = torch.randint(0, self.vocab, (spec.mbs, spec.seq_len + 1), generator=self.generator)
        if self.cuda:  # from pinned memory the copy is asynchronous (from pageable memory it waits for the GPU)
            tokens = tokens.pin_memory().to(self.device, non_blocking=True)
        return tokens[:, :-1], tokens[:, 1:]

    def step(self, step: int) -> tuple[float, float, float]:
        """One optimizer step over GA micro-batches: (loss, grad norm, seconds).

        The loss and the grad norm stay on the device; reading them is the step's one host sync (it
        waits for every kernel of the step, the optimizer's included), then the step time's reduction."""
        torch, spec = self.torch, self.spec

        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(step)
        begin = time.perf_counter()
        loss_sum = torch.zeros((), device=self.device)
        with self.range("step"):
            if self.pipeline:
                loss_sum += self.pipeline_backward()
            for micro in range(0 if self.pipeline else spec.ga):
                inputs, labels = self.micro_batch()
                last = micro == spec.ga - 1
                sync = contextlib.nullcontext() if last else parallel.no_sync(self.module)
                with sync, parallel.loss_context(spec):
                    with self.range("forward"), self.autocast():
                        # the model's own chunked cross-entropy (no full fp32 logits), through DDP's forward
                        loss = self.module(inputs, labels=labels) / spec.ga
                        if injected_nan(step):
                            loss = loss * float("nan")
                    with self.range("backward"):
                        loss.backward()
                loss_sum += parallel.plain(loss.detach())
            with self.range("optimizer"):
                if self.experts:
                    from llmb.engines.torch.parallel.experts import reduce_expert_gradients

                    reduce_expert_gradients(self.module)
                if self.pipeline or self.experts:  # the norm over every stage's / expert shard's gradients
                    from llmb.engines.torch.parallel.gradnorm import clip_layout_grad_norm_

                    grad_norm = clip_layout_grad_norm_(self.module, CLIP_NORM, self.device)
                else:
                    grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), CLIP_NORM, foreach=True)
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
            if self.distributed:
                import torch.distributed as dist

                dist.all_reduce(loss_sum, op=dist.ReduceOp.SUM)
            loss, norm = torch.stack((loss_sum / self.world, parallel.plain(grad_norm).float())).tolist()
        seconds = time.perf_counter() - begin
        self.gc.after_step(step)
        return loss, norm, self._reduce(seconds, "max")

    def pipeline_backward(self):
        """Forward and backward of the step's GA micro-batches through the pipeline schedule (1F1B, or
        interleaved with VP): its mean loss, on every rank of the pipeline. The tokens are the ones the
        unsplit model would draw, micro-batch after micro-batch, from the data-parallel rank's generator."""
        torch = self.torch
        batches = [self.micro_batch() for _ in range(self.spec.ga)]
        inputs = torch.cat([inputs for inputs, _ in batches])
        labels = torch.cat([labels for _, labels in batches])
        with self.range("forward-backward"), self.autocast():
            return self.pipeline.step(inputs, labels)

    def profiler(self):
        """(start(step), stop(step)) for the profiling window."""
        profile = self.spec.profile
        if not profile:
            return (lambda step: None), (lambda step: None)
        first, last = profile["start"], profile["stop"]
        torch = self.torch
        if profile["kind"] == "nsys":
            def start(step):
                if step == first:
                    torch.cuda.profiler.start()

            def stop(step):
                if step == last:
                    torch.cuda.profiler.stop()

            return start, stop
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        state = {}

        def start(step):
            if step == first:
                state["profiler"] = torch.profiler.profile(activities=activities)
                state["profiler"].__enter__()

        def stop(step):
            if step == last and "profiler" in state:
                state["profiler"].__exit__(None, None, None)
                os.makedirs(profile["dir"], exist_ok=True)
                trace = os.path.join(profile["dir"], f"rank{self.rank}_trace.json")
                state.pop("profiler").export_chrome_trace(trace)
                self.say(f"[llmb] torch.profiler trace of steps {first}-{last}: {trace}")

        return start, stop

    def run(self) -> None:
        spec = self.spec
        self.build()
        if spec.checkpoint_load_dir:
            self.load()
        start_profile, stop_profile = self.profiler()
        consumed = 0
        for step in range(1, spec.steps + 1):
            if (message := injected_failure(step, self.rank)) is not None:
                raise RuntimeError(message)
            start_profile(step)
            loss, grad_norm, seconds = self.step(step)
            stop_profile(step)
            consumed += spec.gbs
            tflops = spec.gbs * spec.flops_per_sample / seconds / spec.ranks / 1e12 if seconds > 0 else 0.0
            self.say(
                logfmt.step_time(seconds, tflops),
                logfmt.iteration(step, spec.steps, consumed=consumed, elapsed_ms=seconds * 1000, tflops=tflops,
                                 lr=learning_rate(step), gbs=spec.gbs, loss=loss, grad_norm=grad_norm),
            )
            if step == 1:
                self.say(self.memory_line(step))
        if spec.checkpoint_save_dir:
            self.save(spec.steps)
        self.say(self.memory_line(spec.steps), f"[llmb] training finished after {spec.steps} steps")

    def close(self) -> None:
        self.gc.stop()
        if self.distributed:
            import torch.distributed as dist

            dist.barrier()
            dist.destroy_process_group()


def train(spec: RunSpec, rank: int, world: int, local_rank: int) -> None:
    sys.stdout.reconfigure(line_buffering=True)
    engine = Engine(spec, rank, world, local_rank)
    engine.run()
    engine.close()  # not on failure: a barrier would wait forever for the rank that failed
