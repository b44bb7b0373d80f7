"""Which device kernels the engine's blocks use: decided once per device, dtype and shape.

The CPU always takes the plain-PyTorch path of each block. On a GPU:

* attention runs SDPA restricted to the fused kernels (cuDNN, flash,
  memory-efficient), which never hold the full ``seq x seq`` score matrix;
  when none of them applies to the shapes and dtype at hand, rank 0 says so
  once and the math kernel runs (with grouped KV heads repeated first when
  that is what keeps a fused kernel usable);
* the routed experts run as grouped matrix products (``grouped_mm``) where
  the fast grouped GEMM exists (bf16 on SM 9.x / 10.x), otherwise one product
  per expert (which needs the per-expert token counts on the host: one
  synchronisation per MoE layer, said once on rank 0);
* the Mamba2 mixer uses ``mamba_ssm``'s Triton chunked scan and ``causal_conv1d``'s
  convolution when those packages are installed (imported lazily, here only;
  the scan also from a mamba-ssm built without its CUDA extension, whose own
  ``__init__`` cannot import: see ``_scan_without_package_init``), and says
  once which scan it runs.

Each decision is made eagerly on first use and cached; compiled code reads
the cache (a miss runs the decision outside the graph once).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["MambaKernels", "attention", "grouped_mm_usable", "mamba_kernels", "say_once"]

_SAID: set[str] = set()


def say_once(key: str, message: str) -> None:
    """Print ``[llmb] message`` once per process, on rank 0 only (every rank when not distributed)."""
    if key in _SAID:
        return
    _SAID.add(key)
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if not distributed or torch.distributed.get_rank() == 0:
        print(f"[llmb] {message}", flush=True)


# --------------------------------------------------------------------------
# Attention


@dataclass(frozen=True)
class _AttentionPlan:
    backends: tuple  # the SDPBackend members allowed
    # expand the KV heads to the query heads first (a fused kernel without GQA support)
    repeat_kv: bool


_ATTENTION_PLANS: dict[tuple, _AttentionPlan] = {}


def _fused_checks() -> dict:
    from torch.backends import cuda
    from torch.nn.attention import SDPBackend

    return {
        SDPBackend.CUDNN_ATTENTION: cuda.can_use_cudnn_attention,
        SDPBackend.FLASH_ATTENTION: cuda.can_use_flash_attention,
        SDPBackend.EFFICIENT_ATTENTION: cuda.can_use_efficient_attention,
    }


def _usable(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gqa: bool) -> tuple:
    from torch.backends.cuda import SDPAParams

    params = SDPAParams(q, k, v, None, 0.0, True, gqa)
    return tuple(backend for backend, usable in _fused_checks().items() if usable(params, False))


@torch.compiler.disable
def _plan_attention(
    key: tuple, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> _AttentionPlan:
    from torch.nn.attention import SDPBackend

    gqa = q.shape[1] != k.shape[1]
    plan = None
    if backends := _usable(q, k, v, gqa):
        plan = _AttentionPlan(backends, repeat_kv=False)
    elif gqa:
        repeat = q.shape[1] // k.shape[1]
        expanded_k, expanded_v = (
            k.repeat_interleave(repeat, dim=1),
            v.repeat_interleave(repeat, dim=1),
        )
        if backends := _usable(q, expanded_k, expanded_v, False):
            plan = _AttentionPlan(backends, repeat_kv=True)
    if plan is None:
        say_once(
            f"attention-math:{q.dtype}:{q.shape[-1]}",
            f"warning: no fused attention kernel (cuDNN, flash, memory-efficient) accepts {q.dtype} heads of "
            f"{q.shape[-1]} channels on {q.device}: attention runs SDPA's math kernel, which holds the full "
            f"{q.shape[-2]}x{k.shape[-2]} score matrix per head",
        )
        plan = _AttentionPlan((SDPBackend.MATH,), repeat_kv=False)
    _ATTENTION_PLANS[key] = plan
    return plan


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None
) -> torch.Tensor:
    """Causal ``softmax(q k^T * scale) v`` of ``q [b, h, s, d]`` and ``k, v [b, g, s, d]`` (g divides h).

    Query head ``i`` reads KV head ``i // (h / g)``; ``v`` may be narrower or wider than ``d``
    (multi-head latent attention's value heads); ``scale`` defaults to ``1 / sqrt(d)``. CPU: SDPA's
    default choice. GPU: an explicit choice of fused kernels (see the module docstring).
    """
    gqa = q.shape[1] != k.shape[1]
    if q.device.type != "cuda":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=gqa)
    from torch.nn.attention import sdpa_kernel

    key = (q.device, q.dtype, tuple(q.shape), tuple(k.shape), tuple(v.shape))
    plan = _ATTENTION_PLANS.get(key) or _plan_attention(key, q, k, v)
    if plan.repeat_kv:
        repeat = q.shape[1] // k.shape[1]
        k, v, gqa = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1), False
    with sdpa_kernel(list(plan.backends)):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=gqa)


# --------------------------------------------------------------------------
# Grouped matrix products (routed experts)

_GROUPED_MM: dict[tuple, bool] = {}


def _grouped_mm() -> Callable | None:
    """The grouped matrix product of this torch (public ``F.grouped_mm`` or ``torch._grouped_mm``), or None."""
    return getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


@torch.compiler.disable
def _probe_grouped_mm(key: tuple, device: torch.device, dtype: torch.dtype) -> bool:
    grouped = _grouped_mm()
    usable = False
    reason = f"this torch has no grouped matrix product (torch {torch.__version__})"
    if grouped is not None:
        major = torch.cuda.get_device_capability(device)[0]
        if dtype != torch.bfloat16 or major not in (9, 10):
            reason = f"the grouped GEMM needs bf16 on SM 9.x or 10.x, not {dtype} on SM {major}.x"
        else:
            try:  # the kernel is built into this torch and runs forward and backward
                a = torch.randn(32, 64, device=device, dtype=dtype, requires_grad=True)
                b = torch.randn(2, 64, 32, device=device, dtype=dtype, requires_grad=True)
                offsets = torch.tensor([16, 32], device=device, dtype=torch.int32)
                grouped(a, b, offs=offsets).sum().backward()
                usable = True
            except RuntimeError as exc:
                reason = f"the grouped GEMM failed here ({str(exc).splitlines()[0]})"
    if not usable:
        say_once(
            f"grouped-mm:{device.type}:{dtype}",
            f"routed experts run one matrix product per expert on {device} ({reason}): "
            f"one host synchronisation per MoE layer",
        )
    _GROUPED_MM[key] = usable
    return usable


def grouped_mm_usable(device: torch.device, dtype: torch.dtype, *dims: int) -> bool:
    """Whether routed experts of dimensions ``dims`` run as grouped products on ``device`` in ``dtype``.

    Never on CPU, where one product per expert is fastest and a host read
    costs no synchronisation. The fast GEMM needs rows aligned to 16 bytes.
    """
    if device.type != "cuda" or any(d * dtype.itemsize % 16 for d in dims):
        return False
    key = (device, dtype)
    usable = _GROUPED_MM.get(key)
    return _probe_grouped_mm(key, device, dtype) if usable is None else usable


def grouped_mm(a: torch.Tensor, b: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Rows ``offsets[i-1]:offsets[i]`` of ``a [T, k]`` times ``b[i] [k, n]``: ``[T, n]``."""
    grouped = _grouped_mm()
    if grouped is None:
        raise RuntimeError(f"torch {torch.__version__} has no grouped matrix product")
    return grouped(a, b, offs=offsets)


# --------------------------------------------------------------------------
# Mamba2


@dataclass(frozen=True)
class MambaKernels:
    """The installed Mamba2 kernels (each None when its package is missing)."""

    scan: Callable | None  # mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined
    conv: Callable | None  # causal_conv1d.causal_conv1d_fn


_MAMBA: dict[str, MambaKernels | None] = {}

_SCAN_MODULE = "mamba_ssm.ops.triton.ssd_combined"


def _describe(exc: BaseException) -> str:
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _raised_in(exc: BaseException, path: str | None) -> bool:
    """Whether ``exc`` went through the file ``path`` on its way out (a frame of its traceback)."""
    if not path:
        return False
    target = os.path.realpath(path)
    return any(
        os.path.realpath(frame.filename) == target
        for frame in traceback.extract_tb(exc.__traceback__)
    )


def _forget_mamba_ssm() -> None:
    for name in [n for n in sys.modules if n == "mamba_ssm" or n.startswith("mamba_ssm.")]:
        del sys.modules[name]


def _scan_without_package_init(spec: importlib.machinery.ModuleSpec) -> Callable:
    """``mamba_chunk_scan_combined`` imported under a bare ``mamba_ssm`` package whose ``__init__`` is
    never run: a module made from the installed package's own spec (so its ``__path__`` is the
    installed directory) and registered as ``mamba_ssm``, then the Triton submodule imported as usual.

    Why: mamba-ssm's top-level ``__init__`` eagerly imports the whole package, the CUDA extension
    ``selective_scan_cuda`` among it, while the Triton chunked scan (``mamba_ssm.ops.triton``) is
    Python and Triton only. A mamba-ssm wheel built without its CUDA extension (the
    ``MAMBA_SKIP_CUDA_BUILD=TRUE`` build, which needs no CUDA toolchain) therefore cannot be imported
    the normal way although the kernel it carries works. Only ever tried after the normal import failed
    in that ``__init__``. On failure nothing of it stays in ``sys.modules``."""
    _forget_mamba_ssm()  # what the failed import left behind, imported under the failed parent
    package = importlib.util.module_from_spec(spec)  # the package's attributes, its code not run
    sys.modules["mamba_ssm"] = package
    try:
        return importlib.import_module(_SCAN_MODULE).mamba_chunk_scan_combined
    except BaseException:
        _forget_mamba_ssm()
        raise


def _load_mamba_scan() -> tuple[Callable | None, str]:
    """mamba_ssm's Triton chunked scan and how it was loaded, or None and why it could not be."""
    try:
        return importlib.import_module(_SCAN_MODULE).mamba_chunk_scan_combined, ""
    except Exception as exc:  # an ImportError, or a build for another torch/CUDA failing at import
        failure = exc
    spec = None
    if isinstance(failure, ImportError) and "mamba_ssm" not in sys.modules:
        try:
            spec = importlib.util.find_spec("mamba_ssm")
        except (ImportError, ValueError):
            spec = None
    # the package is installed and its own __init__ is what failed: try its Triton kernels without it
    if spec is not None and spec.submodule_search_locations and _raised_in(failure, spec.origin):
        try:
            scan = _scan_without_package_init(spec)
        except Exception as exc:
            return None, (
                f"mamba_ssm's __init__ failed ({_describe(failure)}) and its Triton scan did not load "
                f"without it either ({_describe(exc)})"
            )
        return scan, (
            f", loaded without the package's __init__, which failed ({_describe(failure)}): "
            f"the Triton kernels do not need that"
        )
    return None, f"mamba_ssm did not import ({_describe(failure)})"


def _version(distribution: str) -> str:
    try:
        return " " + importlib.metadata.version(distribution)
    except Exception:
        return ""


@torch.compiler.disable
def _load_mamba_kernels(device_type: str) -> MambaKernels | None:
    """Load the GPU's Mamba2 kernels once and say on rank 0 which scan (and convolution) the job uses."""
    scan, how = _load_mamba_scan()
    if scan is not None:
        say_once(
            "mamba-scan",
            f"Mamba2 scan: mamba_ssm{_version('mamba-ssm')}'s Triton kernel (mamba_chunk_scan_combined)"
            f"{how}",
        )
    else:
        say_once(
            "mamba-scan",
            f"Mamba2 scan: the plain-PyTorch chunked scan (slower), not mamba_ssm's Triton kernel: {how}. "
            f"A mamba-ssm wheel built without its CUDA extension provides the Triton kernel (see "
            f"docs/running-locally.md); NVIDIA's NeMo container has mamba-ssm installed",
        )
    conv = None
    try:
        from causal_conv1d import causal_conv1d_fn as conv
    except Exception as exc:
        say_once(
            "mamba-conv",
            f"Mamba2 convolution: the plain-PyTorch one (causal_conv1d did not import: "
            f"{_describe(exc)}; pip install causal-conv1d)",
        )
    kernels = MambaKernels(scan, conv) if scan or conv else None
    _MAMBA[device_type] = kernels
    return kernels


def mamba_kernels(device: torch.device) -> MambaKernels | None:
    """The Mamba2 kernels for ``device``: None on CPU (the plain-PyTorch scan) or when none is installed."""
    if device.type != "cuda":
        return None
    if device.type in _MAMBA:
        return _MAMBA[device.type]
    return _load_mamba_kernels(device.type)
