"""The training loop: teacher forcing, masked loss, Adam, clipping, validation, checkpoints.

Training stops at the first budget reached (epochs, total steps or wall-clock minutes, all
counted from the run's start, across resumes), or on SIGINT/SIGTERM, after saving.

The loop computes and decides; it shows and writes nothing itself. It reports to a
:class:`TrainCallbacks` (progress, validation records, checkpoints to keep), so that what is
shown and written, and by which process, is decided in one place: :class:`nmt.training.run_writer.RunWriter`
for ``nmt train``, the silent base class for ``nmt bench``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import math
import signal
import time
import uuid
from typing import Iterator

import numpy as np
import torch

from nmt.config import RunConfig
from nmt.data.batching import BatchPlan, bucket_batches, make_batch, split_passes, weighted_pairs
from nmt.data.prepare import RunData
from nmt.data.segmentation import Sides, TrainingPairs
from nmt.inference.metrics import bleu
from nmt.inference.translate import Translator
from nmt.models.interface import TranslationModel
from nmt.models.kernels import use_kernels
from nmt.models.loss import batch_loss
from nmt.runtime.allocator import release_freed_memory
from nmt.runtime.devices import describe
from nmt.runtime.precision import autocast, needs_loss_scaling, resolve
from nmt.training.advice import warn_at_start
from nmt.training.averaging import average_last, kept_count
from nmt.training.callbacks import TrainCallbacks
from nmt.training.distributed import Processes, lost_peers, no_sync
from nmt.training.schedule import make_optimizer, scheduled_lr
from nmt.training.state import TrainState

log = logging.getLogger(__name__)

VALID_BATCH_TOKENS = 4096  # padded target pieces a validation-loss batch holds at most
MIN_VALID_GAP = 200  # steps; epochs shorter than this are validated every few epochs
# Steps between handing the heap's free pages back to the OS. Each batch length frees blocks
# of new sizes, and what the heap keeps free grows through a run (docs/performance.md, "A
# whole run under 1 GB"). A release took 0.19-0.28 s at the reference size, then with a full
# garbage collection (about 0.1 s) that it no longer runs: a step takes 0.4 s.
RELEASE_EVERY = 50


SAMPLES = 4  # validation translations shown beside the figures (TensorBoard)


class Trainer:
    """Trains ``model`` on ``data`` under ``config``, reporting to ``callbacks``, as one of
    ``processes`` (:mod:`nmt.training.distributed`; by default a process alone).

    Every decision that ends or shapes the run (a stop signal, a non-finite loss, the time
    budget, validation scores) is taken from figures all ranks agree on, so they stop together.
    """

    def __init__(self, config: RunConfig, model: TranslationModel, data: RunData,
                 device: torch.device, callbacks: TrainCallbacks, state: TrainState | None = None,
                 optimizer: torch.optim.Optimizer | None = None, processes: Processes = Processes()) -> None:
        self.config, self.t = config, config.train
        self.model, self.data, self.device = use_kernels(model, self.t.kernels), data, device
        self.processes = processes
        self.replica = processes.replicate(self.model)  # what the forward pass runs through
        self.callbacks = callbacks
        self.state = state or TrainState()
        self.state.run_id = self.state.run_id or uuid.uuid4().hex  # runs from before run ids get one
        self.optimizer = optimizer or make_optimizer(model, self.t.lr, device)
        self.precision = resolve(self.t.precision, device, config.model.arch)
        self.scaler = torch.amp.GradScaler(device.type, enabled=needs_loss_scaling(self.precision))
        if self.state.scaler:
            self.scaler.load_state_dict(self.state.scaler)
        self.stop_reason: str | None = None  # agreed: a signal, a bad loss or early stopping
        self.early_stopped = False  # the stop reason is early stopping: the run ended, not broke off
        self.average: dict | None = None  # the end's average (nmt/training/averaging.py)
        self.signal: int = 0  # a stop signal this process received, not yet agreed on
        self.step_seconds = 0.0  # the last step's, as the ranks agree
        self.step_tokens = 0  # the last step's target pieces, over all ranks
        self.clock = time.monotonic()  # the last step's end: the next one's time counts from it
        self.steps_taken = 0  # by this trainer, for RELEASE_EVERY
        self.last_valid_step = self.state.step
        self.loss_since_valid: list[float] = []
        self.grad_norm = 0.0  # the last step's, before clipping
        self.samples: list[tuple[str, str, str]] = []  # the last validation's first translations
        self.src_lens, self.tgt_lens = data.train_src.lengths(), data.train_tgt.lengths()  # (pairs,), mapped
        self.pairs = TrainingPairs(data, self.t.subword_alpha, self.t.subword_nbest, self.t.seed,
                                   config.data.max_pieces, self.t.source_word_dropout)
        self._plan: tuple[int, BatchPlan] | None = None  # the last epoch's, which every step reads
        self.valid = data.valid
        self.valid_src = data.tokenizer.encode([s for s, _ in self.valid])
        self.valid_tgt = data.tokenizer.encode([t for _, t in self.valid])
        gc.collect()  # what preparing the data left in reference cycles, then all it freed
        release_freed_memory()

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def batches_of_epoch(self, epoch: int) -> BatchPlan:
        """The epoch's batch order: a pure function of seed and epoch, so resumes replay it."""
        if self._plan is None or self._plan[0] != epoch:
            rng = np.random.default_rng(self.t.seed * 1_000_003 + epoch)
            corpora = [(c["start"], c["train"], c["weight"]) for c in self.data.manifest.corpora]
            self._plan = epoch, bucket_batches(self.src_lens, self.tgt_lens, self.t.batch_size, self.t.batch_tokens,
                                               rng, pairs=weighted_pairs(corpora, rng))
        return self._plan[1]

    def train_step(self, group: list[list[int]]) -> float | None:
        """One optimiser step on ``group``: global batches of corpus indices (``accum`` of
        them; fewer at an epoch's end), of which this rank runs its share. The gradient is that
        of the mean loss per real target token over the whole group, for any number of ranks.

        Returns that loss, or None when no step was taken: a non-finite loss, or (without loss
        scaling, which skips such steps itself) a non-finite gradient, leaves the weights the
        last good ones and stops the run. Ranks agree on these and on stop signals: the loss
        is summed over them, the gradient all-reduced.
        """
        world = self.processes.world
        batches = self._draw(group)
        tokens = sum(len(t) + 1 for _, tgt in batches for t in tgt)  # + EOS
        self.step_tokens = tokens
        self.optimizer.zero_grad(set_to_none=True)
        passes = [(part, weight) for sides in batches for part, weight in self._passes(sides, world / tokens)]
        loss_sum = 0.0
        for k, (part, weight) in enumerate(passes):
            with no_sync(self.replica) if k < len(passes) - 1 else contextlib.nullcontext():
                loss_sum += self._backward(part, weight)
        now = time.monotonic()
        loss_sum, signals, seconds = self.processes.sum([loss_sum, float(self.signal), now - self.clock])
        self.clock, self.step_seconds = now, seconds / world
        if signals:
            name = signal.Signals(self.signal).name if self.signal else "a stop signal to another process"
            self.stop_reason = f"{name} received"
        loss = loss_sum / tokens
        if not math.isfinite(loss):
            self.stop_reason = f"non-finite loss ({loss}) at step {self.state.step + 1}"
            return None
        self._set_lr(self.state.step + 1)
        self.scaler.unscale_(self.optimizer)  # clip the true gradients, not the scaled ones
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.t.clip)
        self.grad_norm = float(norm)
        if not self.scaler.is_enabled() and not math.isfinite(norm):
            self.stop_reason = f"non-finite gradient (loss {loss:.4g}) at step {self.state.step + 1}"
            return None
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.steps_taken += 1
        if self.steps_taken % RELEASE_EVERY == 0:
            release_freed_memory()
        return loss

    def _draw(self, group: list[list[int]]) -> list[Sides]:
        """Each global batch's pairs as this step reads them (:class:`TrainingPairs`)."""
        src, tgt = self.pairs.draw([i for index in group for i in index], self.state.step + 1)
        bounds = np.cumsum([0] + [len(index) for index in group])
        return [(src[a:b], tgt[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]

    def _passes(self, sides: Sides, weight: float) -> list[tuple[Sides, float]]:
        """This rank's share of a global batch's pairs, as forward passes of at most
        ``max_pass_pieces`` padded pieces, each with the weight of its summed loss.

        A rank whose share is empty runs one sentence at weight 0, since every rank must take
        part in the gradients' all-reduce.
        """
        (src, tgt), mine = sides, self.processes.shard(list(range(len(sides[0]))))
        if not mine:
            return [((src[:1], tgt[:1]), 0.0)]
        src_lens, tgt_lens = (np.fromiter(map(len, side), dtype=np.int32, count=len(side)) for side in sides)
        pieces = self.t.max_pass_pieces
        if self.t.rdrop_alpha and pieces:  # R-Drop's pass holds each sentence twice
            pieces = max(1, pieces // 2)
        parts = split_passes(mine, src_lens, tgt_lens, pieces)
        return [(([src[k] for k in part], [tgt[k] for k in part]), weight) for part in parts]

    def _backward(self, sides: Sides, weight: float) -> float:
        """Forward and backward over the pairs ``sides`` (sources' and targets' ids), the summed
        loss weighted by ``weight``; returns the (unweighted) summed loss."""
        batch = make_batch(*sides).to(self.device)
        with autocast(self.device, self.precision):
            loss = batch_loss(self.model, batch, self.t.label_smoothing, forward=self.replica,
                              rdrop_alpha=self.t.rdrop_alpha)
        with lost_peers():
            self.scaler.scale(loss * weight).backward()
        return loss.item() if weight else 0.0

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
        """Steps the budget allows, or None when only minutes bound it, or validation does
        (the default budget's epochs are a cap, not an estimate)."""
        if self.t.default_budget:
            return None
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
        world = self.processes.world
        self.model.train()
        steps_per_epoch = math.ceil(len(self.batches_of_epoch(0)) / self.t.accum)
        log.info("training on %s%s at %s from step %d; budget: %s", describe(self.device),
                 f" x {world} processes" if world > 1 else "", self.precision, self.state.step,
                 self.t.budget_text())
        if self.processes.is_main:
            warn_at_start(self.config, self.state.step, self.budget_left(), self.total_steps(steps_per_epoch),
                          len(self.valid), self.processes.local_world)
        self.callbacks.started(self.state, self.total_steps(steps_per_epoch), self.t.max_minutes)
        try:
            with _stop_signals(self):  # a signal during the end's validation or average waits for it
                while self.budget_left() and not self.stop_reason:
                    self._run_epoch()
                self._end()
        finally:
            self.callbacks.finished(self.state)
        return self.state

    def _end(self) -> None:
        """Validate and save the last weights; when the run ended (a budget, early stopping),
        average its last validations' (after a signal or a bad loss they wait for the resume)."""
        if self.stop_reason:  # every rank stops here; rank 0 says so
            (log.warning if self.processes.is_main else log.info)(
                "stopping: %s; the last checkpoint is step %d", self.stop_reason, self.state.step)
        elif self.last_valid_step != self.state.step:
            self.validate(scheduled=False)
        self.save_last()
        if not self.stop_reason or self.early_stopped:
            self.average = average_last(self.model, self.t, self.state, self.callbacks, self.processes,
                                        self.valid_bleu if self.valid else None)
            self.callbacks.prune_kept(self.t.keep_checkpoints)

    def _run_epoch(self) -> None:
        """Train the rest of the current epoch, validating on schedule.

        Counters advance with every step taken, and an epoch's end is booked right after its
        last step, before any budget or signal check, so a saved state is always consistent.
        """
        s, batches = self.state, self.batches_of_epoch(self.state.epoch)
        self.clock = time.monotonic()
        while s.batch_in_epoch < len(batches):
            group = batches[s.batch_in_epoch:s.batch_in_epoch + self.t.accum]
            loss = self.train_step(group)
            if loss is None:
                return
            self.loss_since_valid.append(loss)
            tokens = self.step_tokens
            sentences = sum(len(index) for index in group)
            s.step, s.batch_in_epoch = s.step + 1, s.batch_in_epoch + len(group)
            s.target_tokens, s.sentences = s.target_tokens + tokens, s.sentences + sentences
            s.elapsed, s.step_seconds = s.elapsed + self.step_seconds, s.step_seconds + self.step_seconds
            self.callbacks.stepped(s, loss, tokens, sentences, self.lr, self.grad_norm)
            epoch_done = s.batch_in_epoch == len(batches)
            if epoch_done:
                s.epoch, s.batch_in_epoch = s.epoch + 1, 0
            if self.validation_due(epoch_done, math.ceil(len(batches) / self.t.accum)):
                self._timed_validate()
            if epoch_done or not self.budget_left() or self.stop_reason:
                return  # a new epoch starts from its own batch order

    def _timed_validate(self) -> None:
        """Validate; the time counts towards the budget, as all ranks agree on it."""
        start = time.monotonic()
        self.validate(scheduled=True)
        took = self.processes.sum([time.monotonic() - start])[0] / self.processes.world
        self.state.elapsed += took
        self.clock = time.monotonic()  # the next step's time starts now

    @torch.inference_mode()
    def valid_loss(self) -> float:
        """Mean cross-entropy (no smoothing) per target token on the validation pairs (each
        rank scores its share of the batches), in length-sorted batches of at most
        :data:`VALID_BATCH_TOKENS` padded target pieces: in the set's own order one long
        sentence padded 255 others, and a batch's logits alone took up to half a gigabyte."""
        self.model.eval()
        total, tokens = 0.0, 0
        lengths = np.array([len(t) for t in self.valid_tgt], dtype=np.int32)
        plan = bucket_batches(lengths, lengths, 256, VALID_BATCH_TOKENS, np.random.default_rng(0))
        for index in self.processes.shard(plan[:]):
            batch = make_batch([self.valid_src[i] for i in index], [self.valid_tgt[i] for i in index]).to(self.device)
            total += float(batch_loss(self.model, batch))
            tokens += batch.n_tokens
        self.model.train()
        total, tokens = self.processes.sum([total, tokens])
        return total / max(tokens, 1)

    def valid_bleu(self) -> float:
        """Greedy BLEU on the first ``valid_bleu_size`` validation pairs (each rank decodes its
        share; every rank scores them all, in order)."""
        subset = self.valid[:self.t.valid_bleu_size]
        translator = Translator(self.model, self.data.tokenizer, self.device, precision=self.precision)
        mine = translator.translate(self.processes.shard([src for src, _ in subset]), batch_size=128)
        shares = self.processes.gather(mine)
        hyps = [shares[k % len(shares)][k // len(shares)] for k in range(len(subset))]
        self.samples = [(src, hyp, tgt) for (src, tgt), hyp in zip(subset[:SAMPLES], hyps)]
        return bleu(hyps, [tgt for _, tgt in subset]).score

    def validate(self, scheduled: bool) -> dict[str, float]:
        """Validation loss and greedy BLEU; keeps the best weights.

        Only scheduled validations decay the learning rate and count towards patience, so
        the extra one at the end of a budget leaves a resumed run on the same course.
        """
        s = self.state
        self.last_valid_step = s.step
        if keep := kept_count(self.t, bool(self.valid)):
            self.callbacks.keep(self.model, {"step": s.step, "run_id": s.run_id}, keep)
        if not self.valid:  # nothing to select on: the newest weights are the best we know
            self.callbacks.save("best", self.model, None, {"step": s.step, "run_id": s.run_id})
            self.save_last()
            return {}
        loss, score = self.valid_loss(), self.valid_bleu()
        train_loss = sum(self.loss_since_valid) / max(len(self.loss_since_valid), 1)
        self.loss_since_valid = []
        record = {"step": s.step, "epoch": s.epoch, "train_loss": round(train_loss, 4),
                  "valid_loss": round(loss, 4), "valid_ppl": round(math.exp(min(loss, 50)), 2),
                  "valid_bleu": round(score, 2), "lr": self.lr, "elapsed_s": round(s.elapsed, 1),
                  "train_tokens_per_s": round(s.target_tokens / max(s.step_seconds, 1e-9), 1)}
        log.info("step %d  valid loss %.3f  ppl %.2f  BLEU %.2f  lr %.2g", s.step, loss,
                 record["valid_ppl"], score, self.lr)
        self.callbacks.validated(s, record, self.samples)
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
        if self.t.patience_limit and s.stale_validations >= self.t.patience_limit:
            self.early_stopped = True
            self.stop_reason = (f"early stopping: validation BLEU has not improved for "
                                f"{s.stale_validations} validations")

    def save_best_if(self, score: float) -> None:
        """Keep the weights with the best validation BLEU; on a tie the newer, more trained ones."""
        s = self.state
        if score >= s.best_bleu:
            s.best_bleu, s.best_bleu_step = score, s.step
            self.callbacks.save("best", self.model, None, {"step": s.step, "valid_bleu": score, "run_id": s.run_id})

    def save_last(self) -> None:
        self.state.scaler = self.scaler.state_dict()
        self.callbacks.save("last", self.model, self.optimizer, dataclasses.asdict(self.state))


@contextlib.contextmanager
def _stop_signals(trainer: Trainer) -> Iterator[None]:
    """SIGINT/SIGTERM ask the loop to stop after the current step (and save)."""
    def handler(signum: int, _frame: object) -> None:
        trainer.signal = signum

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
