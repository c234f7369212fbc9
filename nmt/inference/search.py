"""Decoding: batched greedy and beam search over :class:`nmt.models.interface.TranslationModel`
(``encode``, ``step``, ``logits``, ``piece_ids`` and the state's ``select``, ``repeat_beams``,
``reorder_beams`` and ``join``)."""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from nmt.data.tokenizer import BOS_ID, EOS_ID
from nmt.inference.argmax import row_topk
from nmt.models.interface import DecoderState, TranslationModel, join_rows, sentence_rows


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

SourceBatch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # src, src_len, max_len: see greedy_search


@torch.inference_mode()
def greedy_search(model: TranslationModel, src: torch.Tensor, src_len: torch.Tensor,
                  max_len: torch.Tensor, with_scores: bool = True, with_attention: bool = True,
                  argmax: Callable[[torch.Tensor], torch.Tensor] | None = None,
                  row_multiple: int = 1) -> list[Hypothesis]:
    """Pick the most likely piece at every step until EOS or the sentence's length budget.

    Finished sentences leave the batch, so one long output does not keep the others decoding;
    with ``row_multiple`` above 1 only as far as the rows left stay a multiple of it (ended rows
    decode on, unread), so the decoder meets few row counts: bfloat16 kernels on CPU are
    compiled per shape (docs/performance.md, "Decoding with AMX").
    Without ``with_scores`` the hypotheses' scores are NaN: the per-step log-normaliser over
    the vocabulary (a seventh of greedy search's time at 8,000 pieces) is skipped; without
    ``with_attention`` the hypotheses' attention is None and never gathered. ``argmax``, when
    given and scores are not wanted, picks each step's logit position from the decoder output
    (:class:`nmt.inference.argmax.LinearArgmax`: the output layer's argmax without its float32 matmul).

    :param src: shape (batch, src_len); :param src_len: shape (batch,)
    :param max_len: most pieces to generate per sentence (EOS included), shape (batch,)
    """
    return greedy_searches(model, [(src, src_len, max_len)], with_scores, with_attention, argmax,
                           row_multiple)[0]


@torch.inference_mode()
def greedy_searches(model: TranslationModel, batches: Iterable[SourceBatch], with_scores: bool = True,
                    with_attention: bool = True,
                    argmax: Callable[[torch.Tensor], torch.Tensor] | None = None,
                    row_multiple: int = 1, join_below: int = 0) -> list[list[Hypothesis]]:
    """:func:`greedy_search` of each batch, in turn; once no more than ``join_below`` of a
    batch's sentences are still going, the next batch joins them (the state's ``join``), so the
    last long outputs of a batch decode in the next one's steps instead of in steps of their
    own, which cost nearly as much (docs/performance.md, "Joining batches"). ``join_below``
    must be smaller than the batches (at their size every batch would join before the first
    step); 0 turns joining off. The hypotheses are those each batch would have alone, within float
    rounding (an int8 model's dynamic quantization scales each step's activations by all its
    rows, so its outputs depend on a batch's other sentences anyway).

    :param batches: (src, src_len, max_len) of each batch, as :func:`greedy_search` takes them;
        read one at a time, as the search needs the next
    :return: each batch's hypotheses, in its order
    """
    found: list[list[Hypothesis | None]] = []
    pending = iter(batches)
    rows: _GreedyRows | None = None
    while True:
        if rows is None or rows.going <= join_below:
            batch = next(pending, None)
            if batch is not None:
                new = _GreedyRows.start(model, *batch, len(found), with_attention)
                found.append([None] * batch[0].size(0))
                rows = new if rows is None else new.join(rows)
            elif rows is None:
                break
        if rows.step(model, with_scores, argmax):
            rows = rows.drop_ended(row_multiple, found, with_scores)
    return found  # type: ignore[return-value]  # every sentence ends


