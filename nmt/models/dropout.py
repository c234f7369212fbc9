"""Dropout whose mask costs a quarter of the random numbers on a CPU.

PyTorch's CPU dropout draws one Bernoulli sample per element from a sequential generator; at
the reference size that was 25 ms of a 500 ms training step (``nmt bench``). Here each 64-bit
draw gives four 15-bit uniforms, so p is rounded to a multiple of 1/32768 (0.2 becomes
0.200012) and kept values are scaled by 1 / (1 - p) of that rounded p, keeping the expectation
exact. CUDA keeps PyTorch's fused kernel.

What backward keeps is a bool mask, not the float one ``x * mask`` would keep: a quarter of
the memory. ReLU before dropout (the Transformer's feed-forward) is one function that keeps
only its output, which the next layer keeps anyway: the output alone says where the
gradient flows. At the Transformer's reference size the two took a bench's training peak
from 1,245 MB to 1,178 MB (docs/performance.md).
"""
from __future__ import annotations

import math

import torch
from torch import nn

_LEVELS = 1 << 15  # uniforms per 15-bit chunk


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Zero each element of ``x`` with probability p (to 1/32768) and scale the rest."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return nn.functional.dropout(x, p, True)
    keep, scale = keep_mask(x.shape, p)
    return _KeepScale.apply(x, keep, scale)


def relu_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """dropout(relu(x)), keeping for backward only its output (see the module's docstring)."""
    if not training or p == 0.0:
        return torch.relu(x)
    if x.device.type != "cpu":
        keep, scale = torch.rand(x.shape, device=x.device) >= p, 1 / (1 - p)
    else:
        keep, scale = keep_mask(x.shape, p)
    return _ReluKeepScale.apply(x, keep, scale)


def keep_mask(shape: tuple[int, ...], p: float) -> tuple[torch.Tensor, float]:
    """A CPU keep mask (bool, True with probability 1 - p to 1/32768) and the scale of kept values."""
    threshold = round(p * _LEVELS)
    n = math.prod(shape)
    bits = torch.empty((n + 3) // 4, dtype=torch.int64).random_()
    uniform = bits.view(torch.int16)[:n] & (_LEVELS - 1)  # (n,) in [0, 32768)
    return (uniform >= threshold).view(shape), _LEVELS / (_LEVELS - threshold)


def dropout_mask(shape: tuple[int, ...], p: float, like: torch.Tensor) -> torch.Tensor:
    """The scaled keep mask :func:`dropout` multiplies by: 0 or 1 / (1 - p), in ``like``'s
    dtype and on its device, for callers that keep it (a hand-written backward needs it)."""
    if like.device.type != "cpu":
        return torch.empty(shape, dtype=like.dtype, device=like.device).bernoulli_(1 - p).div_(1 - p)
    keep, scale = keep_mask(shape, p)
    return keep.to(like.dtype).mul_(scale)


class _KeepScale(torch.autograd.Function):
    """x * keep * scale, keeping the bool ``keep`` for backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x * keep.to(x.dtype).mul_(scale)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (keep,) = ctx.saved_tensors
        return grad * keep.to(grad.dtype).mul_(ctx.scale), None, None


class _ReluKeepScale(torch.autograd.Function):
    """relu(x) * keep * scale; its gradient is ``scale`` where the output is positive (kept
    and x > 0) and 0 elsewhere, so the output is all backward keeps."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
        out = torch.relu(x).mul_(keep.to(x.dtype).mul_(scale))
        ctx.save_for_backward(out)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (out,) = ctx.saved_tensors
        return grad * (out > 0).to(grad.dtype).mul_(ctx.scale), None, None


class Dropout(nn.Module):
    """``nn.Dropout`` with the mask of :func:`dropout`."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
