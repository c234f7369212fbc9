"""Cross-entropy over real target positions only: padding adds nothing to loss or gradient.

The output projection and the label-smoothed loss are one autograd function, so the
(vocab, tokens) matrix exists once: it holds the logits, then their exponentials, which the
backward pass multiplies out without writing a gradient matrix. At 8,000 pieces that matrix
is most of a training step's memory traffic (see ``nmt bench``).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from nmt.data.batching import Batch
    from nmt.models.interface import TranslationModel


class _ProjectedSmoothedCE(torch.autograd.Function):
    """sum_t [(1 - eps) * -log p_t(gold_t) + eps * mean_v -log p_t(v)] with logits = x W^T + b.

    Per token that is ``lse - (1 - eps) * gold_logit - eps * mean_logit``; its gradient with
    respect to the logits is ``softmax - (1 - eps) * onehot(gold) - eps / vocab``, the same
    loss as ``F.cross_entropy(..., label_smoothing=eps, reduction="sum")``.

    Past the log-normaliser, only the products with the (vocab, n) matrix read it; the rest
    works on the (n, hidden), (vocab, hidden) and (n,) factors: the logits' sum is x's
    column sums times W's, softmax's per-token scale multiplies x or the (n, hidden) product, and
    the gradient's one-hot and smoothing terms are an index-add and a rank-one update.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                gold: torch.Tensor, eps: float) -> torch.Tensor:
        # Transposed, (vocab, n): with the tokens along rows the product is a matmul whose
        # output is long and thin, which runs about a fifth faster on CPU than (n, vocab).
        logits = torch.mm(weight, x.t())  # the bias joins later, on the (vocab,) factors
        if logits.dtype in (torch.float16, torch.bfloat16):  # under autocast: softmax in fp32
            logits = logits.float()
        vocab, n = logits.shape
        acc = torch.promote_types(x.dtype, torch.float32)  # elementwise: autocast leaves it be
        bias = bias.to(acc)
        loss = -(1 - eps) * (logits.gather(0, gold.unsqueeze(0)).sum() + bias[gold].sum())
        if eps:
            logit_sum = (x.to(acc).sum(0) * weight.to(acc).sum(0)).sum() + n * bias.sum()
            loss = loss - eps / vocab * logit_sum
        if _exp_is_safe(x, weight, bias):
            # exp(l + b) = exp(l) e^(b - max b) e^(max b): one pass over the matrix, in place
            bias_top = bias.amax()
            bias_factor = (bias - bias_top).exp_()  # (vocab,)
            exp = logits.exp_()
            total = exp.t() @ bias_factor  # (n,)
            loss = loss + (total.log() + bias_top).sum()
        else:  # logsumexp by hand, in place, shifted by each token's largest logit
            bias_factor = None
            top = logits.add_(bias.unsqueeze(1)).amax(dim=0, keepdim=True)  # (1, n)
            exp = logits.sub_(top).exp_()
            total = exp.sum(dim=0)  # (n,)
            loss = loss + (top.squeeze(0) + total.log()).sum()
        if any(ctx.needs_input_grad[:3]):
            # Under autocast the backward's two (vocab, n) products run in its type, as
            # autocast's own linear backward does; stored in it, the matrix takes half the memory.
            exp = exp.to(_matmul_dtype(x))
            ctx.save_for_backward(x, weight, exp, total, gold, bias_factor)
            ctx.eps = eps
        return loss

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        x, weight, exp, total, gold, bias_factor = ctx.saved_tensors
        eps, vocab, dtype, mm = ctx.eps, exp.size(0), x.dtype, exp.dtype
        weight = weight.to(dtype)
        grad_loss = grad_loss.to(dtype)
        # (n,): softmax = exp * bias_factor / total, with the upstream gradient folded in
        scale = total.reciprocal().to(dtype).mul_(grad_loss)
        gold_weight = -(1 - eps) * grad_loss
        if bias_factor is not None:
            bias_factor = bias_factor.to(dtype).unsqueeze(1)  # (vocab, 1)
        scaled_weight = weight if bias_factor is None else weight * bias_factor
        grad_x = (exp.t() @ scaled_weight.to(mm)).to(dtype)
        grad_x.mul_(scale.unsqueeze(1)).add_(weight[gold] * gold_weight)
        grad_w = (exp @ (x * scale.unsqueeze(1)).to(mm)).to(dtype)  # (vocab, hidden)
        grad_b = (exp @ scale.to(mm)).to(dtype)  # (vocab,)
        if bias_factor is not None:
            grad_w.mul_(bias_factor)
            grad_b.mul_(bias_factor.squeeze(1))
        grad_w.index_add_(0, gold, x * gold_weight)
        grad_b.index_add_(0, gold, gold_weight.expand(gold.size(0)))
        if eps:
            grad_x.sub_(weight.sum(0) * grad_loss, alpha=eps / vocab)
            grad_w.sub_(x.sum(0) * grad_loss, alpha=eps / vocab)
            grad_b.sub_(eps / vocab * x.size(0) * grad_loss)
        return grad_x, grad_w, grad_b, None, None


def _matmul_dtype(x: torch.Tensor) -> torch.dtype:
    """The type autocast runs matmuls in where it is on, else ``x``'s."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


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


def batch_loss(model: TranslationModel, batch: Batch, label_smoothing: float = 0.0,
               forward: Callable | None = None) -> torch.Tensor:
    """A teacher-forced pass over ``batch`` (on the model's device): summed token cross-entropy.
    ``forward`` runs the pass in the model's place (a DistributedDataParallel replica of it)."""
    outputs, _ = (forward or model)(batch.src, batch.src_len, batch.tgt_in)
    return model.loss(outputs, batch.tgt_out, batch.tgt_mask, label_smoothing)
