"""Sinusoidal positional encoding (Vaswani et al. 2017, section 3.5), as d2l.ai writes it:
P[i, 2j] = sin(i / 10000^(2j/d)), P[i, 2j+1] = cos(i / 10000^(2j/d)), added to the scaled
embeddings, then dropout."""
from __future__ import annotations

import torch
from torch import nn

from nmt.models.dropout import Dropout


def sinusoids(length: int, size: int) -> torch.Tensor:
    """The encoding table P, shape (length, size); ``size`` even."""
    assert size % 2 == 0, "the positional encoding pairs sines with cosines: an even size"
    positions = torch.arange(length, dtype=torch.float64).unsqueeze(1)  # (length, 1)
    rates = torch.pow(10000.0, -torch.arange(0, size, 2, dtype=torch.float64) / size)  # (size/2,)
    table = torch.empty(length, size, dtype=torch.float64)
    table[:, 0::2] = torch.sin(positions * rates)
    table[:, 1::2] = torch.cos(positions * rates)
    return table.float()


class PositionalEncoding(nn.Module):
    """x + P[offset : offset + len], then dropout; the table grows on demand, never saved."""

    def __init__(self, size: int, dropout: float, length: int = 256) -> None:
        super().__init__()
        self.size = size
        self.dropout = Dropout(dropout)
        self.register_buffer("table", sinusoids(length, size), persistent=False)

    def forward(self, x: torch.Tensor, offset: int | torch.Tensor = 0) -> torch.Tensor:
        """:param x: shape (batch, len, size) :param offset: the first position (a decoding
        step's), or each row's, shape (batch,)
        :return: the same shape"""
        per_row = isinstance(offset, torch.Tensor)
        end = (int(offset.max()) if per_row else offset) + x.size(1)
        if end > self.table.size(0):
            self.table = sinusoids(max(end, 2 * self.table.size(0)), self.size).to(self.table.device)
        if per_row:
            rows = offset.unsqueeze(1) + torch.arange(x.size(1), device=x.device)  # (batch, len)
            return self.dropout(x + self.table[rows].to(x.dtype))
        return self.dropout(x + self.table[offset:end].to(x.dtype))
