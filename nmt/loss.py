"""Cross-entropy over real target positions only: padding adds nothing to loss or gradient.

The output projection and the label-smoothed loss are one autograd function, so the
(tokens, vocab) matrix exists once: it holds the logits, then the softmax, then the gradient.
At 8,000 pieces that matrix is most of a training step's memory traffic (see ``nmt bench``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class _ProjectedSmoothedCE(torch.autograd.Function):
    """sum_t [(1 - eps) * -log p_t(gold_t) + eps * mean_v -log p_t(v)] with logits = x W^T + b.

    Per token that is ``lse - (1 - eps) * gold_logit - eps * mean_logit``; its gradient with
    respect to the logits is ``softmax - (1 - eps) * onehot(gold) - eps / vocab``, the same
    loss as ``F.cross_entropy(..., label_smoothing=eps, reduction="sum")``.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                gold: torch.Tensor, eps: float) -> torch.Tensor:
        logits = F.linear(x, weight, bias)  # (n, vocab)
        if logits.dtype in (torch.float16, torch.bfloat16):  # under autocast: softmax in fp32
            logits = logits.float()
        loss = -(1 - eps) * logits.gather(1, gold.unsqueeze(1)).sum()
        if eps:
            loss = loss - eps * logits.sum() / logits.size(1)
        # logsumexp by hand, in place: one exp pass over the matrix, not two, and no copy of it
        top = logits.amax(dim=1, keepdim=True)  # (n, 1)
        exp = logits.sub_(top).exp_()
        total = exp.sum(dim=1, keepdim=True)  # (n, 1)
        loss = loss + (top + total.log()).sum()
        if any(ctx.needs_input_grad[:3]):
            ctx.save_for_backward(x, weight, exp.div_(total), gold)
            ctx.eps = eps
        return loss

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        x, weight, probs, gold = ctx.saved_tensors
        grad = probs  # reused in place: this backward may run only once (no retain_graph)
        if ctx.eps:
            grad.sub_(ctx.eps / grad.size(1))
        grad.scatter_add_(1, gold.unsqueeze(1), grad.new_full((grad.size(0), 1), ctx.eps - 1.0))
        grad = grad.to(x.dtype)
        grad_loss = grad_loss.to(x.dtype)  # scales the small factors, not the (n, vocab) matrix
        return ((grad @ weight.to(x.dtype)).mul_(grad_loss), grad.t() @ (x * grad_loss),
                grad.sum(0).mul_(grad_loss), None, None)


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
