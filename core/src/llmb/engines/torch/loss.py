"""Chunked cross-entropy: the output layer and the loss together, a chunk of tokens at a time.

``chunked_cross_entropy(hidden, weight, labels)`` equals
``F.cross_entropy((hidden @ weight.T).float(), labels)`` (the mean over the
tokens) in value and gradients, but holds the float32 logits of at most
``LOGITS_PER_CHUNK`` elements at once instead of all ``tokens x vocab``.
Each chunk's logits are used once: the loss and, when a gradient is wanted,
the chunk's gradients are computed in the forward pass (softmax minus the
one-hot label, then its products with the weight and the hidden states), and
the backward pass only scales them by the incoming gradient. So no product
is computed twice. The weight's gradient is accumulated in (at least)
float32 over the chunks.

Under autocast the products run in the autocast dtype, as the output layer's
``F.linear`` would; otherwise in the inputs' common dtype.
"""

from __future__ import annotations

import torch

__all__ = ["LOGITS_PER_CHUNK", "chunkable", "chunked_cross_entropy"]

# float32 logits held at once: 1 GiB (2,092 tokens of Llama 3.1's 128,256 vocabulary). Every chunk reads
# and writes the whole float32 weight gradient once more, so fewer chunks are faster: on an H100, 8,192
# tokens of Llama 3.1 8B's output layer and loss (forward and backward) took 99 ms in chunks of 523 tokens
# (256 MiB), 69 ms in chunks of 2,048 and 63 ms in one chunk (12 GiB at its peak); the 8B width's 2-layer
# step 178.5 -> 148.1 ms (benchmarks/gpu_probe.py).
LOGITS_PER_CHUNK = 2**28


def chunkable(weight: torch.Tensor) -> bool:
    """Whether ``weight`` is a plain tensor the chunked loss can use (a sharded DTensor is not)."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a torch built without distributed
        return True
    return not isinstance(weight, DTensor)


def _compute_dtype(hidden: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    device_type = hidden.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return torch.promote_types(hidden.dtype, weight.dtype)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, labels, dtype, chunk, with_grad):
        tokens = hidden.shape[0]
        h_all, w = hidden.to(dtype), weight.to(dtype)
        accumulate = torch.promote_types(weight.dtype, torch.float32)
        grad_hidden = torch.empty_like(hidden) if with_grad and hidden.requires_grad else None
        want_weight, grad_weight = with_grad and weight.requires_grad, None
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, tokens, chunk):
                h, y = h_all[start : start + chunk], labels[start : start + chunk]
                logits = (h @ w.T).float()  # [chunk, vocab]: the only logits alive
                lse = torch.logsumexp(logits, dim=-1)
                total += (lse - logits.gather(1, y.unsqueeze(1)).squeeze(1)).sum()
                if grad_hidden is None and not want_weight:
                    continue
                # d(mean loss)/d(logits) = (softmax - one_hot(label)) / tokens, built in place of the logits
                g = logits.sub_(lse.unsqueeze(1)).exp_()
                g.scatter_add_(1, y.unsqueeze(1), g.new_full((y.shape[0], 1), -1.0)).div_(tokens)
                g = g.to(dtype)
                if grad_hidden is not None:
                    grad_hidden[start : start + chunk] = g @ w
                if grad_weight is None and want_weight:
                    # the first chunk's: no zero-filled buffer to add to
                    grad_weight = (g.T @ h).to(accumulate)
                elif grad_weight is not None and grad_weight.dtype == dtype:
                    grad_weight.addmm_(g.T, h)
                elif grad_weight is not None:
                    grad_weight += g.T @ h
        ctx.save_for_backward(grad_hidden, grad_weight)
        return total / tokens

    @staticmethod
    def backward(ctx, grad):
        grad_hidden, grad_weight = ctx.saved_tensors
        scaled = [None if g is None else g * grad.to(g.dtype) for g in (grad_hidden, grad_weight)]
        return scaled[0], scaled[1], None, None, None, None


def chunked_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    chunk_tokens: int | None = None,
) -> torch.Tensor:
    """Mean cross-entropy of the logits ``hidden [N, H] @ weight[V, H].T`` against ``labels [N]``.

    A float32 scalar. ``chunk_tokens`` tokens per chunk (default: as many as
    keep a chunk's logits within ``LOGITS_PER_CHUNK`` elements).
    """
    if (
        hidden.dim() != 2
        or labels.shape != hidden.shape[:1]
        or weight.shape[1:] != hidden.shape[1:]
    ):
        raise ValueError(
            f"chunked_cross_entropy: hidden {tuple(hidden.shape)}, weight {tuple(weight.shape)} and "
            f"labels {tuple(labels.shape)} do not fit [N, H], [V, H] and [N]"
        )
    chunk = chunk_tokens or max(1, LOGITS_PER_CHUNK // weight.shape[0])
    with_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    return _LinearCrossEntropy.apply(
        hidden, weight, labels, _compute_dtype(hidden, weight), chunk, with_grad
    )
