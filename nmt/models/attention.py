"""Attention scoring: masked softmax, Bahdanau's additive and the scaled dot-product score.

- Additive: Bahdanau, Cho & Bengio (2015), "Neural Machine Translation by Jointly Learning
  to Align and Translate", eq. (6): e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j).
- Scaled dot product: e_ij = s_{i-1} . h_j / sqrt(d) (Vaswani et al. 2017, eq. (1)), no weights.

Both give alpha = masked softmax(e) and c_i = sum_j alpha_ij h_j, and share one interface:
:meth:`project_keys` once per source batch, then one call per decoder step.
"""
from __future__ import annotations

import math

import torch
from torch import nn


def masked_softmax(scores: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis that gives masked-out positions exactly zero weight.

    :param scores: shape (batch, ..., src_len)
    :param src_mask: bool, True at real source tokens, broadcastable to ``scores``
    :return: weights of the same shape as ``scores``; each row sums to 1 over real positions
    """
    # float32 and finfo.min rather than -1e6: safe under fp16/bf16 autocast.
    filled = scores.float().masked_fill(~src_mask, torch.finfo(torch.float32).min)
    weights = torch.softmax(filled, dim=-1).masked_fill(~src_mask, 0.0)
    return weights.type_as(scores)


class _AdditiveScores(torch.autograd.Function):
    """e = tanh(q + U h) · v for one query per sentence, as 2 σ(2(q + U h)) · v - Σv.

    The two are equal (tanh x = 2σ(2x) - 1); on CPU PyTorch's tanh runs 4x slower than its
    sigmoid, and this (batch, src_len, attn) activation is most of attention's work per step.
    Backward recomputes it rather than keeping one per decoder step: on a batch of 64-piece
    sentences that is 0.5 GB at the reference size.
    """

    @staticmethod
    def forward(ctx, query: torch.Tensor, proj_keys: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        query, v = query.to(proj_keys.dtype), v.to(proj_keys.dtype)  # one dtype under autocast
        ctx.save_for_backward(query, proj_keys, v)
        return (sigmoid_2x(proj_keys, query) @ v).mul_(2).sub_(v.sum())  # (batch, src_len)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        query, proj_keys, v = ctx.saved_tensors
        s = sigmoid_2x(proj_keys, query)  # (batch, src_len, attn)
        grad = grad.to(s.dtype)
        grad_v = (grad.reshape(1, -1) @ s.view(-1, s.size(2))).squeeze(0).mul_(2).sub_(grad.sum())
        # d/dx [2σ(2x) - 1] = 4σ(2x)(1 - σ(2x))
        grad_pre = s.addcmul_(s, s, value=-1).mul_(grad.unsqueeze(2)).mul_(4 * v)
        return grad_pre.sum(1), grad_pre, grad_v


def sigmoid_2x(keys: torch.Tensor, query: torch.Tensor, doubled: bool = False) -> torch.Tensor:
    """σ(2(U h + q)) = (1 + tanh(U h + q)) / 2, the fast paths' form of additive attention's
    activation, in a fresh tensor.

    :param keys: U h, shape (batch, src_len, attn); 2 U h if ``doubled`` (saves a pass per step)
    :param query: W_a s, shape (batch, attn)
    :return: shape (batch, src_len, attn)
    """
    if doubled:
        return torch.add(keys, query.unsqueeze(1), alpha=2).sigmoid_()
    return torch.add(keys, query.unsqueeze(1)).mul_(2).sigmoid_()


class AdditiveAttention(nn.Module):
    """Bahdanau additive attention, eq. (6), with the key projection ``U_a h`` computed once.

    Call :meth:`project_keys` once per source batch and pass its result to every
    :meth:`forward` call (one per decoder step); the keys are never re-projected per step.
    """

    def __init__(self, key_size: int, query_size: int, attn_size: int) -> None:
        super().__init__()
        self.kernels = "fast"  # see nmt.models.kernels
        self.keep_float = ("score",)  # v is read as a vector, never called: int8 keeps it
        self.key_proj = nn.Linear(key_size, attn_size, bias=False)  # U_a
        self.query_proj = nn.Linear(query_size, attn_size, bias=False)  # W_a
        self.score = nn.Linear(attn_size, 1, bias=False)  # v_a

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """:param keys: shape (batch, src_len, key_size)
        :return: U_a h, shape (batch, src_len, attn_size)"""
        return self.key_proj(keys)

    def forward(
        self,
        query: torch.Tensor,
        proj_keys: torch.Tensor,
        values: torch.Tensor,
        src_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Attend from one query per sentence.

        :param query: decoder state s_{i-1}, shape (batch, query_size)
        :param proj_keys: from :meth:`project_keys`, shape (batch, src_len, attn_size)
        :param values: encoder outputs h, shape (batch, src_len, value_size)
        :param src_mask: True at real source tokens, shape (batch, src_len)
        :return: context, shape (batch, value_size); weights, shape (batch, src_len)
        """
        assert query.dim() == 2 and proj_keys.shape[:2] == values.shape[:2] == src_mask.shape
        v = self.score.weight.squeeze(0)  # (attn,)
        if self.kernels == "fast":
            scores = _AdditiveScores.apply(self.query_proj(query), proj_keys, v)  # (batch, src_len)
        else:
            scores = torch.tanh(proj_keys + self.query_proj(query).unsqueeze(1)) @ v
        weights = masked_softmax(scores, src_mask)  # (batch, src_len)
        context = torch.bmm(weights.unsqueeze(1), values).squeeze(1)  # (batch, value_size)
        return context, weights


def scaled_dot_product(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                       mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt(d)) v over the keys ``mask`` allows (Vaswani et al. 2017, eq. (1)).

    :param queries: shape (..., q_len, d)
    :param keys: shape (..., k_len, d)
    :param values: shape (..., k_len, d_v)
    :param mask: bool, True where a query may attend a key, broadcastable to (..., q_len, k_len);
        None: every key (a decoding step's self-attention over its past)
    :return: context, shape (..., q_len, d_v); weights, shape (..., q_len, k_len), exactly 0
        where ``mask`` is False
    """
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.size(-1))
    weights = (masked_softmax(scores, mask) if mask is not None
               else torch.softmax(scores.float(), dim=-1).type_as(scores))
    return weights @ values, weights


def float32_scaled_dot_product(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                               mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`scaled_dot_product` computed in float32 from half-width queries, keys and values:
    the context in their type, the weights float32. Without gradients (search) as it is; with
    them through :class:`Float32ScaledDotProduct`, which keeps half-width tensors for backward."""
    acc = torch.promote_types(queries.dtype, torch.float32)
    with torch.autocast(queries.device.type, enabled=False):
        context, weights = scaled_dot_product(queries.to(acc), keys.to(acc), values.to(acc), mask)
    return context.to(queries.dtype), weights


class Float32ScaledDotProduct(torch.autograd.Function):
    """:func:`scaled_dot_product` computed in float32 from half-width queries, keys and values,
    for bf16 on CPU (:func:`nmt.models.transformer.multihead.attend`).

    What leaves it and what backward keeps is half-width, as autocast's products would give:
    the context, and for backward the queries, keys and values as they came and the weights.
    Autograd over the float32 steps would keep float32 copies of all four, the weights twice.
    Apply as ``(queries, keys, values, mask)``; returns ``(context, weights)``, the weights
    float32.
    """

    @staticmethod
    def forward(ctx, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        context, weights = float32_scaled_dot_product(queries, keys, values, mask)
        ctx.save_for_backward(queries, keys, values, weights.to(queries.dtype))
        return context, weights

    @staticmethod
    def backward(ctx, grad_context: torch.Tensor, grad_weights: torch.Tensor | None):
        queries, keys, values, weights = ctx.saved_tensors
        acc = torch.promote_types(queries.dtype, torch.float32)
        grad_context, weights = grad_context.to(acc), weights.to(acc)
        grad_values = weights.transpose(-2, -1) @ grad_context
        grad_w = grad_context @ values.to(acc).transpose(-2, -1)
        if grad_weights is not None:
            grad_w = grad_w + grad_weights
        # softmax's backward; masked keys have weight 0, so they get no gradient either
        grad_scores = weights * (grad_w - (grad_w * weights).sum(-1, keepdim=True))
        grad_scores /= math.sqrt(queries.size(-1))
        grad_queries = grad_scores @ keys.to(acc)
        grad_keys = grad_scores.transpose(-2, -1) @ queries.to(acc)
        return (grad_queries.to(queries.dtype), grad_keys.to(keys.dtype), grad_values.to(values.dtype),
                None)


class DotProductAttention(nn.Module):
    """Scaled dot-product scoring of the decoder state against the encoder outputs:
    e_ij = s . h_j / sqrt(d), parameter-free, so query and keys share the hidden size d."""

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """Nothing to project: the keys are the encoder outputs, shape (batch, src_len, hidden)."""
        return keys

    def forward(self, query: torch.Tensor, proj_keys: torch.Tensor, values: torch.Tensor,
                src_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """As :meth:`AdditiveAttention.forward`; ``proj_keys`` from :meth:`project_keys`."""
        assert query.dim() == 2 and proj_keys.shape[:2] == values.shape[:2] == src_mask.shape
        context, weights = scaled_dot_product(query.unsqueeze(1), proj_keys, values, src_mask.unsqueeze(1))
        return context.squeeze(1), weights.squeeze(1)  # (batch, value_size), (batch, src_len)


ATTENTIONS = ("additive", "dot")


def make_attention(kind: str, hidden_size: int) -> nn.Module:
    """The scoring ``kind`` (one of :data:`ATTENTIONS`) over states and keys of ``hidden_size``."""
    if kind == "dot":
        return DotProductAttention()
    return AdditiveAttention(hidden_size, hidden_size, hidden_size)
