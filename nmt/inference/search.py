"""What every search shares: the hypotheses, the output budgets, cancelling, and the rows of
the searches that keep one output per row (greedy, :mod:`nmt.inference.greedy`; sampling,
:mod:`nmt.inference.sampling`) over :class:`nmt.models.interface.TranslationModel` (``encode``,
``step``, ``logits``, ``piece_ids`` and the state's ``select`` and ``join``). Those rows are
where the speed is: finished sentences leave, a batch's last sentences join the next batch's
steps. Which piece a row takes is the strategy's :class:`Pick`, and nothing else is. Beam
search (:mod:`nmt.inference.beam`) keeps beams of rows instead."""
from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from nmt.data.tokenizer import BOS_ID, EOS_ID
from nmt.models.interface import DecoderState, TranslationModel, join_rows

if TYPE_CHECKING:
    from nmt.inference.settings import SearchOptions


@dataclass
class Hypothesis:
    """One decoded sentence: piece ids without BOS/EOS, its log-probability, and its attention,
    shape (generated, src_len) — one row per generated piece, EOS included when generated
    (None when the search was asked not to keep it)."""

    tokens: list[int]
    score: float
    attention: torch.Tensor | None


def max_output_lengths(src_len: torch.Tensor, ratio: float, extra: int, cap: int) -> torch.Tensor:
    """Per-sentence output budget ``ratio * src_len + extra``, at most ``cap``; shape (batch,)."""
    return torch.clamp((src_len.float() * ratio).long() + extra, max=cap)


DEFAULT_BATCH = 128  # sentences decoded together: 128 beat 64 in every search and precision measured
# (docs/performance.md, "The translation batch")

SourceBatch = tuple[torch.Tensor, ...]  # src, src_len, max_len[, keys]: see row_searches


@dataclass(frozen=True)
class Execution:
    """How a search runs, apart from which pieces it chooses: what it keeps (scores, attention),
    its speed tricks (a fast ``argmax`` for unscored greedy steps, rows kept to a multiple of
    ``row_multiple``, a batch joining the one before once ``join_below`` sentences are going)
    and its ``cancel`` event. Every strategy takes one (:data:`Strategy`)."""

    with_scores: bool = True
    with_attention: bool = True
    argmax: Callable[[torch.Tensor], torch.Tensor] | None = None
    row_multiple: int = 1
    join_below: int = 0
    cancel: threading.Event | None = None


# A strategy: (model, batches, options, execution) -> each batch's n-best lists, in order
Strategy = Callable[[TranslationModel, Iterable["SourceBatch"], "SearchOptions", Execution],
                    list[list[list["Hypothesis"]]]]


class Pick(Protocol):
    """A strategy's choice of each row's next piece: from the decoder ``output`` of the rows
    (rows, hidden), their ``keys`` (each row's sentence, as the strategy numbered them) and
    ``steps`` (pieces each has so far), both (rows,), the positions in the model's outputs, and
    each pick's log-probability, or None where the search was asked not to score."""

    def __call__(self, model: TranslationModel, output: torch.Tensor, keys: torch.Tensor,
                 steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]: ...


