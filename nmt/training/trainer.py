"""The training loop: teacher forcing, masked loss, Adam, clipping, validation, checkpoints.

Training stops at the first budget reached (epochs, total steps or wall-clock minutes, all
counted from the run's start, across resumes), or on SIGINT/SIGTERM, after saving.

The loop computes and decides; it shows and writes nothing itself. It reports to a
:class:`TrainCallbacks` (progress, validation records, checkpoints to keep), so that what is
shown and written, and by which process, is decided in one place: :class:`nmt.training.run_writer.RunWriter`
for ``nmt train``, the silent base class for ``nmt bench``.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import random
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch

from nmt.config import RunConfig
from nmt.data.batching import Batch, bucket_batches, make_batch
from nmt.data.prepare import RunData
from nmt.errors import NmtError
from nmt.inference.metrics import bleu
from nmt.inference.translate import Translator
from nmt.models.interface import TranslationModel
from nmt.models.kernels import use_kernels
from nmt.models.loss import batch_loss
from nmt.runtime.devices import autocast, describe, release_freed_memory
from nmt.runtime.fileio import atomic_write_text
from nmt.training.schedule import scheduled_lr

log = logging.getLogger(__name__)

MIN_VALID_GAP = 200  # steps; epochs shorter than this are validated every few epochs


@dataclass
class TrainState:
    """Everything besides weights, optimiser and RNG that a resumed run needs (JSON-able)."""

    step: int = 0
    epoch: int = 0  # epochs completed
    batch_in_epoch: int = 0  # batches of the current epoch done
    elapsed: float = 0.0  # seconds of training and validation so far, across resumes
    step_seconds: float = 0.0  # seconds inside optimiser steps alone, for throughput
    best_bleu: float = -1.0
    best_bleu_step: int = 0
    best_loss: float = math.inf  # of scheduled validations, for the lr decay
    stale_validations: int = 0  # scheduled validations since BLEU last improved
    best_scheduled_bleu: float = -1.0  # patience compares scheduled validations only
    target_tokens: int = 0
    sentences: int = 0
    scaler: dict = dataclasses.field(default_factory=dict)  # loss-scaler state (CUDA only)

    @classmethod
    def restore(cls, saved: dict, path: Path) -> TrainState:
        """The state saved in checkpoint ``path``, each field checked for its type and sign."""
        defaults = dataclasses.asdict(cls())
        for key, value in saved.items():
            if key not in defaults or not _fits(value, defaults[key]):
                raise NmtError(f"{path}: damaged training state ({key}: {value!r})")
        scaler = saved.get("scaler", {})
        if scaler and (scaler.keys() != _SCALER_KEYS or not all(_fits(v, 0.0) for v in scaler.values())):
            raise NmtError(f"{path}: damaged training state (scaler: {scaler!r})")
        return cls(**saved)


_SCALER_KEYS = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}


def _fits(value: object, default: object) -> bool:
    """Whether a JSON value can stand for a field with ``default``: a count for an int, any
    number for a float, the same type otherwise."""
    if isinstance(value, bool) or isinstance(default, bool):
        return type(value) is type(default)
    if isinstance(default, int):
        return isinstance(value, int) and value >= 0
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))


def make_optimizer(model: TranslationModel, lr: float, device: torch.device) -> torch.optim.Optimizer:
    """Adam; fused (one kernel for all parameters, not a loop of small ops per tensor) where
    the device has it."""
    return torch.optim.Adam(model.parameters(), lr=lr, fused=device.type in ("cpu", "cuda"))


class TrainCallbacks:
    """What the loop reports. This base class does nothing with it: a process that must stay
    quiet (``nmt bench``'s timed training) uses it as it is."""

    def started(self, state: TrainState, total_steps: int | None, max_minutes: float | None) -> None:
        """Training begins (or resumes) at ``state``; ``total_steps`` None: bound by minutes only."""

    def stepped(self, state: TrainState, loss: float, tokens: int, sentences: int) -> None:
        """An optimiser step was taken on a batch of ``tokens`` target pieces."""

    def validated(self, state: TrainState, record: dict) -> None:
        """A validation ended with these figures (none without a validation set)."""

    def save(self, name: str, model: TranslationModel, optimizer: torch.optim.Optimizer | None,
             state: dict) -> None:
        """Keep these weights as ``name`` (``best`` or ``last``; ``last`` with the optimiser)."""

    def finished(self, state: TrainState) -> None:
        """Training ended, its last checkpoint saved (also after an error)."""


class Trainer:
    """Trains ``model`` on ``data`` under ``config``, reporting to ``callbacks``."""

    def __init__(self, config: RunConfig, model: TranslationModel, data: RunData,
                 device: torch.device, callbacks: TrainCallbacks, state: TrainState | None = None,
                 optimizer: torch.optim.Optimizer | None = None) -> None:
        self.t = config.train
        self.model, self.data, self.device = use_kernels(model, self.t.kernels), data, device
        self.callbacks = callbacks
        self.state = state or TrainState()
        self.optimizer = optimizer or make_optimizer(model, self.t.lr, device)
        # float16 autocast on CUDA needs loss scaling; elsewhere the scaler is a no-op.
        self.scaler = torch.amp.GradScaler(device.type, enabled=device.type == "cuda")
        if self.state.scaler:
            self.scaler.load_state_dict(self.state.scaler)
        self.stop_reason: str | None = None  # set by a signal, a bad loss or early stopping
        self.last_valid_step = self.state.step
        self.loss_since_valid: list[float] = []
        self.valid = data.split.valid
        self.valid_src = data.tokenizer.encode([s for s, _ in self.valid])
        self.valid_tgt = data.tokenizer.encode([t for _, t in self.valid])
        release_freed_memory()  # what preparing the data freed

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def batches_of_epoch(self, epoch: int) -> list[list[int]]:
        """The epoch's batch order: a pure function of seed and epoch, so resumes replay it."""
        src_lens, tgt_lens = self.data.train_src.lengths(), self.data.train_tgt.lengths()
        rng = random.Random(self.t.seed * 1_000_003 + epoch)
        return bucket_batches(src_lens, tgt_lens, self.t.batch_size, self.t.batch_tokens, rng)

    def train_step(self, batch: Batch) -> float:
        """One optimiser step on the mean loss per real target token; returns that loss.

        A non-finite loss takes no step, so the weights stay the last good ones.
        """
        n_tokens = batch.n_tokens
        batch = batch.to(self.device)
        with autocast(self.device):
            loss = batch_loss(self.model, batch, self.t.label_smoothing) / n_tokens
        value = loss.item()
        if not math.isfinite(value):
            self.stop_reason = f"non-finite loss ({value}) at step {self.state.step + 1}"
            return value
        self.optimizer.zero_grad(set_to_none=True)
        self._set_lr(self.state.step + 1)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)  # clip the true gradients, not the scaled ones
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.t.clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return value

    def _set_lr(self, step: int) -> None:
        """A per-step schedule's rate for this step: a pure function of the step, so a resumed
        run follows the same course."""
        lr = scheduled_lr(self.t.schedule, self.t.lr, self.t.warmup_steps, step)
        if lr is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = lr

    def budget_left(self) -> bool:
        t, s = self.t, self.state
        if s.epoch >= t.epoch_limit or (t.max_steps is not None and s.step >= t.max_steps):
            return False
        return t.max_minutes is None or s.elapsed < t.max_minutes * 60

    def total_steps(self, steps_per_epoch: int) -> int | None:
        """Steps the budget allows, or None when only minutes bound it."""
        total = min(self.t.epoch_limit * steps_per_epoch, self.t.max_steps or math.inf)
        return int(total) if math.isfinite(total) else None

    def validation_due(self, epoch_done: bool, epoch_steps: int) -> bool:
        """Whether to validate after the step just taken (a pure function of the step count,
        so a resumed run validates where an uninterrupted one would).

        With ``valid_every`` 0: at the end of each epoch, but only once a multiple of
        MIN_VALID_GAP steps has passed, so a tiny corpus (one-step epochs) is not validated
        at every step, nor its learning rate halved on every noisy validation.
        """
        step, every = self.state.step, self.t.valid_every
        if every:
            return step % every == 0
        return epoch_done and step // MIN_VALID_GAP > (step - epoch_steps) // MIN_VALID_GAP

    def run(self) -> TrainState:
        """Train until a budget, early stopping, a bad loss or a stop signal; returns the state."""
        log.info("training on %s from step %d", describe(self.device), self.state.step)
        self.model.train()
        steps_per_epoch = len(self.batches_of_epoch(0))
        self.callbacks.started(self.state, self.total_steps(steps_per_epoch), self.t.max_minutes)
        try:
            with _stop_signals(self):
                while self.budget_left() and not self.stop_reason:
                    self._run_epoch()
            if self.stop_reason:
                log.warning("stopping: %s; the last checkpoint is step %d", self.stop_reason,
                            self.state.step)
            elif self.last_valid_step != self.state.step:
                self.validate(scheduled=False)
            self.save_last()
        finally:
            self.callbacks.finished(self.state)
        return self.state

    def _run_epoch(self) -> None:
        """Train the rest of the current epoch, validating on schedule.

        Counters advance with every step taken, and an epoch's end is booked right after its
        last step, before any budget or signal check, so a saved state is always consistent.
        """
        s, batches = self.state, self.batches_of_epoch(self.state.epoch)
        while s.batch_in_epoch < len(batches):
            start = time.monotonic()
            index = batches[s.batch_in_epoch]
            batch = make_batch([self.data.train_src[i] for i in index],
                               [self.data.train_tgt[i] for i in index])
            loss = self.train_step(batch)
            if not math.isfinite(loss):
                return
            self.loss_since_valid.append(loss)
            s.step, s.batch_in_epoch = s.step + 1, s.batch_in_epoch + 1
            s.target_tokens, s.sentences = s.target_tokens + batch.n_tokens, s.sentences + len(index)
            took = time.monotonic() - start
            s.elapsed, s.step_seconds = s.elapsed + took, s.step_seconds + took
            self.callbacks.stepped(s, loss, batch.n_tokens, len(index))
            epoch_done = s.batch_in_epoch == len(batches)
            if epoch_done:
                s.epoch, s.batch_in_epoch = s.epoch + 1, 0
            if self.validation_due(epoch_done, len(batches)):
                self._timed_validate()
            if epoch_done or not self.budget_left() or self.stop_reason:
                return  # a new epoch starts from its own batch order

    def _timed_validate(self) -> None:
        start = time.monotonic()
        self.validate(scheduled=True)
        self.state.elapsed += time.monotonic() - start

    @torch.inference_mode()
    def valid_loss(self) -> float:
        """Mean cross-entropy (no smoothing) per target token on the validation pairs."""
        self.model.eval()
        total, tokens = 0.0, 0
        for k in range(0, len(self.valid_src), 256):
            batch = make_batch(self.valid_src[k:k + 256], self.valid_tgt[k:k + 256]).to(self.device)
            total += float(batch_loss(self.model, batch))
            tokens += batch.n_tokens
        self.model.train()
        return total / max(tokens, 1)

    def validate(self, scheduled: bool) -> dict[str, float]:
        """Validation loss and greedy BLEU; keeps the best weights.

        Only scheduled validations decay the learning rate and count towards patience, so
        the extra one at the end of a budget leaves a resumed run on the same course.
        """
        s = self.state
        self.last_valid_step = s.step
        if not self.valid:  # nothing to select on: the newest weights are the best we know
            self.callbacks.save("best", self.model, None, {"step": s.step})
            self.save_last()
            return {}
        loss = self.valid_loss()
        subset = self.valid[:self.t.valid_bleu_size]
        hyps = Translator(self.model, self.data.tokenizer, self.device).translate(
            [src for src, _ in subset], batch_size=128)
        score = bleu(hyps, [tgt for _, tgt in subset]).score
        train_loss = sum(self.loss_since_valid) / max(len(self.loss_since_valid), 1)
        self.loss_since_valid = []
        record = {"step": s.step, "epoch": s.epoch, "train_loss": round(train_loss, 4),
                  "valid_loss": round(loss, 4), "valid_ppl": round(math.exp(min(loss, 50)), 2),
                  "valid_bleu": round(score, 2), "lr": self.lr, "elapsed_s": round(s.elapsed, 1),
                  "train_tokens_per_s": round(s.target_tokens / max(s.step_seconds, 1e-9), 1)}
        log.info("step %d  valid loss %.3f  ppl %.2f  BLEU %.2f  lr %.2g", s.step, loss,
                 record["valid_ppl"], score, self.lr)
        self.callbacks.validated(s, record)
        if scheduled:
            self._schedule(loss, score)
        self.save_best_if(score)
        self.save_last()
        return record

    def _schedule(self, loss: float, score: float) -> None:
        """Decay the lr when validation loss stalls (the plateau schedule); stop early when
        BLEU stalls too long."""
        s = self.state
        if loss >= s.best_loss and self.t.lr_decay < 1 and self.t.schedule == "plateau":
            for group in self.optimizer.param_groups:
                group["lr"] *= self.t.lr_decay
        s.best_loss = min(s.best_loss, loss)
        s.stale_validations = 0 if score > s.best_scheduled_bleu else s.stale_validations + 1
        s.best_scheduled_bleu = max(s.best_scheduled_bleu, score)
        if self.t.patience and s.stale_validations >= self.t.patience:
            self.stop_reason = (f"early stopping: validation BLEU has not improved for "
                                f"{s.stale_validations} validations")

    def save_best_if(self, score: float) -> None:
        """Keep the weights with the best validation BLEU; on a tie the newer, more trained ones."""
        s = self.state
        if score >= s.best_bleu:
            s.best_bleu, s.best_bleu_step = score, s.step
            self.callbacks.save("best", self.model, None, {"step": s.step, "valid_bleu": score})

    def save_last(self) -> None:
        self.state.scaler = self.scaler.state_dict()
        self.callbacks.save("last", self.model, self.optimizer, dataclasses.asdict(self.state))


