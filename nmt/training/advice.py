"""What a run is told as it starts, about settings that would otherwise go quietly wrong: a
budget already spent, a warm-up longer than the run, a validation set too small to choose the
best weights on, more threads than cores. Warnings only (:class:`nmt.errors.SettingMessage`,
which the CLI shows with flags): each setting is valid, and a user may mean it."""
from __future__ import annotations

import logging

from nmt.config import RunConfig
from nmt.errors import SettingMessage
from nmt.runtime.devices import available_cores
from nmt.training.schedule import noam_factor

log = logging.getLogger(__name__)

SMALL_VALIDATION = 100  # sentences: below this, one sentence moves BLEU by a point or more


def warn_at_start(config: RunConfig, step: int, budget_left: bool, total_steps: int | None,
                  valid_sentences: int, processes: int = 1) -> None:
    """Log each warning that applies to a run about to train from optimiser step ``step`` on
    ``processes`` of this machine, with ``valid_sentences`` validation pairs."""
    t = config.train
    if t.threads * processes > available_cores():
        share = f"{available_cores()} CPU core(s)" + (f" shared by {processes} processes" if processes > 1 else "")
        log.warning(SettingMessage("threads", t.threads, f"more threads than the {share}: they wait for each "
                                   "other at every operation (1,000 on 2 cores trained 6x slower); 0 takes "
                                   "one per core"))
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
    _warn_if_small_validation(config, valid_sentences)


def _warn_if_small_validation(config: RunConfig, pairs: int) -> None:
    """best.safetensors is chosen on greedy BLEU over the first ``valid_bleu_size`` validation
    pairs: on a few dozen sentences that choice is mostly noise (24 pairs left 2, and the best
    weights reproduced none of the corpus)."""
    scored = min(pairs, config.train.valid_bleu_size)
    if not 0 < scored < SMALL_VALIDATION:
        return
    noise = (f"so which weights become best.safetensors (the best validation BLEU over {scored} "
             "sentence(s)) is mostly noise")
    if scored < pairs:
        log.warning(SettingMessage("valid_bleu_size", scored, f"{noise}; the validation set has {pairs:,}: "
                                   "score more of it"))
    elif config.data.valid_src:
        log.warning(SettingMessage("valid_src", config.data.valid_src, f"{noise}; give a validation set of a "
                                   "few hundred sentences"))
    else:
        log.warning(SettingMessage("valid_size", None, f"the validation set held out of the corpus has {scored} "
                                   f"pair(s), {noise}; give one of a few hundred sentences ({{valid_src}}/"
                                   "{valid_tgt}, or a larger {valid_size}), or {valid_size} 0 to keep the "
                                   "newest weights as the best", ("valid_src", "valid_tgt", "valid_size")))
