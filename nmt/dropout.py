"""Dropout whose mask costs a quarter of the random numbers on a CPU.

PyTorch's CPU dropout draws one Bernoulli sample per element from a sequential generator; at
the reference size that was 25 ms of a 500 ms training step (``nmt bench``). Here each 64-bit
draw gives four 15-bit uniforms, so p is rounded to a multiple of 1/32768 (0.2 becomes
0.200012) and kept values are scaled by 1 / (1 - p) of that rounded p, keeping the expectation
exact. CUDA keeps PyTorch's fused kernel.
"""
from __future__ import annotations

import torch
from torch import nn

_LEVELS = 1 << 15  # uniforms per 15-bit chunk


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Zero each element of ``x`` with probability p (to 1/32768) and scale the rest."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return nn.functional.dropout(x, p, True)
    threshold = round(p * _LEVELS)
    n = x.numel()
    bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_()
    uniform = bits.view(torch.int16)[:n] & (_LEVELS - 1)  # (n,) in [0, 32768)
    keep = (uniform >= threshold).view(x.shape)
    return x * keep.to(x.dtype).mul_(_LEVELS / (_LEVELS - threshold))


class Dropout(nn.Module):
    """``nn.Dropout`` with the mask of :func:`dropout`."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
