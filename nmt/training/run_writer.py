"""What ``nmt train`` shows and writes while the loop runs: the progress display, metrics.jsonl,
curve.png and the checkpoints, all in the run directory.

It is the one place that decides what a training process puts on the terminal and on disk;
a process that must not (``nmt bench``, or every worker but one when training is spread over
several) gets :class:`nmt.training.trainer.TrainCallbacks` itself, which does nothing.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from nmt.errors import NmtError
from nmt.models.interface import TranslationModel
from nmt.report.plotting import plot_training_curve
from nmt.report.progress import TrainProgress
from nmt.runtime import checkpoint
from nmt.training.state import TrainState, read_metrics
from nmt.training.trainer import TrainCallbacks


class RunWriter(TrainCallbacks):
    """Shows progress on the terminal and writes the run directory ``run_dir``."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.progress: TrainProgress | None = None

    def started(self, state: TrainState, total_steps: int | None, max_minutes: float | None) -> None:
        self.progress = TrainProgress(total_steps, max_minutes).__enter__()
        self.progress.update(state)

    def stepped(self, state: TrainState, loss: float, tokens: int, sentences: int) -> None:
        self.progress.step(state, loss, tokens, sentences)

    def validated(self, state: TrainState, record: dict) -> None:
        """Append to metrics.jsonl and redraw curve.png from all records so far."""
        path = self.run_dir / "metrics.jsonl"
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        except OSError as e:
            raise NmtError(f"{path}: cannot write ({e.strerror})") from None
        plot_training_curve(read_metrics(path), self.run_dir / "curve.png")
        if self.progress is not None:
            self.progress.update(state)

    def save(self, name: str, model: TranslationModel, optimizer: torch.optim.Optimizer | None,
             state: dict) -> None:
        checkpoint.save(self.run_dir / f"{name}.safetensors", model, optimizer, state)

    def finished(self, state: TrainState) -> None:
        if self.progress is not None:
            self.progress.update(state)
            self.progress.__exit__(None, None, None)
            self.progress = None
