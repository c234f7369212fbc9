"""Batched beam search over :class:`nmt.models.interface.TranslationModel` (``encode``, ``step``,
``logits``, ``piece_ids`` and the state's ``select``, ``repeat_beams``, ``reorder_beams`` and
``join``), decoding a stream of batches as greedy search does (:mod:`nmt.inference.search`)."""
from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from nmt.data.tokenizer import BOS_ID, EOS_ID
from nmt.inference.argmax import beam_topk
from nmt.inference.search import (Execution, Hypothesis, SourceBatch, check_cancel, gnmt_length_penalty,
                                  rows_to_keep)
from nmt.inference.settings import SearchOptions
from nmt.models.interface import DecoderState, TranslationModel, join_rows, sentence_rows


@torch.inference_mode()
def beam_search(model: TranslationModel, src: torch.Tensor, src_len: torch.Tensor, max_len: torch.Tensor,
                beam: int, length_penalty: float = 0.0, nbest: int = 1,
                with_attention: bool = True, row_multiple: int = 1) -> list[list[Hypothesis]]:
    """Batched beam search: sentences x beams form one batch; finished sentences leave it.

    Follows fairseq's rule: of the 2*beam best candidates, EOS candidates among the top
    ``beam`` are finished and the best ``beam`` others go on, so ``beam=1`` is greedy search.
    A sentence is done once it has ``beam`` finished hypotheses or reaches its length budget
    (then its top candidates are finished as they stand, like greedy's cut-off), or as soon as
    its ``nbest``-th best finished hypothesis scores at least what its best live beam could
    still reach: extending a beam only lowers its log-probability, so the n-best list can no
    longer change. Without a length penalty that stops a sentence once its best candidate
    ends (OpenNMT-py's rule, exact there) and saves 15% of the decoder rows on fra-eng.
    Done sentences leave the batch, with ``row_multiple`` as in :func:`greedy_search`: a
    sentence's beams stay or leave together.

    :param max_len: most pieces per sentence (EOS included), shape (batch,)
    :return: per sentence, its ``nbest`` hypotheses, best first, scored by
        log-probability / GNMT length penalty; their attention only ``with_attention``
    """
    return beam_searches(model, [(src, src_len, max_len)], beam, length_penalty, nbest, with_attention,
                         row_multiple)[0]


def decode(model: TranslationModel, batches: Iterable[SourceBatch], options: SearchOptions,
           execution: Execution) -> list[list[list[Hypothesis]]]:
    """The strategy (:data:`nmt.inference.search.Strategy`): each source's n-best list."""
    e = execution
    return beam_searches(model, batches, options.beam, options.length_penalty, options.nbest, e.with_attention,
                         e.row_multiple, e.join_below, e.cancel)


