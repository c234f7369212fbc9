"""Cross-entropy over real target positions only: padding adds nothing to loss or gradient.

The output projection and the label-smoothed loss are one autograd function, so the
(tokens, vocab) matrix exists once: it holds the logits, then their exponentials, which the
backward pass multiplies out without writing a gradient matrix. At 8,000 pieces that matrix
is most of a training step's memory traffic (see ``nmt bench``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from nmt.batching import Batch
from nmt.model import Seq2Seq


class _ProjectedSmoothedCE(torch.autograd.Function):
    """sum_t [(1 - eps) * -log p_t(gold_t) + eps * mean_v -log p_t(v)] with logits = x W^T + b.

    Per token that is ``lse - (1 - eps) * gold_logit - eps * mean_logit``; its gradient with
    respect to the logits is ``softmax - (1 - eps) * onehot(gold) - eps / vocab``, the same
    loss as ``F.cross_entropy(..., label_smoothing=eps, reduction="sum")``.

    Past the log-normaliser, only the products with the (n, vocab) matrix read it; the rest
    works on the (n, hidden), (vocab, hidden) and (n, 1) factors: the logits' sum is x's
    column sums times W's, softmax's row scale multiplies x or the (n, hidden) product, and
    the gradient's one-hot and smoothing terms are an index-add and a rank-one update.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                gold: torch.Tensor, eps: float) -> torch.Tensor:
        logits = F.linear(x, weight, bias)  # (n, vocab)
        if logits.dtype in (torch.float16, torch.bfloat16):  # under autocast: softmax in fp32
            logits = logits.float()
        n, vocab = logits.shape
        loss = -(1 - eps) * logits.gather(1, gold.unsqueeze(1)).sum()
        if eps:
            acc = torch.promote_types(x.dtype, torch.float32)  # elementwise: autocast leaves it be
            logit_sum = (x.to(acc).sum(0) * weight.to(acc).sum(0)).sum() + n * bias.to(acc).sum()
            loss = loss - eps / vocab * logit_sum
        # logsumexp by hand, in place: one exp pass over the matrix, not two, and no copy of it
        top = logits.amax(dim=1, keepdim=True)  # (n, 1)
        exp = logits.sub_(top).exp_()
        total = exp.sum(dim=1, keepdim=True)  # (n, 1)
        loss = loss + (top + total.log()).sum()
        if any(ctx.needs_input_grad[:3]):
            ctx.save_for_backward(x, weight, exp, total, gold)
            ctx.eps = eps
        return loss

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        x, weight, exp, total, gold = ctx.saved_tensors
        eps, vocab, dtype = ctx.eps, exp.size(1), x.dtype
        exp, weight = exp.to(dtype), weight.to(dtype)
        grad_loss = grad_loss.to(dtype)
        # (n, 1): softmax = exp / total, with the upstream gradient folded in
        scale = total.reciprocal().to(dtype).mul_(grad_loss)
        gold_weight = -(1 - eps) * grad_loss
        grad_x = (exp @ weight).mul_(scale).add_(weight[gold] * gold_weight)
        grad_w = exp.t() @ (x * scale)  # (vocab, hidden)
        grad_w.index_add_(0, gold, x * gold_weight)
        grad_b = exp.t() @ scale.squeeze(1)  # (vocab,)
        grad_b.index_add_(0, gold, gold_weight.expand(gold.size(0)))
        if eps:
            grad_x.sub_(weight.sum(0) * grad_loss, alpha=eps / vocab)
            grad_w.sub_(x.sum(0) * grad_loss, alpha=eps / vocab)
            grad_b.sub_(eps / vocab * x.size(0) * grad_loss)
        return grad_x, grad_w, grad_b, None, None


def masked_cross_entropy(generator: nn.Module, outputs: torch.Tensor, tgt_out: torch.Tensor,
                         tgt_mask: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Summed token cross-entropy; the generator runs once over the real positions alone.

    :param outputs: decoder outputs, shape (batch, tgt_len, hidden)
    :param tgt_out: gold next tokens, shape (batch, tgt_len)
    :param tgt_mask: True at real target tokens, shape (batch, tgt_len)
    :return: scalar sum over real tokens; divide by ``tgt_mask.sum()`` for the mean
    """
    real = generator.dropout(outputs[tgt_mask])  # (n_tokens, hidden)
    return _ProjectedSmoothedCE.apply(real, generator.proj.weight, generator.proj.bias,
                                      generator.positions(tgt_out[tgt_mask]), label_smoothing)


def batch_loss(model: Seq2Seq, batch: Batch, label_smoothing: float = 0.0) -> torch.Tensor:
    """A teacher-forced pass over ``batch`` (on the model's device): summed token cross-entropy."""
    outputs, _ = model(batch.src, batch.src_len, batch.tgt_in)
    return masked_cross_entropy(model.generator, outputs, batch.tgt_out, batch.tgt_mask, label_smoothing)
