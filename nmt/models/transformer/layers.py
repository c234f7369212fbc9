"""The position-wise feed-forward network and the residual sub-layer around every block."""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from nmt.models.dropout import Dropout, relu_dropout


class FeedForward(nn.Module):
    """FFN(x) = W_2 relu(W_1 x + b_1) + b_2, the same at every position (section 3.3)."""

    def __init__(self, size: int, ff_size: int, dropout: float) -> None:
        super().__init__()
        self.inner = nn.Linear(size, ff_size)
        self.outer = nn.Linear(ff_size, size)
        self.p = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """:param x: shape (..., size) :return: the same shape"""
        return self.outer(relu_dropout(self.inner(x), self.p, self.training))


class Residual(nn.Module):
    """x + dropout(f(x)) with layer normalisation: before f (``pre_norm``, LayerNorm(x) fed to
    f, the residual path left alone) or after the sum (post-norm, the original paper's)."""

    def __init__(self, size: int, dropout: float, pre_norm: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(size)
        self.dropout = Dropout(dropout)
        self.pre_norm = pre_norm

    def forward(self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """:param x: shape (batch, len, size) :return: the same shape"""
        if self.pre_norm:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))
