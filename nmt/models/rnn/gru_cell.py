"""The GRU cell, written once: ``nn.GRU``'s arithmetic for one step, and its backward.

r, z = σ(W_ir x + b_ir + W_hr h + b_hr), σ(W_iz x + b_iz + W_hz h + b_hz)
n = tanh(W_in x + b_in + r * (W_hn h + b_hn)),   h' = n + z (h - n)

Callers pass the two projections (``x_gates`` = W_i x + b_i and ``h_gates`` = W_h h + b_h,
gates in PyTorch's order reset, update, new), so each can batch its matmuls its own way. The
decoders' unrolled steps run :func:`gru_cell` under autograd; :mod:`nmt.models.rnn.bptt` runs it into
preallocated buffers, keeping what :func:`gru_cell_backward` reads.
"""
from __future__ import annotations

import torch

Buffers = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def gru_cell(x_gates: torch.Tensor, h_gates: torch.Tensor, h: torch.Tensor | None,
             out: Buffers | None = None) -> torch.Tensor:
    """One GRU step.

    :param x_gates: W_i x + b_i, shape (..., rows, 3*hidden)
    :param h_gates: W_h h + b_h, shape (..., rows, 3*hidden)
    :param h: the state, shape (..., rows, hidden), or None for zeros
    :param out: buffers (h', [r; z], n, W_hn h + b_hn) written in place, for a hand-written
        backward; None: fresh tensors, for autograd
    :return: h', shape (..., rows, hidden)
    """
    size = h_gates.size(-1) // 3
    # split, not slicing: a slice's backward writes into a zero-filled full-width gradient.
    x_ru, x_new = x_gates.split([2 * size, size], dim=-1)
    h_ru, h_new = h_gates.split([2 * size, size], dim=-1)
    h_out, gates_out, cand_out, h_new_out = out if out is not None else (None,) * 4
    if h_new_out is not None:
        h_new = h_new_out.copy_(h_new)
    gates = torch.add(x_ru, h_ru, out=gates_out).sigmoid_()
    reset, update = gates.split(size, dim=-1)
    cand = torch.addcmul(x_new, reset, h_new, out=cand_out).tanh_()
    if h is None:
        return torch.addcmul(cand, update, cand, value=-1, out=h_out)
    return torch.addcmul(cand, update, h - cand, out=h_out)


def gru_cell_backward(d_h: torch.Tensor, h: torch.Tensor | None, gates: torch.Tensor,
                      cand: torch.Tensor, h_cand: torch.Tensor, d_x_out: torch.Tensor,
                      d_h_out: torch.Tensor) -> torch.Tensor:
    """Gradients of :func:`gru_cell` given what it kept in ``out`` ([r; z], n, W_hn h + b_hn):
    those of W_i x + b_i into ``d_x_out`` and of W_h h + b_h into ``d_h_out`` (..., rows,
    3*hidden); returns d h' · z, the part of h's gradient that skips the matmul. h None means zeros."""
    size = cand.size(-1)
    reset, update = gates[..., :size], gates[..., size:]
    d_direct = d_h * update
    d_cand = d_h - d_direct
    d_new = d_x_out[..., 2 * size:]  # of the new gate's pre-activation
    torch.addcmul(d_cand, d_cand * cand, cand, value=-1, out=d_new)
    torch.mul(d_new, h_cand, out=d_x_out[..., :size])
    if h is None:
        torch.mul(d_h, cand, out=d_x_out[..., size:2 * size]).neg_()
    else:
        torch.mul(d_h, h - cand, out=d_x_out[..., size:2 * size])
    d_x_out[..., :2 * size].mul_(torch.addcmul(gates, gates, gates, value=-1))
    d_h_out[..., :2 * size] = d_x_out[..., :2 * size]
    torch.mul(d_new, reset, out=d_h_out[..., 2 * size:])
    return d_direct
