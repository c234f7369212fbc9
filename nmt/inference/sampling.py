"""Sampling: each row draws its next piece from the model's distribution, tempered and cut to
its top k and top p (:class:`Draw`), decoded by the rows every one-output search shares
(:func:`nmt.inference.search.row_searches`). Back-translation wants it: sampled sources teach
the reverse model more than the beam's most likely ones (Edunov et al. 2018).

A row's draw at a step is the inverse of its distribution's CDF at a uniform number hashed
from the seed, the row's key (its line and sample number) and the step, not taken from a
generator whose state the other rows share: so a sentence's sample does not depend on its
batch, the batch order, the workers or the joins, only on the seed (within float rounding of
the probabilities, which an int8 model's other rows can move).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch

from nmt.inference.search import Execution, Hypothesis, SourceBatch, row_searches
from nmt.inference.settings import Sampling, SearchOptions
from nmt.models.interface import TranslationModel

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijection of uint64 whose outputs look independent."""
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def uniforms(seed: int, keys: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """A number in [0, 1) for each (seed, key, step), the same wherever it is computed; shape
    of ``keys``, float64, on their device. :param keys, steps: shape (rows,), integers >= 0"""
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps, as the hash means it to
        key = keys.cpu().numpy().astype(np.uint64)
        step = steps.cpu().numpy().astype(np.uint64)
        h = _mix(_mix(_mix(np.full_like(key, seed)) ^ key) ^ step)
    return torch.from_numpy((h >> np.uint64(11)).astype(np.float64) * 2.0 ** -53).to(keys.device)


@dataclass(frozen=True)
class Draw:
    """A piece drawn for each row as :class:`~nmt.inference.settings.Sampling` says; its score
    is the model's own log-probability of it (untempered, uncut)."""

    sampling: Sampling

    def __call__(self, model: TranslationModel, output: torch.Tensor, keys: torch.Tensor,
                 steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = model.logits(output).float()  # (rows, outputs)
        probs = torch.softmax(logits / self.sampling.temperature, dim=-1)
        top_k = self.sampling.top_k
        if 0 < top_k < probs.size(-1):
            kth = probs.topk(top_k, dim=-1).values[:, -1:]
            probs = probs.masked_fill(probs < kth, 0.0)
        order = None
        if self.sampling.top_p < 1.0:  # the nucleus: most likely first, until top_p is reached
            probs, order = probs.sort(dim=-1, descending=True)
            before = probs.cumsum(dim=-1) - probs  # the mass of the more likely pieces
            probs = probs.masked_fill(before >= self.sampling.top_p, 0.0)
        cdf = probs.double().cumsum(dim=-1)
        target = uniforms(self.sampling.seed, keys, steps).unsqueeze(1) * cdf[:, -1:]
        picked = torch.searchsorted(cdf, target, right=True).clamp_(max=probs.size(-1) - 1)
        if order is not None:
            picked = order.gather(1, picked)
        picked = picked.squeeze(1)
        logp = torch.log_softmax(logits, dim=-1).gather(1, picked.unsqueeze(1)).squeeze(1)
        return picked, logp


def decode(model: TranslationModel, batches: Iterable[SourceBatch], options: SearchOptions,
           execution: Execution) -> list[list[list[Hypothesis]]]:
    """The strategy (:data:`nmt.inference.search.Strategy`): one sample per source row; give
    each batch its rows' keys (4th element) for draws that do not depend on the batching (the
    translator decodes a line ``nbest`` times, a row each)."""
    e = execution
    found = row_searches(model, batches, Draw(options.sampling), True, e.with_attention, e.row_multiple,
                         e.join_below, e.cancel)
    return [[[h] for h in hyps] for hyps in found]