@dataclass
class _GreedyRows:
    """The rows greedy search decodes: sentences of one batch, or of several joined, each row
    at its own step. Tensors have shape (rows,) unless noted.

    batch, index: each row's batch and its sentence there
    length: pieces kept so far (EOS included); done: the row's sentence has ended (it may
        decode on, unread, to pad the rows to a multiple)
    tokens: (rows, width) the pieces kept, written at ``length``; weights: (rows, width, src_len)
        the attention, or None
    going: rows not done
    """

    state: DecoderState
    batch: torch.Tensor
    index: torch.Tensor
    prev: torch.Tensor
    max_len: torch.Tensor
    src_len: torch.Tensor
    length: torch.Tensor
    done: torch.Tensor
    scores: torch.Tensor
    tokens: torch.Tensor
    weights: torch.Tensor | None
    going: int

    _PER_ROW = ("batch", "index", "prev", "max_len", "src_len", "length", "done", "scores")

    @classmethod
    def start(cls, model: TranslationModel, src: torch.Tensor, src_len: torch.Tensor, max_len: torch.Tensor,
              batch: int, with_attention: bool) -> _GreedyRows:
        """Batch number ``batch``, encoded, before its first step."""
        rows, device = src.size(0), src.device
        max_len = max_len.to(device)
        width = int(max_len.max()) + 1  # ended rows write one past their last piece

        def zeros(*shape: int, dtype: torch.dtype = torch.long) -> torch.Tensor:
            return torch.zeros(*shape, dtype=dtype, device=device)

        return cls(model.encode(src, src_len), zeros(rows).fill_(batch), torch.arange(rows, device=device),
                   zeros(rows).fill_(BOS_ID), max_len, src_len.to(device), zeros(rows),
                   zeros(rows, dtype=torch.bool), zeros(rows, dtype=torch.float32),
                   zeros(rows, width).fill_(EOS_ID),
                   zeros(rows, width, src.size(1), dtype=torch.float32) if with_attention else None, rows)

    def join(self, other: _GreedyRows) -> _GreedyRows:
        """These rows, then ``other``'s."""
        weights = None
        if self.weights is not None and other.weights is not None:
            weights = join_rows(self.weights, other.weights, 1, 2)  # steps and source padded
        per_row = {name: torch.cat([getattr(self, name), getattr(other, name)]) for name in self._PER_ROW}
        return _GreedyRows(self.state.join(other.state), **per_row,
                           tokens=join_rows(self.tokens, other.tokens, 1), weights=weights,
                           going=self.going + other.going)

    def step(self, model: TranslationModel, with_scores: bool,
             argmax: Callable[[torch.Tensor], torch.Tensor] | None) -> bool:
        """Decode one piece in every row; returns whether a sentence ended."""
        output, self.state, attn = model.step(self.prev, self.state, self.weights is not None)
        if argmax is not None and not with_scores:
            prev = argmax(output)
        else:
            logits = model.logits(output).float()  # (rows, outputs)
            best, prev = (t.squeeze(1) for t in row_topk(logits, 1, kernels=model.kernels))
            if with_scores:  # log-probability of the pick
                self.scores += (best - torch.logsumexp(logits, dim=-1)).masked_fill_(self.done, 0.0)
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
                   with_scores: bool) -> _GreedyRows | None:
        """The rows to decode on (None when no sentence is going); the hypotheses of the rows
        that leave go into ``found``, by batch and sentence."""
        keep = _rows_to_keep(self.done, row_multiple)
        if keep is not None and keep.numel() == self.done.numel():
            return self
        leave = torch.ones_like(self.done)
        if keep is not None:
            leave[keep] = False
        self._collect(leave.nonzero().squeeze(1), found, with_scores)
        if keep is None:
            return None
        per_row = {name: getattr(self, name)[keep] for name in self._PER_ROW}
        return _GreedyRows(self.state.select(keep), **per_row, tokens=self.tokens[keep],
                           weights=self.weights[keep] if self.weights is not None else None, going=self.going)

    def _collect(self, rows: torch.Tensor, found: list[list[Hypothesis | None]], with_scores: bool) -> None:
        weights = self.weights[rows].float().cpu() if self.weights is not None else None
        for k, (batch, index, pieces, n, score, n_src) in enumerate(zip(*(t[rows].tolist() for t in (
                self.batch, self.index, self.tokens, self.length, self.scores, self.src_len)))):
            attn = weights[k, :n, :n_src] if weights is not None else None
            pieces = pieces[:n - 1] if pieces[n - 1] == EOS_ID else pieces[:n]
            found[batch][index] = Hypothesis(pieces, score if with_scores else math.nan, attn)


