"""Exact top-k and argmax for decoding, faster on CPU than PyTorch's own.

- :func:`row_topk`: ``topk``/``max`` over rows as wide as a vocabulary, searched block-wise.
- :func:`beam_topk`: beam search's best continuations, without the sum of every beam's score
  and every piece's log-probability.
- :class:`LinearArgmax`: the argmax of a linear layer's outputs from an int8 first pass,
  certified exact, so greedy search picks the pieces it would pick in float32.
"""
from __future__ import annotations

import math
import warnings

import torch
from torch import nn


def row_topk(scores: torch.Tensor, k: int, block: int = 64,
             kernels: str = "fast") -> tuple[torch.Tensor, torch.Tensor]:
    """``scores.topk(k, dim=1)``, best first: the same values and indices (up to the order of
    equal scores; for ``k`` 1 the first index, as ``max`` gives), several times faster on CPU
    for rows as wide as a vocabulary.

    PyTorch's CPU top-k and max-with-index run element by element; its ``amax`` is
    vectorised. So take the ``amax`` of each block of ``block`` columns: the k best scores lie
    in the k blocks with the best maxima (a score outside them has k larger ones above it),
    and only those k blocks are searched.

    :param scores: shape (rows, columns)
    :return: values, indices; shape (rows, k)
    """
    rows, columns = scores.shape
    if kernels != "fast" or scores.device.type != "cpu" or rows < 8 or columns < 4 * k * block:
        return scores.max(dim=1, keepdim=True) if k == 1 else scores.topk(k, dim=1)
    block_max = _block_max(scores, block)  # (rows, blocks)
    # k == 1 keeps max's rule for ties (the first block, then the first column in it).
    starts = (block_max.max(dim=1).indices.unsqueeze(1) if k == 1
              else block_max.topk(k, dim=1).indices) * block  # (rows, k)
    cols, past_end = _block_columns(starts, block, columns)
    values = scores.gather(1, cols.clamp(max=columns - 1)).masked_fill_(past_end, float("-inf"))
    if k == 1:
        best, where = values.max(dim=1, keepdim=True)
    else:
        best, where = values.topk(k, dim=1)
    return best, cols.gather(1, where)


