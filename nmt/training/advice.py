"""What a run is told as it starts, about settings that would otherwise go quietly wrong: a
budget already spent, a warm-up longer than the run, a validation set too small to choose the
best weights on. Warnings only (:class:`nmt.errors.SettingMessage`, which the CLI shows with
flags): each setting is valid, and a user may mean it."""
from __future__ import annotations

import logging

from nmt.config import TrainConfig
from nmt.errors import SettingMessage
from nmt.training.schedule import noam_factor

log = logging.getLogger(__name__)

SMALL_VALIDATION = 100  # sentences: below this, one sentence moves BLEU by a point or more


def warn_at_start(t: TrainConfig, step: int, budget_left: bool, total_steps: int | None,
                  valid_sentences: int) -> None:
    """Log each warning that applies to a run about to train from optimiser step ``step``."""
    if not budget_left:
        log.warning(SettingMessage(None, None, f"the budget is already reached at step {step:,}: "
                                   "{epochs}, {max_steps} and {max_minutes} count from the run's start; "
                                   "give a larger one to train on", ("epochs", "max_steps", "max_minutes")))
        return
    if t.schedule == "noam" and total_steps is not None and total_steps < t.warmup_steps:
        peak = t.lr * noam_factor(total_steps, t.warmup_steps)
        log.warning(SettingMessage("warmup_steps", t.warmup_steps, f"longer than the {total_steps:,} steps "
                                   f"this run takes, so the learning rate stops at {peak:.3g} and never "
                                   f"reaches {{lr}} {t.lr:g}; give fewer warm-up steps or a larger budget",
                                   ("lr",)))
    if 0 < valid_sentences < SMALL_VALIDATION:
        log.warning(SettingMessage(None, None, f"the validation set has {valid_sentences} sentence(s), so "
                                   "which weights become best.safetensors (the best validation BLEU) is "
                                   "mostly noise; give a validation set of a few hundred sentences "
                                   "({valid_src}/{valid_tgt}, or a larger {valid_size}), or {valid_size} 0 "
                                   "to keep the newest weights as the best",
                                   ("valid_src", "valid_tgt", "valid_size")))
