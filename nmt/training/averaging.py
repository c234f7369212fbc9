"""The end of a run: the mean of its last validations' weights (as OpenNMT-py's and fairseq's
checkpoint averaging), scored on the validation BLEU set as every validation is, and saved as
``averaged``: the run's default weights where it scores higher than best (run.json,
:mod:`nmt.runtime.weights`). docs/choices.md, "Averaging at the end"."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from nmt.config import TrainConfig
from nmt.models.interface import TranslationModel
from nmt.runtime.checkpoint import load_model_weights
from nmt.training.callbacks import TrainCallbacks
from nmt.training.distributed import Processes
from nmt.training.state import TrainState

log = logging.getLogger(__name__)


def kept_count(train: TrainConfig, validated: bool) -> int:
    """Validations whose weights a run keeps: those asked for, and those the end's average
    needs (none without a validation set to score it on)."""
    return max(train.keep_checkpoints, train.average_last if validated else 0)


def average_last(model: TranslationModel, train: TrainConfig, state: TrainState, callbacks: TrainCallbacks,
                 processes: Processes, valid_bleu: Callable[[], float] | None) -> dict | None:
    """Average the last ``train.average_last`` validations' weights (which ``callbacks`` kept)
    into ``model``, score them with ``valid_bleu`` (None: no validation set) and save them; their
    steps and validation BLEU, or None when there are fewer than two. Every rank takes part:
    rank 0 reads the kept files, the others get the mean."""
    if train.average_last < 2 or valid_bleu is None:
        return None
    averaged = processes.broadcast(callbacks.averaged(train.average_last))
    if averaged is None:
        return None
    steps, tensors = averaged
    load_model_weights(model, tensors, Path("the average of the kept weights"))
    score, s = valid_bleu(), state
    log.info("the average of the last %d validations' weights (steps %s): validation BLEU %.2f, best %.2f "
             "(step %d); the default weights are %s", len(steps), ", ".join(map(str, steps)), score,
             s.best_bleu, s.best_bleu_step, "the average" if score > s.best_bleu else "best")
    callbacks.save_average(model, {"averaged_steps": steps, "valid_bleu": score, "run_id": s.run_id})
    return {"steps": steps, "valid_bleu": score}
