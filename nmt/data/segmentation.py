"""The training pairs as a step reads them: each side's stored best segmentation, or, with
subword regularisation (Kudo 2018), a segmentation SentencePiece samples from the pair's text
at every step; and, with source word dropout (Sennrich and Zhang 2019's, as token masking),
some source pieces read as ``<unk>``. Validation, test and translation always take the best
segmentation and every piece.

Both are seeded by the run's seed and the step. Word dropout is then the same in any process;
sampling is the same only within one: SentencePiece's sampler draws other segmentations for the
same seed in another process (measured), so a sampled run trains on one process, and its resume
(a new process) draws other segmentations than an uninterrupted run would. Drawing from the
deterministic n-best list with a generator of nmt's own would make it reproducible.
"""
from __future__ import annotations

import numpy as np
import sentencepiece as spm

from nmt.data.prepare import RunData
from nmt.data.tokenizer import UNK_ID

Sides = tuple[list[list[int]], list[list[int]]]  # the sources' and the targets' piece ids


class TrainingPairs:
    """Piece ids of training pairs by corpus index, for ``data``: sampled with smoothing ``alpha``
    over the ``nbest`` best segmentations (-1: all) when ``alpha`` > 0, else the stored ones. A
    sampled side longer than ``max_pieces`` (the longest a prepared pair may be) keeps its best
    segmentation. With ``word_dropout`` > 0 each source piece reads as ``<unk>`` with that
    probability."""

    def __init__(self, data: RunData, alpha: float = 0.0, nbest: int = -1, seed: int = 1,
                 max_pieces: int = 64, word_dropout: float = 0.0) -> None:
        self.data, self.alpha, self.nbest, self.seed, self.max_pieces = data, alpha, nbest, seed, max_pieces
        self.word_dropout = word_dropout
        if alpha and data.train_text is None:
            raise ValueError("subword sampling needs the training text (data.train_text)")

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
        spm.set_random_generator_seed(self.seed * 1_000_003 + step)
        sampled = [self._sample([text[i] for i in index]) for text in self.data.train_text]
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

    def _sample(self, texts: list[str]) -> list[list[int]]:
        # one thread: its generator is the one the seed was set for
        return self.data.tokenizer.sp.encode(texts, enable_sampling=True, alpha=self.alpha, nbest_size=self.nbest,
                                             num_threads=1)
