"""What the training loop reports to: progress, validation records and the weights to keep.
The loop decides; a :class:`TrainCallbacks` shows and writes (``nmt train``'s
:class:`nmt.training.run_writer.RunWriter`), or stays silent (this base class, for ``nmt bench``)."""
from __future__ import annotations

import torch

from nmt.models.interface import TranslationModel
from nmt.training.state import TrainState


class TrainCallbacks:
    """What the loop reports. This base class does nothing with it: a process that must stay
    quiet (``nmt bench``'s timed training) uses it as it is."""

    def started(self, state: TrainState, total_steps: int | None, max_minutes: float | None) -> None:
        """Training begins (or resumes) at ``state``; ``total_steps`` None: bound by minutes or
        by validation (the default budget) only."""

    def stepped(self, state: TrainState, loss: float, tokens: int, sentences: int, lr: float,
                grad_norm: float) -> None:
        """An optimiser step was taken on a batch of ``tokens`` target pieces, at learning rate
        ``lr``, with the gradient's norm before clipping ``grad_norm``."""

    def validated(self, state: TrainState, record: dict, samples: list[tuple[str, str, str]]) -> None:
        """A validation ended with these figures (none without a validation set), and a few
        (source, translation, reference) samples of its BLEU set."""

    def save(self, name: str, model: TranslationModel, optimizer: torch.optim.Optimizer | None,
             state: dict) -> None:
        """Keep these weights as ``name`` (``best`` or ``last``; ``last`` with the optimiser)."""

    def keep(self, model: TranslationModel, state: dict, count: int) -> None:
        """Keep these weights as one of the last ``count`` validations' (``state`` has the step)."""

    def averaged(self, count: int) -> tuple[list[int], dict[str, torch.Tensor]] | None:
        """The mean of the last ``count`` kept validations' weights (``model.``-prefixed, as a
        checkpoint holds them) and their steps; None when fewer than two are kept."""
        return None

    def save_average(self, model: TranslationModel, state: dict) -> None:
        """Keep ``model``'s weights, an average, as ``averaged``."""

    def prune_kept(self, keep: int) -> None:
        """Keep only the last ``keep`` validations' weights (those the run was asked to keep)."""

    def finished(self, state: TrainState) -> None:
        """Training ended, its last checkpoint saved (also after an error)."""