@torch.inference_mode()
def beam_searches(model: TranslationModel, batches: Iterable[SourceBatch], beam: int,
                  length_penalty: float = 0.0, nbest: int = 1, with_attention: bool = True,
                  row_multiple: int = 1, join_below: int = 0,
                  cancel: threading.Event | None = None) -> list[list[list[Hypothesis]]]:
    """:func:`beam_search` of each batch, in turn, joined as :func:`greedy_searches` joins
    them: once no more than ``join_below`` of a batch's sentences are still searching, the
    next batch takes its first step (one row per sentence) and joins them, each sentence going
    on at its own step. The hypotheses are those each batch would find alone, within float
    rounding. ``join_below`` must be smaller than the batches (at their size every batch would
    step once and join before the first went on); 0 turns joining off. Once ``cancel`` is
    set, the search raises :class:`~nmt.inference.search.Cancelled` before its next step.

    :return: each batch's :func:`beam_search` result, in its order
    """
    assert 1 <= nbest <= beam
    rule = _BeamRule(model, beam, length_penalty, nbest, row_multiple // math.gcd(row_multiple, beam))
    found: list[list[list[Hypothesis]]] = []
    pending = iter(batches)
    beams: _Beams | None = None
    while True:
        check_cancel(cancel)
        if beams is None or beams.going <= join_below:
            batch = next(pending, None)
            if batch is not None:
                new = _Beams.start(model, *batch[:3], len(found), with_attention)
                found.append([[] for _ in range(batch[0].size(0))])
                if new.advance(rule, found):  # its first step seeds the beams
                    beams = new if beams is None else new.join(beams)
                continue
            if beams is None:
                break
        if not beams.advance(rule, found):
            beams = None
    return [[sorted(hyps, key=lambda h: -h.score)[:nbest] for hyps in batch] for batch in found]


@dataclass(frozen=True)
class _BeamRule:
    """What a beam search is asked: the model, the beam size, the GNMT length penalty's alpha,
    the n-best list's length, and the sentences a batch is kept to a multiple of."""

    model: TranslationModel
    k: int
    alpha: float
    nbest: int
    multiple: int


@dataclass
class _Beams:
    """The sentences a beam search decodes, of one batch or of several joined, each at its own
    step. Rows are (sentence, beam) pairs, ``width`` consecutive rows a sentence: 1 before the
    first step, whose best candidates seed the beams, then the beam size.

    who: each sentence's batch and index there; src_len: its source's length
    max_len, length, ended: per sentence, shape (n,): its budget, the pieces each of its beams
        holds, whether it is done (it may decode on in the batch, unread, to pad it to a multiple)
    scores: the beams' log-probabilities, shape (n, width)
    prev: the beams' last pieces, shape (rows,); tokens: their pieces, (rows, width), each
        written at its sentence's ``length``; attn: their attention, (rows, width, src_len),
        or None; width is the largest budget of the joined batches + 1, src_len their longest
    going: sentences not done
    """

    state: DecoderState
    who: list[tuple[int, int]]
    src_len: list[int]
    max_len: torch.Tensor
    length: torch.Tensor
    ended: torch.Tensor
    scores: torch.Tensor
    prev: torch.Tensor
    tokens: torch.Tensor
    attn: torch.Tensor | None
    going: int
    width: int = 1

    @classmethod
    def start(cls, model: TranslationModel, src: torch.Tensor, src_len: torch.Tensor, max_len: torch.Tensor,
              batch: int, with_attention: bool) -> _Beams:
        """Batch number ``batch``, encoded, before its first step."""
        n, device = src.size(0), src.device
        max_len = max_len.to(device)
        width = int(max_len.max()) + 1  # ended sentences kept as padding write one past their end

        def zeros(*shape: int, dtype: torch.dtype = torch.long) -> torch.Tensor:
            return torch.zeros(*shape, dtype=dtype, device=device)

        attn = zeros(n, width, src.size(1), dtype=torch.float32) if with_attention else None
        return cls(model.encode(src, src_len), [(batch, i) for i in range(n)], src_len.tolist(), max_len,
                   zeros(n), zeros(n, dtype=torch.bool), zeros(n, 1, dtype=torch.float32),
                   zeros(n).fill_(BOS_ID), zeros(n, width), attn, n)

    def join(self, other: _Beams) -> _Beams:
        """These sentences, then ``other``'s; both past their first step."""
        assert self.width == other.width, "beams join once seeded"
        attn = None
        if self.attn is not None and other.attn is not None:
            attn = join_rows(self.attn, other.attn, 1, 2)  # budget and source padded
        stacked = {name: torch.cat([getattr(self, name), getattr(other, name)])
                   for name in ("max_len", "length", "ended", "scores", "prev")}
        return _Beams(self.state.join(other.state), self.who + other.who, self.src_len + other.src_len,
                      **stacked, tokens=join_rows(self.tokens, other.tokens, 1), attn=attn,
                      going=self.going + other.going, width=self.width)

    def advance(self, rule: _BeamRule, found: list[list[list[Hypothesis]]]) -> bool:
        """Expand every beam by one piece, finished hypotheses going into ``found`` by batch
        and sentence; returns whether any sentence is still searching."""
        n, k, width, model = len(self.who), rule.k, self.width, rule.model
        output, state, attn = model.step(self.prev, self.state, self.attn is not None)
        log_probs = torch.log_softmax(model.logits(output).float(), dim=-1)
        vocab, device = log_probs.size(-1), log_probs.device
        top_scores, top = beam_topk(log_probs, self.scores, 2 * k, kernels=model.kernels)  # (n, 2k), best first
        origin, token = top // vocab, model.piece_ids(top % vocab)
        rows = torch.arange(n, device=device).unsqueeze(1) * width + origin  # (n, 2k)
        is_eos = token == EOS_ID
        last = (self.length + 1 >= self.max_len).unsqueeze(1)  # (n, 1)
        in_top_k = torch.arange(2 * k, device=device) < k
        self._finish((is_eos | last) & in_top_k & ~self.ended.unsqueeze(1), top_scores, rows, token, attn,
                     rule.alpha, found)
        # The first k non-EOS candidates go on (there are at least k of the 2k).
        go_on = torch.argsort(is_eos.int(), dim=1, stable=True)[:, :k]  # (n, k)
        keep_rows = rows.gather(1, go_on).view(-1)
        self.scores = top_scores.gather(1, go_on)
        self.prev = token.gather(1, go_on).view(-1)
        # The first step's k candidates all extend its one row per sentence, so keep_rows
        # repeats each row k times; after it, rows move only among their own sentence's beams.
        self.state = state.reorder_beams(keep_rows) if width == k else state.repeat_beams(k)
        self.width = k
        beams, at = torch.arange(n * k, device=device), self.length.repeat_interleave(k)
        self.tokens = self.tokens[keep_rows]
        self.tokens[beams, at] = self.prev
        if self.attn is not None:
            self.attn = self.attn[keep_rows]
            self.attn[beams, at] = attn[keep_rows].to(self.attn.dtype)
        self.length += ~self.ended
        return self._drop_done(last.squeeze(1), rule, found)

    def _finish(self, mask: torch.Tensor, scores: torch.Tensor, rows: torch.Tensor, token: torch.Tensor,
                attn: torch.Tensor | None, alpha: float, found: list[list[list[Hypothesis]]]) -> None:
        where = mask.nonzero()  # (finished, 2): (sentence, candidate index)
        if where.numel() == 0:
            return
        i, j = where[:, 0], where[:, 1]
        fin_rows, fin_tokens = rows[i, j], token[i, j]
        at = self.length[i]
        # All finishing candidates in a few batched ops; Python only walks the results.
        pieces = self.tokens[fin_rows]
        pieces[torch.arange(i.numel(), device=pieces.device), at] = fin_tokens
        weights: list[torch.Tensor | None] = [None] * i.numel()
        if self.attn is not None and attn is not None:
            held = self.attn[fin_rows]
            held[torch.arange(i.numel(), device=held.device), at] = attn[fin_rows].to(held.dtype)
            weights = list(held.float().cpu())
        for a, seq, n, w, score in zip(i.tolist(), pieces.tolist(), (at + 1).tolist(), weights,
                                       scores[i, j].tolist()):
            batch, index = self.who[a]
            seq = seq[:n - 1] if seq[n - 1] == EOS_ID else seq[:n]
            w = w[:n, :self.src_len[a]].clone() if w is not None else None  # not a view of all
            found[batch][index].append(Hypothesis(seq, score / gnmt_length_penalty(n, alpha), w))

    def _drop_done(self, last: torch.Tensor, rule: _BeamRule, found: list[list[list[Hypothesis]]]) -> bool:
        ended = self.ended.tolist()
        done = [gone or cut or len(hyps) >= rule.k or _settled(hyps, rule, best, budget, length)
                for gone, cut, hyps, best, budget, length in zip(
                    ended, last.tolist(), (found[b][i] for b, i in self.who), self.scores[:, 0].tolist(),
                    self.max_len.tolist(), self.length.tolist())]
        self.going = done.count(False)
        if done == ended:
            return True
        self.ended = torch.tensor(done, device=self.scores.device)
        idx = rows_to_keep(self.ended, rule.multiple)
        if idx is None:
            return False
        if idx.numel() == len(done):
            return True
        kept = idx.tolist()
        self.who, self.src_len = [self.who[i] for i in kept], [self.src_len[i] for i in kept]
        rows = sentence_rows(idx, self.width)
        for name in ("max_len", "length", "scores", "ended"):
            setattr(self, name, getattr(self, name)[idx])
        self.prev, self.tokens = self.prev[rows], self.tokens[rows]
        if self.attn is not None:
            self.attn = self.attn[rows]
        self.state = self.state.select(idx)
        return True


def _settled(finished: list[Hypothesis], rule: _BeamRule, best_live: float, budget: int, length: int) -> bool:
    """Whether no live beam can enter a sentence's n-best list (its ``finished`` hypotheses)
    any more.

    A live beam's log-probability ``best_live`` (<= 0) only falls as it grows, and it holds
    ``length`` pieces, so it can finish at lengths length + 1 .. budget: its score is at most
    ``best_live`` over the largest length penalty among them (the penalty is monotone in the
    length: for alpha >= 0 the budget's is the largest)."""
    if len(finished) < rule.nbest:
        return False
    penalty = max(gnmt_length_penalty(length + 1, rule.alpha), gnmt_length_penalty(budget, rule.alpha))
    nth_best = sorted((h.score for h in finished), reverse=True)[rule.nbest - 1]
    return nth_best >= best_live / penalty