@torch.inference_mode()
def row_searches(model: TranslationModel, batches: Iterable[SourceBatch], pick: Pick, with_scores: bool = True,
                 with_attention: bool = True, row_multiple: int = 1, join_below: int = 0,
                 cancel: threading.Event | None = None) -> list[list[Hypothesis]]:
    """One output per source row, each piece the one ``pick`` takes, decoding ``batches`` in
    turn: once no more than ``join_below`` of a batch's sentences are still going, the next
    batch joins them (the state's ``join``), so the last long outputs of a batch decode in the
    next one's steps instead of in steps of their own, which cost nearly as much
    (docs/performance.md, "Joining batches"). ``join_below`` must be smaller than the batches
    (at their size every batch would join before the first step); 0 turns joining off. The
    hypotheses are those each batch would have alone, within float rounding (an int8 model's
    dynamic quantization scales each step's activations by all its rows, so its outputs depend
    on a batch's other sentences anyway).

    Finished sentences leave the batch, so one long output does not keep the others decoding;
    with ``row_multiple`` above 1 only as far as the rows left stay a multiple of it (ended rows
    decode on, unread), so the decoder meets few row counts: bfloat16 kernels on CPU are
    compiled per shape (docs/performance.md, "Decoding with AMX"). Without ``with_scores`` the
    hypotheses' scores are NaN; without ``with_attention`` their attention is None and never
    gathered.

    :param batches: (src, src_len, max_len) or (src, src_len, max_len, keys) of each batch
        (keys: each sentence's number for ``pick``; default its place in the batch), read one
        at a time, as the search needs the next
    :param cancel: once set, the search raises :class:`Cancelled` before its next step
    :return: each batch's hypotheses, in its order
    """
    found: list[list[Hypothesis | None]] = []
    pending = iter(batches)
    rows: _Rows | None = None
    while True:
        if rows is None or rows.going <= join_below:
            batch = next(pending, None)
            if batch is not None:
                new = _Rows.start(model, *batch[:3], len(found), with_attention, *batch[3:])
                found.append([None] * batch[0].size(0))
                rows = new if rows is None else new.join(rows)
            elif rows is None:
                break
        check_cancel(cancel)
        if rows.step(model, pick):
            rows = rows.drop_ended(row_multiple, found, with_scores)
    return found  # type: ignore[return-value]  # every sentence ends


