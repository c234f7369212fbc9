"""The type autocast runs matmuls in, and casting to it once.

Under autocast each matmul casts a float32 input to the half-width type itself, and backward
keeps that copy for the weight's gradient. Three projections of one input (a self-attention's
queries, keys and values; the decoder layers' keys and values of the encoder's output) would
keep three copies of it; cast once beforehand, they keep one.
"""
from __future__ import annotations

import torch


def matmul_dtype(x: torch.Tensor) -> torch.dtype:
    """The type autocast runs matmuls in where it is on, else ``x``'s."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


def matmul_input(x: torch.Tensor) -> torch.Tensor:
    """``x`` in :func:`matmul_dtype`, for several matmuls to share: itself outside autocast."""
    return x.to(matmul_dtype(x))