def _rows_to_keep(done: torch.Tensor, multiple: int) -> torch.Tensor | None:
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


DEFAULT_LENGTH_PENALTY = 1.0


def gnmt_length_penalty(length: int, alpha: float) -> float:
    """Wu et al. (2016), eq. (14): lp(Y) = ((5 + |Y|) / 6) ** alpha; alpha 0 disables it."""
    return ((5.0 + length) / 6.0) ** alpha


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
    assert 1 <= nbest <= beam
    search = _Beams(model, src, src_len, max_len.to(src.device), beam, length_penalty, nbest,
                    with_attention, row_multiple // math.gcd(row_multiple, beam))
    for step in range(int(max_len.max())):
        if not search.advance(step):
            break
    return [sorted(hyps, key=lambda h: -h.score)[:nbest] for hyps in search.finished]


class _Beams:
    """The state of a batched beam search; rows are (active sentence, beam) pairs."""

    def __init__(self, model: TranslationModel, src: torch.Tensor, src_len: torch.Tensor,
                 max_len: torch.Tensor, beam: int, alpha: float, nbest: int,
                 with_attention: bool, sentence_multiple: int) -> None:
        batch, device = src.size(0), src.device
        self.model, self.k, self.alpha, self.nbest = model, beam, alpha, nbest
        self.multiple = sentence_multiple
        self.src_len = src_len.tolist()
        # All beams would start identical, so the first step runs one row per sentence
        # (``width`` 1) and its best candidates seed the beams.
        self.state = model.encode(src, src_len)
        self.width = 1  # rows per active sentence
        self.active = list(range(batch))  # original index of each sentence in the batch
        self.ended = torch.zeros(batch, dtype=torch.bool, device=device)  # done, still in the batch
        self.max_len = max_len
        self.scores = torch.zeros(batch, 1, device=device)
        self.prev = torch.full((batch,), BOS_ID, dtype=torch.long, device=device)
        self.tokens = torch.zeros(batch, 0, dtype=torch.long, device=device)
        self.attn = torch.zeros(batch, 0, src.size(1), device=device) if with_attention else None
        self.finished: list[list[Hypothesis]] = [[] for _ in range(batch)]

    def advance(self, step: int) -> bool:
        """Expand every beam by one piece; returns whether any sentence is still searching."""
        n, k, width = len(self.active), self.k, self.width
        output, self.state, attn = self.model.step(self.prev, self.state, self.attn is not None)
        log_probs = torch.log_softmax(self.model.logits(output).float(), dim=-1)
        vocab = log_probs.size(-1)
        cand = (self.scores.view(n * width, 1) + log_probs).view(n, width * vocab)
        top_scores, top = row_topk(cand, 2 * k, kernels=self.model.kernels)  # (n, 2k), best first
        origin, token = top // vocab, self.model.piece_ids(top % vocab)
        rows = torch.arange(n, device=cand.device).unsqueeze(1) * width + origin  # (n, 2k)
        is_eos = token == EOS_ID
        last = (step + 1 >= self.max_len).unsqueeze(1)  # (n, 1)
        in_top_k = torch.arange(2 * k, device=cand.device) < k
        self._finish((is_eos | last) & in_top_k & ~self.ended.unsqueeze(1), top_scores, rows, token, attn, step)
        # The first k non-EOS candidates go on (there are at least k of the 2k).
        go_on = torch.argsort(is_eos.int(), dim=1, stable=True)[:, :k]  # (n, k)
        keep_rows = rows.gather(1, go_on).view(-1)
        self.scores = top_scores.gather(1, go_on)
        self.prev = token.gather(1, go_on).view(-1)
        # The first step's k candidates all extend its one row per sentence, so keep_rows
        # repeats each row k times; after it, rows move only among their own sentence's beams.
        self.state = self.state.reorder_beams(keep_rows) if width == k else self.state.repeat_beams(k)
        self.width = k
        self.tokens = torch.cat([self.tokens[keep_rows], self.prev.unsqueeze(1)], dim=1)
        if self.attn is not None:
            self.attn = torch.cat([self.attn[keep_rows], attn[keep_rows].unsqueeze(1)], dim=1)
        return self._drop_done(last.squeeze(1), step)

    def _finish(self, mask: torch.Tensor, scores: torch.Tensor, rows: torch.Tensor,
                token: torch.Tensor, attn: torch.Tensor, step: int) -> None:
        where = mask.nonzero()  # (finished, 2): (active index, candidate index)
        if where.numel() == 0:
            return
        i, j = where[:, 0], where[:, 1]
        fin_rows, fin_tokens = rows[i, j], token[i, j]
        # All finishing candidates in a few batched ops; Python only walks the results.
        pieces = torch.cat([self.tokens[fin_rows], fin_tokens.unsqueeze(1)], dim=1).tolist()
        weights = (torch.cat([self.attn[fin_rows], attn[fin_rows].unsqueeze(1)], dim=1).float().cpu()
                   if self.attn is not None else [None] * len(pieces))
        penalty = gnmt_length_penalty(step + 1, self.alpha)
        for a, seq, w, score in zip(i.tolist(), pieces, weights, scores[i, j].tolist()):
            b = self.active[a]
            if seq[-1] == EOS_ID:
                seq.pop()
            w = w[:, :self.src_len[b]] if w is not None else None
            self.finished[b].append(Hypothesis(seq, score / penalty, w))

    def _settled(self, sentence: int, best_live: float, budget: int, step: int) -> bool:
        """Whether no live beam can enter ``sentence``'s n-best list any more.

        A live beam's log-probability ``best_live`` (<= 0) only falls as it grows, and it can
        finish at lengths step + 2 .. budget, so its score is at most ``best_live`` over the
        largest length penalty among them (the penalty is monotone in the length)."""
        finished = self.finished[sentence]
        if len(finished) < self.nbest:
            return False
        penalty = max(gnmt_length_penalty(step + 2, self.alpha), gnmt_length_penalty(budget, self.alpha))
        nth_best = sorted((h.score for h in finished), reverse=True)[self.nbest - 1]
        return nth_best >= best_live / penalty

    def _drop_done(self, last: torch.Tensor, step: int) -> bool:
        ended = self.ended.tolist()
        done = [gone or cut or len(self.finished[b]) >= self.k or self._settled(b, best, budget, step)
                for gone, cut, b, best, budget in zip(ended, last.tolist(), self.active,
                                                      self.scores[:, 0].tolist(), self.max_len.tolist())]
        if done == ended:
            return True
        self.ended = torch.tensor(done, device=self.scores.device)
        idx = _rows_to_keep(self.ended, self.multiple)
        if idx is None:
            return False
        if idx.numel() == len(done):
            return True
        self.active = [self.active[i] for i in idx.tolist()]
        rows = sentence_rows(idx, self.k)
        self.max_len, self.scores, self.ended = self.max_len[idx], self.scores[idx], self.ended[idx]
        self.prev, self.tokens = self.prev[rows], self.tokens[rows]
        if self.attn is not None:
            self.attn = self.attn[rows]
        self.state = self.state.select(idx)
        return True
