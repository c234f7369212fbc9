"""Greedy search: each row takes its most likely piece (:class:`MostLikely`), decoded by the
rows every one-output search shares (:func:`nmt.inference.search.row_searches`)."""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from nmt.inference.argmax import row_topk
from nmt.inference.search import Execution, Hypothesis, SourceBatch, row_searches
from nmt.inference.settings import SearchOptions
from nmt.models.interface import TranslationModel


@dataclass(frozen=True)
class MostLikely:
    """The most likely piece of each row, and its log-probability ``with_scores``. Without
    scores the per-step log-normaliser over the vocabulary (a seventh of greedy search's time
    at 8,000 pieces) is skipped, and ``argmax``, when given, picks each row's logit position
    from the decoder output (:class:`nmt.inference.argmax.LinearArgmax`: the output layer's
    argmax without its float32 matmul)."""

    with_scores: bool = True
    argmax: Callable[[torch.Tensor], torch.Tensor] | None = None

    def __call__(self, model: TranslationModel, output: torch.Tensor, keys: torch.Tensor,
                 steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.argmax is not None and not self.with_scores:
            return self.argmax(output), None
        logits = model.logits(output).float()  # (rows, outputs)
        best, picked = (t.squeeze(1) for t in row_topk(logits, 1, kernels=model.kernels))
        return picked, (best - torch.logsumexp(logits, dim=-1)) if self.with_scores else None


@torch.inference_mode()
def greedy_search(model: TranslationModel, src: torch.Tensor, src_len: torch.Tensor,
                  max_len: torch.Tensor, with_scores: bool = True, with_attention: bool = True,
                  argmax: Callable[[torch.Tensor], torch.Tensor] | None = None,
                  row_multiple: int = 1) -> list[Hypothesis]:
    """Pick the most likely piece at every step until EOS or the sentence's length budget
    (:func:`~nmt.inference.search.row_searches` for the settings).

    :param src: shape (batch, src_len); :param src_len: shape (batch,)
    :param max_len: most pieces to generate per sentence (EOS included), shape (batch,)
    """
    return greedy_searches(model, [(src, src_len, max_len)], with_scores, with_attention, argmax,
                           row_multiple)[0]


def greedy_searches(model: TranslationModel, batches: Iterable[SourceBatch], with_scores: bool = True,
                    with_attention: bool = True,
                    argmax: Callable[[torch.Tensor], torch.Tensor] | None = None,
                    row_multiple: int = 1, join_below: int = 0,
                    cancel: threading.Event | None = None) -> list[list[Hypothesis]]:
    """:func:`greedy_search` of each batch, in turn, joined as
    :func:`~nmt.inference.search.row_searches` joins them; each batch's hypotheses, in order."""
    return row_searches(model, batches, MostLikely(with_scores, argmax), with_scores, with_attention,
                        row_multiple, join_below, cancel)


def decode(model: TranslationModel, batches: Iterable[SourceBatch], options: SearchOptions,
           execution: Execution) -> list[list[list[Hypothesis]]]:
    """The strategy (:data:`nmt.inference.search.Strategy`): each source's one greedy output."""
    e = execution
    found = greedy_searches(model, batches, e.with_scores, e.with_attention, e.argmax, e.row_multiple, e.join_below,
                            e.cancel)
    return [[[h] for h in hyps] for hyps in found]