def beam_topk(log_probs: torch.Tensor, scores: torch.Tensor, k: int, block: int = 64,
              kernels: str = "fast") -> tuple[torch.Tensor, torch.Tensor]:
    """``(scores + log_probs)``, viewed as (sentences, width * vocab), then ``topk(k, dim=1)``:
    each sentence's ``k`` best continuations of its beams, without building that sum.

    A beam's score shifts its whole row of log-probabilities, and so its blocks' maxima: the k
    best sums lie in the k blocks (``block`` columns of one row) whose maxima plus their beam's
    score are best, and only those blocks are summed and searched, as :func:`row_topk` does.
    The sums are the very floats of the full sum, so the result is the same (up to the order of
    equal scores); the full sum was a pass as costly as the top-k.

    :param log_probs: shape (sentences * width, vocab) :param scores: shape (sentences, width)
    :return: values, and indices into width * vocab; shape (sentences, k), best first
    """
    n, width = scores.shape
    rows, vocab = log_probs.shape
    if kernels != "fast" or log_probs.device.type != "cpu" or n < 8 or vocab < 4 * k * block:
        return row_topk((scores.view(rows, 1) + log_probs).view(n, width * vocab), k, block, kernels)
    block_max = _block_max(log_probs, block) + scores.view(rows, 1)  # (rows, blocks)
    blocks = block_max.size(1)
    best = block_max.view(n, width * blocks).topk(k, dim=1).indices  # (n, k)
    beam = (best // blocks).repeat_interleave(block, dim=1)  # (n, k * block)
    cols, past_end = _block_columns(best % blocks * block, block, vocab)
    flat = beam * vocab + cols.clamp(max=vocab - 1)
    values = log_probs.view(n, width * vocab).gather(1, flat) + scores.gather(1, beam)
    top, where = values.masked_fill_(past_end, float("-inf")).topk(k, dim=1)
    return top, flat.gather(1, where)


def _block_max(scores: torch.Tensor, block: int) -> torch.Tensor:
    """The maximum of each ``block`` columns of each row, the last block maybe shorter:
    shape (rows, ceil(columns / block)); ``amax`` is vectorised where ``max`` is not."""
    rows, columns = scores.shape
    whole = columns // block
    block_max = scores[:, :whole * block].view(rows, whole, block).amax(dim=2)
    if whole * block < columns:
        block_max = torch.cat([block_max, scores[:, whole * block:].amax(dim=1, keepdim=True)], dim=1)
    return block_max


def _block_columns(starts: torch.Tensor, block: int, columns: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The columns of the blocks starting at ``starts`` (rows, k), shape (rows, k * block), and
    where they lie past the last column (the short last block's missing ones)."""
    cols = (starts.unsqueeze(2) + torch.arange(block, device=starts.device)).flatten(1)
    return cols, cols >= columns


class LinearArgmax:
    """``argmax(x W^T + b)`` per row, equal to the argmax of the float32 outputs, at about the
    cost of an int8 matmul (on the reference CPU 2.2x faster than float32's at 128 rows).

    An int8 pass (weights per row, inputs per call, FBGEMM's dynamic quantization) gives
    approximate outputs ``a_j``; the true ``y_j`` is within ``e = s ||w^_j||_1 + ||x||_2
    ||w^_j - w_j||_2`` of ``a_j``, where ``w^`` is the int8 weight dequantized and ``s`` a full
    input quantization step (twice the rounding error; FBGEMM steps by range / 127). The ``m``
    best ``a_j`` are rescored exactly; their best wins if it beats the runner-up and every
    other ``a_j + e`` by a margin above float32 rounding (twice the worst case of a dot product
    of that length, so the float32 matmul's argmax is the same). Rows it cannot certify so (1.3-1.6%
    at ``m`` 4 on fra-eng) get exact scores for every output within reach of their best
    candidate (:meth:`_settle`); only near-ties, 13 of 283 such rows on fra-eng, are computed
    in float32. An untrained layer's outputs are too close to certify often; once a fifth of
    the rows seen have failed, it computes every row in float32.

    It copies the weights: build it again when they change (training).
    """

    GIVE_UP = 0.2, 1000  # the share of uncertified rows, after this many rows, that ends the int8 pass
    SETTLE_MAX = 256  # outputs scored one by one per uncertified row, on average over a call's rows

    def __init__(self, layer: nn.Linear, candidates: int = 4) -> None:
        # Copies: the int8 pass and the float32 rescoring must see the same weights.
        self.weight, self.bias = layer.weight.detach().clone(), layer.bias.detach().clone()
        self.m = candidates
        w = self.weight
        scale = (w.abs().amax(dim=1).double() / 127).clamp_(min=1e-12)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the deprecation notice of quantized tensors
            qweight = torch.quantize_per_channel(w, scale, torch.zeros_like(scale, dtype=torch.long),
                                                 0, torch.qint8)
        self.packed = torch.ops.quantized.linear_prepack(qweight, self.bias)
        w_hat = qweight.dequantize()
        # Maxima over the rows; 1.001 covers float32's rounding of these sums.
        self.l1 = 1.001 * float(w_hat.abs().sum(dim=1).max())  # ||w^_j||_1
        self.dist = 1.001 * float((w_hat - w).norm(dim=1).max())  # ||w^_j - w_j||_2
        self.rows = self.unsure = 0  # rows seen, and how many of them were not certified

    @staticmethod
    def available(layer: nn.Module) -> bool:
        """Whether ``layer`` is a float32 CPU linear layer with finite weights (int8 scales
        cannot be chosen for others, e.g. a diverged model's) and this torch has FBGEMM."""
        return (isinstance(layer, nn.Linear) and layer.bias is not None
                and layer.weight.device.type == "cpu" and layer.weight.dtype == torch.float32
                and hasattr(torch, "quantize_per_channel")
                and "fbgemm" in torch.backends.quantized.supported_engines
                and bool(torch.isfinite(layer.weight).all() and torch.isfinite(layer.bias).all()))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """:param x: shape (rows, in_features); float32 or, from a model under autocast, bf16/fp16
        :return: indices of the largest outputs, shape (rows,)"""
        with torch.autocast(x.device.type, enabled=False):  # the bound holds for float32 products
            return self._pick(x.float())

    def _pick(self, x: torch.Tensor) -> torch.Tensor:
        share, after = self.GIVE_UP
        if self.rows >= after and self.unsure > share * self.rows:
            return self._float32(x)
        low, high = (float(v) for v in torch.aminmax(x))  # x's range: the int8 scale and the bound's
        if not (math.isfinite(low) and math.isfinite(high)):  # no int8 scale fits inf or NaN (a diverged model)
            return self._float32(x)
        approx = torch.ops.quantized.linear_dynamic(x, self.packed, True)  # (rows, out)
        top, cand = row_topk(approx, self.m + 1)
        cand = cand[:, :self.m]
        exact = torch.bmm(self.weight[cand], x.unsqueeze(2)).squeeze(2) + self.bias[cand]  # (rows, m)
        best2, pos = exact.topk(2, dim=1)
        step = (max(high, 0.0) - min(low, 0.0)) / 127
        bound = step * self.l1 + x.norm(dim=1) * self.dist  # (rows,): the int8 error bound e
        others = top[:, self.m] + bound
        # float32 rounding of a k-term dot product: at most k * 2^-24 * sum |w_i x_i|, each way
        margin = 4 * x.size(1) * 2.0 ** -24 * self.l1 * max(-low, high) + 1e-5
        certain = best2[:, 0] >= torch.maximum(best2[:, 1], others) + margin
        picked = cand.gather(1, pos[:, :1]).squeeze(1)
        self.rows += x.size(0)
        if not bool(certain.all()):
            unsure = (~certain).nonzero().squeeze(1)
            self.unsure += unsure.numel()
            picked[unsure] = self._settle(x[unsure], approx[unsure], cand[unsure], best2[unsure, 0],
                                          bound[unsure] + margin, margin)
        return picked

    def _settle(self, x: torch.Tensor, approx: torch.Tensor, cand: torch.Tensor, best: torch.Tensor,
                reach: torch.Tensor, margin: float) -> torch.Tensor:
        """Picks for the rows the candidates did not certify, scoring exactly only the outputs
        whose int8 value comes within ``reach`` (error bound plus margin) of the best candidate's
        exact score: any other lies at least the margin below it. Rows whose two best exact
        scores are closer than the margin (near-ties) are computed in float32, and so are all
        the rows when they would score more than ``SETTLE_MAX`` outputs each on average.

        :param x: shape (u, in); approx: int8-pass outputs, shape (u, out); cand: shape (u, m);
            best: the best candidate's exact output, shape (u,); reach: shape (u,)
        """
        near = approx > (best - reach).unsqueeze(1)  # (u, out)
        near.scatter_(1, cand, True)
        rows, cols = near.nonzero(as_tuple=True)
        if cols.numel() > self.SETTLE_MAX * x.size(0):  # too many to score one by one
            return self._float32(x)
        exact = torch.full_like(approx, float("-inf"))
        exact[rows, cols] = torch.einsum("ni,ni->n", self.weight[cols], x[rows]) + self.bias[cols]
        best2, pos = exact.topk(2, dim=1)
        picked = pos[:, 0]
        tied = best2[:, 0] < best2[:, 1] + margin
        if bool(tied.any()):
            picked[tied] = self._float32(x[tied])
        return picked

    def _float32(self, x: torch.Tensor) -> torch.Tensor:
        return row_topk(torch.addmm(self.bias, x, self.weight.t()), 1)[1].squeeze(1)
