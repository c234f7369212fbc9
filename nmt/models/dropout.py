"""Dropout whose mask costs a quarter of the random numbers on a CPU.

PyTorch's CPU dropout draws one Bernoulli sample per element from a sequential generator; at
the reference size that was 25 ms of a 500 ms training step (``nmt bench``). Here each 64-bit
draw gives four 15-bit uniforms, so p is rounded to a multiple of 1/32768 (0.2 becomes
0.200012) and kept values are scaled by 1 / (1 - p) of that rounded p, keeping the expectation
exact. CUDA keeps PyTorch's fused kernel.
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
    return x * dropout_mask(x.shape, p, x)


def dropout_mask(shape: tuple[int, ...], p: float, like: torch.Tensor) -> torch.Tensor:
    """The scaled keep mask :func:`dropout` multiplies by: 0 or 1 / (1 - p), in ``like``'s
    dtype and on its device, for callers that keep it (a hand-written backward needs it)."""
    if like.device.type != "cpu":
        return torch.empty(shape, dtype=like.dtype, device=like.device).bernoulli_(1 - p).div_(1 - p)
    threshold = round(p * _LEVELS)
    n = math.prod(shape)
    bits = torch.empty((n + 3) // 4, dtype=torch.int64).random_()
    uniform = bits.view(torch.int16)[:n] & (_LEVELS - 1)  # (n,) in [0, 32768)
    keep = (uniform >= threshold).view(shape)
    return keep.to(like.dtype).mul_(_LEVELS / (_LEVELS - threshold))


class Dropout(nn.Module):
    """``nn.Dropout`` with the mask of :func:`dropout`."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
