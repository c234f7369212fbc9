"""Boolean masks built once per batch from valid lengths; ``True`` marks a real token."""
from __future__ import annotations

import torch


def lengths_to_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """Mask of real positions.

    :param lengths: valid lengths, shape (batch,)
    :param max_len: padded length; defaults to ``lengths.max()``
    :return: bool mask, shape (batch, max_len), True where position < length
    """
    max_len = int(lengths.max()) if max_len is None else max_len
    positions = torch.arange(max_len, device=lengths.device)
    return positions.unsqueeze(0) < lengths.unsqueeze(1)  # (batch, max_len)
