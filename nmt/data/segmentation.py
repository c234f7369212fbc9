"""The training pairs as a step reads them: each side's stored best segmentation, or, with
subword regularisation (Kudo 2018's l-best sampling), a segmentation drawn at every step from
the pair's n best; and, with source word dropout (Sennrich and Zhang 2019's, as token masking),
some source pieces read as ``<unk>``. Validation, test and translation always take the best
segmentation and every piece.

Both draw with numpy generators seeded by the run's seed and the step, never with
SentencePiece's own sampler: that one draws other segmentations for the same seed in another
process (measured), so a resume or a second process would not train on what an uninterrupted
run does. SentencePiece's n-best lists are deterministic; the draw among them is nmt's.
"""
from __future__ import annotations

import itertools

import numpy as np

from nmt.data.prepare import RunData
from nmt.data.tokenizer import UNK_ID

Sides = tuple[list[list[int]], list[list[int]]]  # the sources' and the targets' piece ids


class TrainingPairs:
    """Piece ids of training pairs by corpus index, for ``data``: sampled with smoothing ``alpha``
    among the ``nbest`` best segmentations when ``alpha`` > 0, else the stored ones. A
    sampled side longer than ``max_pieces`` (the longest a prepared pair may be) keeps its best
    segmentation. With ``word_dropout`` > 0 each source piece reads as ``<unk>`` with that
    probability."""

    def __init__(self, data: RunData, alpha: float = 0.0, nbest: int = 16, seed: int = 1,
                 max_pieces: int = 64, word_dropout: float = 0.0) -> None:
        self.data, self.alpha, self.nbest, self.seed, self.max_pieces = data, alpha, nbest, seed, max_pieces
        self.word_dropout = word_dropout
        if alpha and data.train_text is None:
            raise ValueError("subword sampling needs the training text (data.train_text)")
        if alpha and nbest < 2:
            raise ValueError(f"l-best sampling needs nbest >= 2, not {nbest}")
        self.scores = _piece_scores(data.tokenizer.sp) if alpha else None

    def draw(self, index: list[int], step: int) -> Sides:
        """The sources' and the targets' ids of the pairs ``index`` at optimiser step ``step``."""
        src, tgt = self._segmented(index, step)
        if self.word_dropout:
            src = self._masked(src, step)
        return src, tgt

    def _segmented(self, index: list[int], step: int) -> Sides:
        """Both sides' ids: stored, or sampled with a seed of the step's own."""
        stores = self.data.train_src, self.data.train_tgt
        if not self.alpha:
            return tuple([store[i] for i in index] for store in stores)  # type: ignore[return-value]
        sampled = [self._sample([text[i] for i in index], np.random.default_rng((self.seed, step, side)))
                   for side, text in enumerate(self.data.train_text)]
        # the stored ids are read only for a side sampled too long
        return tuple([s if len(s) <= self.max_pieces else store[i] for s, i in zip(side, index)]  # type: ignore[return-value]
                     for side, store in zip(sampled, stores))

    def _masked(self, sources: list[list[int]], step: int) -> list[list[int]]:
        """``sources`` with each piece ``<unk>`` at the word-dropout rate."""
        rng = np.random.default_rng((self.seed, step))
        lengths = np.fromiter(map(len, sources), dtype=np.int64, count=len(sources))
        ids = np.concatenate([np.asarray(s, dtype=np.int64) for s in sources])
        ids[rng.random(len(ids)) < self.word_dropout] = UNK_ID
        return [part.tolist() for part in np.split(ids, np.cumsum(lengths)[:-1])]

    def _sample(self, texts: list[str], rng: np.random.Generator) -> list[list[int]]:
        """One segmentation of each text, drawn from its ``nbest`` best with probability
        proportional to P(segmentation) ** alpha (Kudo 2018, section 3.2), all at once: the
        Gumbel-max trick picks, per text, the candidate of the highest alpha * log P + Gumbel noise."""
        nbests = self.data.tokenizer.sp.nbest_encode_as_ids(texts, nbest_size=self.nbest)
        candidates = [c for cands in nbests for c in cands]
        lengths = np.fromiter(map(len, candidates), dtype=np.int64, count=len(candidates))
        ids = np.fromiter(itertools.chain.from_iterable(candidates), dtype=np.int64, count=int(lengths.sum()))
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        keys = self.alpha * np.add.reduceat(self.scores[ids], starts) + rng.gumbel(size=len(candidates))
        sizes = np.fromiter(map(len, nbests), dtype=np.int64, count=len(nbests))
        order = np.lexsort((-keys, np.repeat(np.arange(len(nbests)), sizes)))  # by text, highest key first
        firsts = order[np.cumsum(sizes) - sizes]
        return [candidates[k] for k in firsts]


def _piece_scores(sp) -> np.ndarray:
    """Each piece's log-probability under the unigram model, by id, so that a segmentation's is
    the sum of its pieces'; ``<unk>`` gets SentencePiece's penalty for unknown pieces."""
    scores = np.array([sp.get_score(i) for i in range(sp.get_piece_size())], dtype=np.float64)
    scores[UNK_ID] = scores.min() - 10.0
    return scores