_METRIC_KEYS = ("step", "valid_loss", "valid_bleu")


def _metric(line: bytes) -> dict | None:
    """One validation record, or None for a line that is not one (cut short by a crash, damaged)."""
    try:
        record = json.loads(line)
    except ValueError:  # also invalid UTF-8
        return None
    ok = isinstance(record, dict) and all(isinstance(record.get(k), (int, float)) for k in _METRIC_KEYS)
    return record if ok else None


def read_metrics(path: Path) -> list[dict]:
    """The validation records of a run; lines that are not records are skipped with a warning."""
    lines = path.read_bytes().splitlines() if path.is_file() else []
    records = [r for r in map(_metric, lines) if r is not None]
    if len(records) < len(lines):
        log.warning("%s: skipped %d damaged lines", path, len(lines) - len(records))
    return records


def trim_metrics(path: Path, step: int) -> None:
    """Before a resume appends to ``path``: drop a line cut short by a crash and the records of
    validations after the checkpoint's ``step`` (the resumed run validates there again)."""
    if not path.is_file():
        return
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    kept = [line for line in lines if line.endswith(b"\n") and (r := _metric(line)) is not None
            and r["step"] <= step]
    if len(kept) < len(lines):
        log.warning("%s: dropped %d damaged or later lines before resuming", path, len(lines) - len(kept))
        atomic_write_text(path, b"".join(kept).decode("utf-8"))


@contextmanager
def _stop_signals(trainer: Trainer) -> Iterator[None]:
    """SIGINT/SIGTERM ask the loop to stop after the current step (and save)."""
    def handler(signum: int, _frame: object) -> None:
        trainer.stop_reason = f"{signal.Signals(signum).name} received"

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
