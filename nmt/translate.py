"""Raw text in, detokenised translations out, in input order, one line per input line."""
from __future__ import annotations

import logging

import torch

from nmt.batching import length_sorted_chunks, make_batch
from nmt.corpus import normalize
from nmt.devices import autocast
from nmt.model import Seq2Seq
from nmt.search import Hypothesis, beam_search, greedy_search, max_output_lengths
from nmt.tokenizer import Tokenizer

log = logging.getLogger(__name__)


class Translator:
    """Batched translation with a trained model, greedy (``beam=1``) or with a beam.

    Source lines are cut to ``max_src_pieces`` so one absurd line cannot exhaust memory; each
    output may have at most ``len_ratio * source pieces + len_extra`` pieces.
    """

    def __init__(self, model: Seq2Seq, tokenizer: Tokenizer, device: torch.device,
                 beam: int = 1, length_penalty: float = 0.0, max_src_pieces: int = 256,
                 len_ratio: float = 2.0, len_extra: int = 10) -> None:
        self.model, self.tokenizer, self.device = model, tokenizer, device
        self.beam, self.length_penalty = beam, length_penalty
        self.max_src_pieces, self.len_ratio, self.len_extra = max_src_pieces, len_ratio, len_extra

    def encode(self, lines: list[str]) -> list[list[int]]:
        """Normalised, tokenised and length-capped source ids of each line."""
        ids = self.tokenizer.encode([normalize(line) for line in lines])
        if any(len(seq) > self.max_src_pieces for seq in ids):
            log.warning("source lines longer than %d pieces were cut to that length",
                        self.max_src_pieces)
        return [seq[:self.max_src_pieces] for seq in ids]

    def nbest(self, lines: list[str], n: int = 1, batch_size: int = 64,
              with_scores: bool = True) -> list[list[Hypothesis]]:
        """The ``n`` best hypotheses of each line, best first; [] for an empty (all-space) line.

        ``with_scores=False`` lets greedy search skip scoring (scores are then NaN)."""
        ids = self.encode(lines)
        results: list[list[Hypothesis]] = [[] for _ in lines]
        todo = [i for i, seq in enumerate(ids) if seq]
        was_training = self.model.training
        self.model.eval()
        try:
            for chunk in length_sorted_chunks([len(ids[i]) for i in todo], batch_size):
                index = [todo[k] for k in chunk]
                for i, hyps in zip(index, self._decode_batch([ids[i] for i in index], n, with_scores)):
                    results[i] = hyps
        finally:
            self.model.train(was_training)
        return results

    def _decode_batch(self, src_ids: list[list[int]], n: int, with_scores: bool
                      ) -> list[list[Hypothesis]]:
        batch = make_batch(src_ids).to(self.device)
        budget = max_output_lengths(batch.src_len, self.len_ratio, self.len_extra,
                                    cap=int(self.len_ratio * self.max_src_pieces) + self.len_extra)
        with autocast(self.device):
            if self.beam == 1:
                return [[h] for h in greedy_search(self.model, batch.src, batch.src_len, budget,
                                                   with_scores)]
            return beam_search(self.model, batch.src, batch.src_len, budget, self.beam,
                               self.length_penalty, n)

    def hypotheses(self, lines: list[str], batch_size: int = 64,
                   with_scores: bool = True) -> list[Hypothesis | None]:
        """The best hypothesis of each line; None for an empty line."""
        return [hyps[0] if hyps else None for hyps in self.nbest(lines, 1, batch_size, with_scores)]

    def detokenize(self, hyps: list[Hypothesis]) -> list[str]:
        return self.tokenizer.decode([h.tokens for h in hyps])

    def translate(self, lines: list[str], batch_size: int = 64) -> list[str]:
        """Detokenised translation of each line; an empty line gives an empty line."""
        hyps = self.hypotheses(lines, batch_size, with_scores=False)
        texts = iter(self.detokenize([h for h in hyps if h is not None]))
        return [next(texts) if h is not None else "" for h in hyps]
