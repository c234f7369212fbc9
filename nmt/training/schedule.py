"""The optimiser and its learning-rate schedules.

``plateau`` (the GRU's): the rate starts at ``lr`` and the trainer multiplies it by
``lr_decay`` whenever a scheduled validation's loss is no better than the best so far.

``noam`` (Vaswani et al. 2017, section 5.3, the usual Transformer schedule): a linear warm-up
to ``lr`` over ``warmup_steps``, then decay with the inverse square root of the step. Here
``lr`` is the peak rate itself, not the paper's d_model^-0.5 scale: the paper's formula with
scale s is this one with lr = s * (d_model * warmup_steps)^-0.5 (OpenNMT-py's ``-learning_rate
2 -warmup_steps 1000`` at d_model 256 peaks at 3.95e-3).
"""
from __future__ import annotations

import math

import torch

from nmt.models.interface import TranslationModel


def noam_factor(step: int, warmup_steps: int) -> float:
    """The fraction of the peak rate for optimiser step ``step`` (1-based): step / warmup
    while warming up, sqrt(warmup / step) after; 1 at ``warmup_steps``."""
    return min(step / warmup_steps, math.sqrt(warmup_steps / step))


def scheduled_lr(schedule: str, lr: float, warmup_steps: int, step: int) -> float | None:
    """The rate for optimiser step ``step`` under a per-step schedule; None under ``plateau``,
    whose rate changes only at validations (and lives in the optimiser's state)."""
    return lr * noam_factor(step, warmup_steps) if schedule == "noam" else None


def make_optimizer(model: TranslationModel, lr: float, device: torch.device) -> torch.optim.Optimizer:
    """Adam; fused (one kernel for all parameters, not a loop of small ops per tensor) where
    the device has it."""
    return torch.optim.Adam(model.parameters(), lr=lr, fused=device.type in ("cpu", "cuda"))
