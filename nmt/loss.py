"""Cross-entropy over real target positions only: padding adds nothing to loss or gradient."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def masked_cross_entropy(generator: nn.Module, outputs: torch.Tensor, tgt_out: torch.Tensor,
                         tgt_mask: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Summed token cross-entropy; the generator runs once over the real positions alone.

    :param outputs: decoder outputs, shape (batch, tgt_len, hidden)
    :param tgt_out: gold next tokens, shape (batch, tgt_len)
    :param tgt_mask: True at real target tokens, shape (batch, tgt_len)
    :return: scalar sum over real tokens; divide by ``tgt_mask.sum()`` for the mean
    """
    real = outputs[tgt_mask]  # (n_tokens, hidden)
    logits = generator(real).float()  # (n_tokens, vocab)
    return F.cross_entropy(logits, tgt_out[tgt_mask], reduction="sum",
                           label_smoothing=label_smoothing)
