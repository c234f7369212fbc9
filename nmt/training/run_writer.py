"""What ``nmt train`` shows and writes while the loop runs: the progress display, metrics.jsonl,
curve.png and the checkpoints, all in the run directory.

It is the one place that decides what a training process puts on the terminal and on disk;
a process that must not (``nmt bench``, or every worker but one when training is spread over
several) gets :class:`nmt.training.trainer.TrainCallbacks` itself, which does nothing.
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch

from nmt.errors import NmtError
from nmt.models.interface import TranslationModel
from nmt.report.plotting import plot_training_curve
from nmt.report.progress import TrainProgress
from nmt.runtime import checkpoint
from nmt.runtime.averaging import mean_of
from nmt.runtime.checkpoint import read_header
from nmt.runtime.weights import KEPT, kept_path, kept_steps
from nmt.training.state import TrainState, read_metrics
from nmt.training.tensorboard import TensorBoardLog, check_folder
from nmt.training.callbacks import TrainCallbacks


class RunWriter(TrainCallbacks):
    """Shows progress on the terminal and writes the run directory ``run_dir``."""

    def __init__(self, run_dir: Path, tensorboard: bool = False) -> None:
        self.run_dir, self.tensorboard = run_dir, tensorboard
        if tensorboard:
            check_folder(run_dir)
        self.progress: TrainProgress | None = None
        self.board: TensorBoardLog | None = None
        self.seconds_before = 0.0

    def started(self, state: TrainState, total_steps: int | None, max_minutes: float | None) -> None:
        if self.tensorboard:
            self.board = TensorBoardLog(self.run_dir, state)
        self.seconds_before = state.step_seconds  # the step time so far: a step's own is the difference
        self.progress = TrainProgress(total_steps, max_minutes).__enter__()
        self.progress.update(state)

    def stepped(self, state: TrainState, loss: float, tokens: int, sentences: int, lr: float,
                grad_norm: float) -> None:
        if self.board is not None:
            self.board.step(state, loss, tokens, lr, grad_norm, state.step_seconds - self.seconds_before)
        self.seconds_before = state.step_seconds
        self.progress.step(state, loss, tokens, sentences)

    def validated(self, state: TrainState, record: dict, samples: list[tuple[str, str, str]]) -> None:
        """Append to metrics.jsonl and redraw curve.png from all records so far."""
        path = self.run_dir / "metrics.jsonl"
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        except OSError as e:
            raise NmtError(f"{path}: cannot write ({e.strerror})") from None
        plot_training_curve(read_metrics(path), self.run_dir / "curve.png")
        if self.board is not None:
            self.board.validation(state, record, samples)
        if self.progress is not None:
            self.progress.update(state)

    def save(self, name: str, model: TranslationModel, optimizer: torch.optim.Optimizer | None,
             state: dict) -> None:
        checkpoint.save(self.run_dir / f"{name}.safetensors", model, optimizer, state)

    def keep(self, model: TranslationModel, state: dict, count: int) -> None:
        """checkpoints/step-K.safetensors, then the oldest beyond ``count`` deleted (each file
        is written whole or not at all, and removed in one unlink). The folder is the count's
        memory, so it survives a resume."""
        (self.run_dir / KEPT).mkdir(exist_ok=True)
        checkpoint.save(kept_path(self.run_dir, state["step"]), model, None, state)
        for step in kept_steps(self.run_dir)[:-count]:
            kept_path(self.run_dir, step).unlink(missing_ok=True)

    def averaged(self, count: int) -> tuple[list[int], dict[str, torch.Tensor]] | None:
        steps = kept_steps(self.run_dir)[-count:]
        if len(steps) < 2:
            return None
        paths = [kept_path(self.run_dir, step) for step in steps]
        return steps, mean_of(paths, [key for key in read_header(paths[0])[0] if key.startswith("model.")])

    def save_average(self, model: TranslationModel, state: dict) -> None:
        checkpoint.save(self.run_dir / "averaged.safetensors", model, None, state)

    def prune_kept(self, keep: int) -> None:
        if not (self.run_dir / KEPT).is_dir():
            return
        steps = kept_steps(self.run_dir)
        for step in steps[:len(steps) - keep]:
            kept_path(self.run_dir, step).unlink(missing_ok=True)
        if not keep:
            with contextlib.suppress(OSError):  # kept files of the user's own in it stay
                (self.run_dir / KEPT).rmdir()

    def finished(self, state: TrainState) -> None:
        if self.board is not None:
            self.board.close()
            self.board = None
        if self.progress is not None:
            self.progress.update(state)
            self.progress.__exit__(None, None, None)
            self.progress = None