@dataclass
class _Rows:
    """The rows a one-output-per-row search decodes: sentences of one batch, or of several
    joined, each row at its own step. Tensors have shape (rows,) unless noted.

    batch, index: each row's batch and its sentence there; key: its number for the pick
    length: pieces kept so far (EOS included); done: the row's sentence has ended (it may
        decode on, unread, to pad the rows to a multiple)
    tokens: (rows, width) the pieces kept, written at ``length``; weights: (rows, width, src_len)
        the attention, or None
    going: rows not done
    """

    state: DecoderState
    batch: torch.Tensor
    index: torch.Tensor
    key: torch.Tensor
    prev: torch.Tensor
    max_len: torch.Tensor
    src_len: torch.Tensor
    length: torch.Tensor
    done: torch.Tensor
    scores: torch.Tensor
    tokens: torch.Tensor
    weights: torch.Tensor | None
    going: int

    _PER_ROW = ("batch", "index", "key", "prev", "max_len", "src_len", "length", "done", "scores")

    @classmethod
    def start(cls, model: TranslationModel, src: torch.Tensor, src_len: torch.Tensor, max_len: torch.Tensor,
              batch: int, with_attention: bool, keys: torch.Tensor | None = None) -> _Rows:
        """Batch number ``batch``, encoded, before its first step."""
        rows, device = src.size(0), src.device
        max_len = max_len.to(device)
        width = int(max_len.max()) + 1  # ended rows write one past their last piece

        def zeros(*shape: int, dtype: torch.dtype = torch.long) -> torch.Tensor:
            return torch.zeros(*shape, dtype=dtype, device=device)

        index = torch.arange(rows, device=device)
        return cls(model.encode(src, src_len), zeros(rows).fill_(batch), index,
                   index if keys is None else keys.to(device), zeros(rows).fill_(BOS_ID), max_len, src_len.to(device), zeros(rows),
                   zeros(rows, dtype=torch.bool), zeros(rows, dtype=torch.float32),
                   zeros(rows, width).fill_(EOS_ID),
                   zeros(rows, width, src.size(1), dtype=torch.float32) if with_attention else None, rows)

    def join(self, other: _Rows) -> _Rows:
        """These rows, then ``other``'s."""
        weights = None
        if self.weights is not None and other.weights is not None:
            weights = join_rows(self.weights, other.weights, 1, 2)  # steps and source padded
        per_row = {name: torch.cat([getattr(self, name), getattr(other, name)]) for name in self._PER_ROW}
        return _Rows(self.state.join(other.state), **per_row,
                           tokens=join_rows(self.tokens, other.tokens, 1), weights=weights,
                           going=self.going + other.going)

    def step(self, model: TranslationModel, pick: Pick) -> bool:
        """Decode one piece in every row; returns whether a sentence ended."""
        output, self.state, attn = model.step(self.prev, self.state, self.weights is not None)
        prev, logp = pick(model, output, self.key, self.length)
        if logp is not None:
            self.scores += logp.masked_fill_(self.done, 0.0)
        self.prev = model.piece_ids(prev)
        rows = torch.arange(self.prev.numel(), device=self.prev.device)
        self.tokens[rows, self.length] = self.prev
        if self.weights is not None:
            self.weights[rows, self.length] = attn.to(self.weights.dtype)
        self.length += ~self.done
        ends = ((self.prev == EOS_ID) | (self.length >= self.max_len)) & ~self.done
        ended = int(ends.sum())
        if ended:
            self.done |= ends
            self.going -= ended
        return ended > 0

    def drop_ended(self, row_multiple: int, found: list[list[Hypothesis | None]],
                   with_scores: bool) -> _Rows | None:
        """The rows to decode on (None when no sentence is going); the hypotheses of the rows
        that leave go into ``found``, by batch and sentence."""
        keep = rows_to_keep(self.done, row_multiple)
        if keep is not None and keep.numel() == self.done.numel():
            return self
        leave = torch.ones_like(self.done)
        if keep is not None:
            leave[keep] = False
        self._collect(leave.nonzero().squeeze(1), found, with_scores)
        if keep is None:
            return None
        per_row = {name: getattr(self, name)[keep] for name in self._PER_ROW}
        return _Rows(self.state.select(keep), **per_row, tokens=self.tokens[keep],
                           weights=self.weights[keep] if self.weights is not None else None, going=self.going)

    def _collect(self, rows: torch.Tensor, found: list[list[Hypothesis | None]], with_scores: bool) -> None:
        weights = self.weights[rows].float().cpu() if self.weights is not None else None
        for k, (batch, index, pieces, n, score, n_src) in enumerate(zip(*(t[rows].tolist() for t in (
                self.batch, self.index, self.tokens, self.length, self.scores, self.src_len)))):
            attn = weights[k, :n, :n_src].clone() if weights is not None else None  # not a view of all
            pieces = pieces[:n - 1] if pieces[n - 1] == EOS_ID else pieces[:n]
            found[batch][index] = Hypothesis(pieces, score if with_scores else math.nan, attn)


def rows_to_keep(done: torch.Tensor, multiple: int) -> torch.Tensor | None:
    """Which of the rows ``done`` flags to decode on, in order: those still going, padded
    with ended ones to a multiple of ``multiple`` (all, while that is not fewer); None when
    none is going. :param done: shape (rows,)"""
    going = (~done).nonzero().squeeze(1)
    if going.numel() == 0:
        return None
    if multiple == 1:
        return going
    padded = -(-going.numel() // multiple) * multiple
    if padded >= done.numel():
        return torch.arange(done.numel(), device=done.device)
    ended = done.nonzero().squeeze(1)[:padded - going.numel()]
    return torch.cat([going, ended]).sort().values



class Cancelled(Exception):
    """A search stopped between two steps: its caller set the ``cancel`` event (Ctrl-C reaches
    the main thread only; a search on a worker thread must be told)."""


def check_cancel(cancel: threading.Event | None) -> None:
    """Raise :class:`Cancelled` if ``cancel`` is set (a search calls it before each step)."""
    if cancel is not None and cancel.is_set():
        raise Cancelled


def gnmt_length_penalty(length: int, alpha: float) -> float:
    """Wu et al. (2016), eq. (14): lp(Y) = ((5 + |Y|) / 6) ** alpha; alpha 0 disables it."""
    return ((5.0 + length) / 6.0) ** alpha
