"""The input-feeding decoder's teacher-forced pass, with backpropagation through time by hand.

Autograd records every operator of every decoder step and replays its backward one node at a
time: split and chunk gradients are concatenated, a state read three times sums three
gradients, and each weight's gradient is a small matmul per step. Here the forward records
nothing and keeps only what the backward reads (states, gates, attention weights), and:

- each step's gate gradients go into (steps, batch, 3*hidden) buffers, and every weight's
  gradient is one matmul over all steps after the loop;
- the top state is projected once per step for the query, the output layer and the next
  step's recurrent gates (one matmul forward, one back);
- the attention keys' and values' gradients accumulate in place.

The arithmetic is :class:`~nmt.decoders.InputFeedingDecoder`'s unrolled autograd path, with
the same dropout masks; tests check outputs and gradients against it.
"""
from __future__ import annotations

import torch

from nmt.attention import masked_softmax


def teacher_forced(embed_gates: torch.Tensor, hidden: torch.Tensor, feed: torch.Tensor,
                   memory: torch.Tensor, proj_keys: torch.Tensor, src_mask: torch.Tensor,
                   feed_masks: torch.Tensor | None, layer_masks: torch.Tensor | None,
                   w_query: torch.Tensor, v: torch.Tensor, w_out: torch.Tensor, b_out: torch.Tensor,
                   cells: list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]]
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the decoder over every target step.

    :param embed_gates: layer 1's input projection of the embeddings, bias included,
        shape (batch, steps, 3*hidden)
    :param hidden: initial GRU states, shape (layers, batch, hidden)
    :param feed: initial h~, shape (batch, hidden)
    :param memory: encoder outputs, shape (batch, src_len, hidden)
    :param proj_keys: U_a h, shape (batch, src_len, attn)
    :param src_mask: True at real source tokens, shape (batch, src_len)
    :param feed_masks: scaled dropout masks of the fed h~, shape (steps, batch, hidden), or None
    :param layer_masks: scaled dropout masks between layers, shape (layers-1, steps, batch, hidden)
    :param w_query: W_a, shape (attn, hidden); v: v_a, shape (attn,)
    :param w_out: W_c over [context; state], shape (hidden, 2*hidden); b_out: shape (hidden,)
    :param cells: per layer (W_i, b_i, W_h, b_h); layer 1's W_i is the fed h~'s columns and
        its b_i is None (both the embeddings' columns and b_i are in ``embed_gates``)
    :return: h~ per step, shape (batch, steps, hidden); attention, shape (batch, steps, src_len)
    """
    return _TeacherForced.apply(embed_gates, hidden, feed, memory, proj_keys, src_mask,
                                feed_masks, layer_masks, w_query, v, w_out, b_out,
                                *(w for cell in cells for w in cell))


class _TeacherForced(torch.autograd.Function):
    @staticmethod
    def forward(ctx, embed_gates, hidden, feed, memory, proj_keys, src_mask, feed_masks,
                layer_masks, w_query, v, w_out, b_out, *cells):
        batch, steps, _ = embed_gates.shape
        layers, size = hidden.size(0), hidden.size(2)
        w_in, b_in, w_hh, b_hh = cells[0::4], cells[1::4], cells[2::4], cells[3::4]
        new = embed_gates.new_empty
        # states[l][t] is layer l's state before step t; inputs[l][t] what its W_i read at t
        states = [new(steps + 1, batch, size) for _ in range(layers)]
        inputs = [new(steps, batch, size) for _ in range(layers)]
        gates = [new(steps, batch, 2 * size) for _ in range(layers)]  # reset, update
        cands = [new(steps, batch, size) for _ in range(layers)]  # the new gate n
        h_cands = [new(steps, batch, size) for _ in range(layers)]  # W_hn h + b_hn
        queries, contexts = new(steps, batch, w_query.size(0)), new(steps, batch, size)
        outputs, weights = new(batch, steps, size), new(batch, steps, memory.size(1))
        top_w, top_b = _top_projection(w_query, w_out, b_out, w_hh[-1], b_hh[-1])
        keys2 = proj_keys * 2  # the attention's σ(2x) form, see nmt/attention.py
        v_sum = v.sum()
        for layer in range(layers):
            states[layer][0] = hidden[layer]
        top_gates = torch.addmm(b_hh[-1], hidden[-1], w_hh[-1].t())
        below = feed
        for t in range(steps):
            for layer in range(layers):
                masks = feed_masks if layer == 0 else None if layer_masks is None else layer_masks[layer - 1]
                x = inputs[layer][t]
                torch.mul(below, masks[t], out=x) if masks is not None else x.copy_(below)
                x_gates = torch.addmm(embed_gates[:, t] if layer == 0 else b_in[layer], x, w_in[layer].t())
                h_gates = (top_gates if layer == layers - 1
                           else torch.addmm(b_hh[layer], states[layer][t], w_hh[layer].t()))
                _cell(x_gates, h_gates, states[layer][t], states[layer][t + 1],
                      gates[layer][t], cands[layer][t], h_cands[layer][t])
                below = states[layer][t + 1]
            query, out_state, top_gates = torch.addmm(top_b, below, top_w.t()).split(
                [w_query.size(0), size, 3 * size], dim=1)
            queries[t] = query
            alpha = _attention(keys2, query, v, v_sum, src_mask)  # (batch, src_len)
            weights[:, t] = alpha
            torch.bmm(alpha.unsqueeze(1), memory, out=contexts[t].unsqueeze(1))
            below = torch.addmm(out_state, contexts[t], w_out[:, :size].t()).tanh_()
            outputs[:, t] = below
        ctx.mark_non_differentiable(weights)
        ctx.save_for_backward(memory, keys2, v, feed_masks, layer_masks, w_query, w_out,
                              top_w, queries, contexts, outputs, weights, *cells,
                              *states, *inputs, *gates, *cands, *h_cands)
        ctx.layers = layers
        return outputs, weights

    @staticmethod
    def backward(ctx, d_outputs, _):
        layers = ctx.layers
        (memory, keys2, v, feed_masks, layer_masks, w_query, w_out, top_w, queries, contexts,
         outputs, weights, *rest) = ctx.saved_tensors
        cells, rest = rest[:4 * layers], rest[4 * layers:]
        w_in, w_hh = cells[0::4], cells[2::4]
        states, inputs, gates, cands, h_cands = (rest[k * layers:(k + 1) * layers] for k in range(5))
        batch, steps, size = outputs.shape
        attn = w_query.size(0)
        new = outputs.new_empty
        # d_top[k]: gradient of the top projection of states[-1][k] (query, output, next gates)
        d_top = outputs.new_zeros(steps + 1, batch, top_w.size(0))
        d_in = [new(steps, batch, 3 * size) for _ in range(layers)]  # of each W_i x + b_i
        d_rec = [new(steps, batch, 3 * size) for _ in range(layers - 1)]  # of W_h h + b_h, below the top
        d_states = [outputs.new_zeros(batch, size) for _ in range(layers)]  # reaching step t's state from t+1
        d_keys, d_memory = torch.zeros_like(keys2), torch.zeros_like(memory)
        d_v, d_score_sum = torch.zeros_like(v), v.new_zeros(())
        d_feed = outputs.new_zeros(batch, size)  # reaching h~_t through step t+1's input
        v4 = v * 4
        for t in reversed(range(steps)):
            out = outputs[:, t]
            d_out = d_top[t + 1, :, attn:attn + size]  # of W_c [c; s] + b_c
            torch.add(d_outputs[:, t], d_feed, out=d_out).addcmul_(d_out * out, out, value=-1)
            d_context = d_out @ w_out[:, :size]  # (batch, hidden)
            alpha = weights[:, t]  # (batch, src_len)
            d_alpha = (memory * d_context.unsqueeze(1)).sum(2)  # bmm's own backward is 5x slower
            d_memory.addcmul_(alpha.unsqueeze(2), d_context.unsqueeze(1))
            d_score = d_alpha.sub_((alpha * d_alpha).sum(1, keepdim=True)).mul_(alpha)
            s = torch.add(keys2, queries[t].unsqueeze(1), alpha=2).sigmoid_()  # recomputed: memory
            d_v.addmv_(s.view(-1, attn).t(), d_score.view(-1))
            d_score_sum += d_score.sum()
            slope = s.addcmul_(s, s, value=-1)  # σ'(2x) / ... = s (1 - s), (batch, src_len, attn)
            d_top[t + 1, :, :attn] = torch.bmm(d_score.unsqueeze(1), slope).squeeze(1).mul_(v4)
            d_keys.addcmul_(d_score.unsqueeze(2), slope)
            d_h = torch.addmm(d_states[-1], d_top[t + 1], top_w)
            for layer in reversed(range(layers)):
                top = layer == layers - 1
                d_gates_h = d_top[t, :, attn + size:] if top else d_rec[layer][t]
                d_direct = _cell_backward(d_h, states[layer][t], gates[layer][t], cands[layer][t],
                                          h_cands[layer][t], d_in[layer][t], d_gates_h)
                d_states[layer] = d_direct if top else torch.addmm(d_direct, d_gates_h, w_hh[layer])
                d_x = d_in[layer][t] @ w_in[layer]
                masks = feed_masks if layer == 0 else layer_masks
                if masks is not None:
                    d_x.mul_(masks[t] if layer == 0 else masks[layer - 1][t])
                if layer:
                    d_h = d_x.add_(d_states[layer - 1])
                else:
                    d_feed = d_x
        return _gradients(ctx, d_top, d_in, d_rec, d_states, d_feed, d_keys.mul_(v4), d_memory,
                          d_v.mul_(2).sub_(d_score_sum), top_w, contexts, states, inputs, size, attn)


def _gradients(ctx, d_top, d_in, d_rec, d_states, d_feed, d_keys, d_memory, d_v, top_w,
               contexts, states, inputs, size, attn):
    """The weights' gradients, one matmul over all steps each, in ``forward``'s input order."""
    def flat(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(-1, t.size(-1))
    layers = len(states)
    d_top_w = flat(d_top).t() @ flat(states[-1])  # (attn + hidden + 3*hidden, hidden)
    d_top_b = flat(d_top).sum(0)
    d_w_out = torch.cat([flat(d_top[1:])[:, attn:attn + size].t() @ flat(contexts),
                         d_top_w[attn:attn + size]], dim=1)
    gates = slice(attn + size, None)  # row 0 projects the initial state for its gates alone
    d_hidden = torch.stack(d_states[:-1] + [torch.addmm(d_states[-1], d_top[0, :, gates], top_w[gates])])
    d_cells = []
    for layer in range(layers):
        d_w_in = flat(d_in[layer]).t() @ flat(inputs[layer])
        d_b_in = flat(d_in[layer]).sum(0) if layer else None
        if layer == layers - 1:
            d_w_hh, d_b_hh = d_top_w[attn + size:], d_top_b[attn + size:]
        else:
            d_w_hh = flat(d_rec[layer]).t() @ flat(states[layer][:-1])
            d_b_hh = flat(d_rec[layer]).sum(0)
        d_cells += [d_w_in, d_b_in, d_w_hh, d_b_hh]
    return (d_in[0].transpose(0, 1), d_hidden, d_feed, d_memory, d_keys, None, None, None,
            d_top_w[:attn], d_v, d_w_out, d_top_b[attn:attn + size], *d_cells)


def _top_projection(w_query, w_out, b_out, w_hh, b_hh) -> tuple[torch.Tensor, torch.Tensor]:
    """The top state's three projections stacked: [W_a; W_c's state columns; W_h] and biases."""
    size = w_out.size(0)
    weight = torch.cat([w_query, w_out[:, size:], w_hh])
    return weight, torch.cat([b_out.new_zeros(w_query.size(0)), b_out, b_hh])


def _attention(keys2: torch.Tensor, query: torch.Tensor, v: torch.Tensor, v_sum: torch.Tensor,
               src_mask: torch.Tensor) -> torch.Tensor:
    """Additive attention's weights, shape (batch, src_len), as ``_AdditiveScores`` computes
    them: v·tanh(x) = 2 σ(2x)·v - Σv; ``keys2`` is 2 U_a h."""
    s = torch.add(keys2, query.unsqueeze(1), alpha=2).sigmoid_()
    return masked_softmax((s @ v).mul_(2).sub_(v_sum), src_mask)


def _cell(x_gates, h_gates, h, h_out, gates_out, cand_out, h_cand_out) -> None:
    """``nn.GRU``'s cell, writing h' and what the backward reads into the ``*_out`` buffers.

    x_gates, h_gates: W_i x + b_i and W_h h + b_h, shape (batch, 3*hidden), gates in
    PyTorch's order (reset, update, new); h: shape (batch, hidden)."""
    size = h.size(1)
    torch.add(x_gates[:, :2 * size], h_gates[:, :2 * size], out=gates_out).sigmoid_()
    h_cand_out.copy_(h_gates[:, 2 * size:])
    torch.addcmul(x_gates[:, 2 * size:], gates_out[:, :size], h_cand_out, out=cand_out).tanh_()
    torch.addcmul(cand_out, gates_out[:, size:], h - cand_out, out=h_out)


def _cell_backward(d_h, h, gates, cand, h_cand, d_x_out, d_h_out) -> torch.Tensor:
    """Gradients of :func:`_cell` for h' = n + z (h - n): those of W_i x + b_i into
    ``d_x_out`` and of W_h h + b_h into ``d_h_out`` (batch, 3*hidden); returns d h' · z,
    the part of h's gradient that skips the matmul."""
    size = h.size(1)
    reset, update = gates[:, :size], gates[:, size:]
    d_direct = d_h * update
    d_cand = d_h - d_direct
    d_new = d_x_out[:, 2 * size:]  # of the new gate's pre-activation
    torch.addcmul(d_cand, d_cand * cand, cand, value=-1, out=d_new)
    torch.mul(d_new, h_cand, out=d_x_out[:, :size])
    torch.mul(d_h, h - cand, out=d_x_out[:, size:2 * size])
    d_x_out[:, :2 * size].mul_(torch.addcmul(gates, gates, gates, value=-1))
    d_h_out[:, :2 * size] = d_x_out[:, :2 * size]
    torch.mul(d_new, reset, out=d_h_out[:, 2 * size:])
    return d_direct
