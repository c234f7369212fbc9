"""Cross-entropy over real target positions only: padding adds nothing to loss or gradient.

The output projection and the label-smoothed loss are one autograd function. It computes the
gradients in forward, a slice of tokens at a time, so no (vocab, tokens) matrix outlives its
slice: at 8,000 pieces a slice is about 500 tokens, and a batch's matrix would be several
of them (docs/performance.md, "The Transformer")."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from nmt.models.halfwidth import matmul_dtype

if TYPE_CHECKING:
    from nmt.data.batching import Batch
    from nmt.models.interface import TranslationModel


class _ProjectedSmoothedCE(torch.autograd.Function):
    """sum_t [(1 - eps) * -log p_t(gold_t) + eps * mean_v -log p_t(v)] with logits = x W^T + b.

    Per token that is ``lse - (1 - eps) * gold_logit - eps * mean_logit``; its gradient with
    respect to the logits is ``softmax - (1 - eps) * onehot(gold) - eps / vocab``, the same
    loss as ``F.cross_entropy(..., label_smoothing=eps, reduction="sum")``.

    The loss is the graph's last node, so its gradients are known in forward up to the
    upstream scalar. Forward computes them there, a slice of tokens at a time, and keeps only
    the (n, hidden), (vocab, hidden) and (vocab,) results: no (vocab, n) matrix outlives its
    slice. Past the log-normaliser only products read the slice's exponentials: the logits'
    sum is x's column sums times W's, softmax's per-token scale multiplies x or the (n,
    hidden) product, and the one-hot and smoothing terms are an index-add and a rank-one
    update, applied once over all tokens.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                gold: torch.Tensor, eps: float) -> torch.Tensor:
        acc = torch.promote_types(x.dtype, torch.float32)  # elementwise: autocast leaves it be
        mm = matmul_dtype(x)  # under autocast, the products run in its type
        vocab, n = weight.size(0), x.size(0)
        bias = bias.to(acc)
        loss = -(1 - eps) * bias[gold].sum()
        column_sums = x.to(acc).sum(0), weight.to(acc).sum(0)  # (hidden,) each: the smoothing terms
        if eps:
            loss = loss - eps / vocab * ((column_sums[0] * column_sums[1]).sum() + n * bias.sum())
        safe = _exp_is_safe(x, weight, bias)
        bias_factor = None
        if safe:  # exp(l + b) = exp(l) e^(b - max b) e^(max b): one pass over each slice, in place
            bias_top = bias.amax()
            bias_factor = (bias - bias_top).exp_()  # (vocab,)
        x_mm, weight_mm = x.to(mm), weight.to(mm)
        needs_grad = any(ctx.needs_input_grad[:3])
        grads = _Gradients(x, weight, weight_mm, bias_factor, acc) if needs_grad else None
        step = max(1, _SLICE_ELEMENTS // vocab)
        for start in range(0, n, step):
            rows = slice(start, start + step)
            # Transposed, (vocab, tokens): with the tokens along rows the product is a matmul
            # whose output is long and thin, which runs about a fifth faster on CPU.
            logits = torch.mm(weight_mm, x_mm[rows].t()).to(acc)  # the bias joins on the factors
            loss = loss - (1 - eps) * logits.gather(0, gold[rows].unsqueeze(0)).sum()
            if safe:
                exp = logits.exp_()
                total = exp.t() @ bias_factor  # (tokens,)
                loss = loss + (total.log() + bias_top).sum()
            else:  # logsumexp by hand, in place, shifted by each token's largest logit
                top = logits.add_(bias.unsqueeze(1)).amax(dim=0, keepdim=True)  # (1, tokens)
                exp = logits.sub_(top).exp_()
                total = exp.sum(dim=0)
                loss = loss + (top.squeeze(0) + total.log()).sum()
            if grads is not None:
                grads.add_slice(rows, exp, total.reciprocal())
        if grads is not None:
            ctx.save_for_backward(*grads.finish(gold, eps, column_sums))
        return loss

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        grad_x, grad_w, grad_b = (g * grad_loss.to(g.dtype) for g in ctx.saved_tensors)
        return grad_x, grad_w, grad_b, None, None


class _Gradients:
    """The loss's gradients with respect to x (n, hidden), W (vocab, hidden) and b (vocab,),
    gathered slice by slice from unnormalised exponentials ``exp`` (vocab, tokens)."""

    def __init__(self, x: torch.Tensor, weight: torch.Tensor, weight_mm: torch.Tensor,
                 bias_factor: torch.Tensor | None, acc: torch.dtype) -> None:
        """``weight_mm``: ``weight`` in the products' type (:func:`~nmt.models.halfwidth.matmul_dtype`)."""
        self.x, self.weight, self.bias_factor, self.acc, self.mm = x, weight, bias_factor, acc, weight_mm.dtype
        self.scaled_weight = (weight_mm if bias_factor is None
                              else (weight * bias_factor.to(weight.dtype).unsqueeze(1)).to(self.mm))
        self.grad_x = x.new_empty(x.shape, dtype=acc)
        self.grad_w = weight.new_zeros(weight.shape, dtype=acc)
        self.grad_b = weight.new_zeros(weight.size(0), dtype=acc)

    def add_slice(self, rows: slice, exp: torch.Tensor, inv_total: torch.Tensor) -> None:
        """``inv_total`` (tokens,): softmax = exp * bias_factor * inv_total."""
        exp = exp.to(self.mm)
        self.grad_x[rows] = (exp.t() @ self.scaled_weight).to(self.acc).mul_(inv_total.unsqueeze(1))
        scaled_x = (self.x[rows] * inv_total.unsqueeze(1).to(self.x.dtype)).to(self.mm)
        if self.mm == self.acc:  # accumulate in place: no (vocab, hidden) temporary per slice
            torch.addmm(self.grad_w, exp, scaled_x, out=self.grad_w)  # FLOP counters see addmm, not addmm_
            self.grad_b.addmv_(exp, inv_total)
        else:
            self.grad_w.add_(exp @ scaled_x)
            self.grad_b.add_(exp @ inv_total.to(self.mm))

    def finish(self, gold: torch.Tensor, eps: float, column_sums: tuple[torch.Tensor, torch.Tensor]
               ) -> tuple[torch.Tensor, ...]:
        """The one-hot and smoothing terms, over all tokens at once (``column_sums``: x's and
        W's, each (hidden,)); the gradients at a unit loss."""
        x, weight, vocab = self.x.to(self.acc), self.weight.to(self.acc), self.weight.size(0)
        if self.bias_factor is not None:
            self.grad_w.mul_(self.bias_factor.unsqueeze(1))
            self.grad_b.mul_(self.bias_factor)
        self.grad_x.sub_(weight[gold], alpha=1 - eps)
        self.grad_w.index_add_(0, gold, x, alpha=-(1 - eps))
        self.grad_b.index_add_(0, gold, self.grad_b.new_full(gold.shape, -(1 - eps)))
        if eps:
            self.grad_x.sub_(column_sums[1], alpha=eps / vocab)
            self.grad_w.sub_(column_sums[0], alpha=eps / vocab)
            self.grad_b.sub_(eps / vocab * x.size(0))
        return self.grad_x.to(self.x.dtype), self.grad_w.to(self.weight.dtype), self.grad_b


# A slice's (vocab, tokens) exponentials: 16 MB in float32, so a step's loss never holds more.
# The loss runs when a step holds the most (every saved activation): 32 MB slices cost 49 MB
# more at the peak of 300 training steps (docs/performance.md, "The allocator").
_SLICE_ELEMENTS = 1 << 22


def _exp_is_safe(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> bool:
    """Whether exp of the bias-free logits can go unshifted. By Cauchy-Schwarz every
    |x_t . w_v| is then at most 60, so no exp overflows float32, nor does their sum over any
    vocabulary under e^28; with a bias spread of at most 20, no product with e^(b - max b)
    falls below e^-80, inside float32's normal range (e^-87). Trained reference-size models
    sit far inside (|w_v| <= 2.6, |x_t| <= 20, spread ~1); anything else takes the shifted path.
    So does mixed precision: autocast would run the normaliser's product in float16, and the
    backward multiplies in x's dtype, where e^12 already overflows.
    """
    if (not x.size(0) or torch.is_autocast_enabled(x.device.type)
            or x.dtype in (torch.float16, torch.bfloat16)):
        return False
    bound = weight.float().norm(dim=1).amax() * x.float().norm(dim=1).amax()
    return bool((bound <= 60) & (bias.amax() - bias.amin() <= 20))


def masked_cross_entropy(generator: nn.Module, outputs: torch.Tensor, tgt_out: torch.Tensor,
                         tgt_mask: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Summed token cross-entropy; the generator runs once over the real positions alone,
    fused with the loss unless its ``kernels`` is ``reference`` (:mod:`nmt.models.kernels`).

    :param outputs: decoder outputs, shape (batch, tgt_len, hidden)
    :param tgt_out: gold next tokens, shape (batch, tgt_len)
    :param tgt_mask: True at real target tokens, shape (batch, tgt_len)
    :return: scalar sum over real tokens; divide by ``tgt_mask.sum()`` for the mean
    """
    real = generator.dropout(outputs[tgt_mask])  # (n_tokens, hidden)
    gold = generator.positions(tgt_out[tgt_mask])  # (n_tokens,)
    if generator.kernels == "reference":
        return F.cross_entropy(generator.proj(real).float(), gold, reduction="sum",
                               label_smoothing=label_smoothing)
    return _ProjectedSmoothedCE.apply(real, generator.proj.weight, generator.proj.bias, gold,
                                      label_smoothing)


def rdrop_cross_entropy(generator: nn.Module, outputs: torch.Tensor, tgt_out: torch.Tensor,
                        tgt_mask: torch.Tensor, label_smoothing: float, alpha: float) -> torch.Tensor:
    """R-Drop's loss (Liang et al. 2021) over a batch that holds every sentence twice, the
    second copy after the first, each through its own dropout masks: per real target token,
    the two copies' mean label-smoothed cross-entropy plus ``alpha / 4`` times the symmetric
    KL divergence of their output distributions, KL(p1 || p2) + KL(p2 || p1). That is the
    paper's ``L1 + L2 + alpha * (KL12 + KL21) / 2`` halved, fairseq's scale, so the sum is
    one copy's: divide by one copy's target tokens. Both copies' gradients flow through the
    KL term.

    The (2 * tokens, outputs) log-probabilities are held whole, in float32: the fused loss's
    slices do not fit a term that pairs two tokens' whole distributions.

    :param outputs: decoder outputs, shape (2 * batch, tgt_len, hidden)
    :param tgt_out: gold next tokens, shape (2 * batch, tgt_len)
    :param tgt_mask: True at real target tokens, shape (2 * batch, tgt_len)
    :return: scalar sum over one copy's real tokens
    """
    real = generator.dropout(outputs[tgt_mask])  # (2 * n_tokens, hidden): copy 1's tokens, then copy 2's
    gold = generator.positions(tgt_out[tgt_mask])
    log_probs = F.log_softmax(generator.proj(real).float(), dim=-1)  # (2 * n_tokens, outputs)
    smoothed = -((1 - label_smoothing) * log_probs.gather(1, gold.unsqueeze(1)).sum()
                 + label_smoothing * log_probs.mean(dim=1).sum())
    first, second = log_probs.chunk(2)
    symmetric_kl = ((first.exp() - second.exp()) * (first - second)).sum()  # KL12 + KL21
    return smoothed / 2 + alpha / 4 * symmetric_kl


def batch_loss(model: TranslationModel, batch: Batch, label_smoothing: float = 0.0,
               forward: Callable | None = None, rdrop_alpha: float = 0.0) -> torch.Tensor:
    """A teacher-forced pass over ``batch`` (on the model's device): summed token cross-entropy.
    ``forward`` runs the pass in the model's place (a DistributedDataParallel replica of it).
    With ``rdrop_alpha`` > 0 the pass runs over every sentence twice and the loss is R-Drop's
    (:func:`rdrop_cross_entropy`), on the same scale: meant for training, where dropout makes
    the copies differ."""
    if rdrop_alpha:
        batch = batch.twice()
    outputs, _ = (forward or model)(batch.src, batch.src_len, batch.tgt_in)
    return model.loss(outputs, batch.tgt_out, batch.tgt_mask, label_smoothing, rdrop_alpha)
