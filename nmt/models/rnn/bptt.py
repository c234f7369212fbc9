"""Backpropagation through time by hand: the decoder's teacher-forced pass and the encoder.

Autograd records every operator of every GRU step and replays its backward one node at a
time: split and chunk gradients are concatenated, a state read three times sums three
gradients, and each weight's gradient is a small matmul per step. Here the forward records
nothing and keeps only what the backward reads (states, gates, attention weights), and the
backward writes each step's gate gradients into (steps, rows, 3*hidden) buffers, so that
every weight's gradient is one matmul over all steps after the loop.

- :func:`teacher_forced` is :class:`~nmt.models.rnn.decoders.InputFeedingDecoder`'s unrolled autograd
  path, with the same dropout masks; it also projects the top state once per step for the
  query, the output layer and the next step's recurrent gates (one matmul forward, one
  back), and accumulates the attention keys' and values' gradients in place.
- :func:`packed_gru` is a packed, stacked, optionally bidirectional ``nn.GRU`` (PyTorch's
  CPU GRU is autograd over per-step operators too), both directions stepped together.

Tests check outputs and gradients against autograd (the unrolled decoder, ``nn.GRU``) and
numerical gradients.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from nmt.models.attention import masked_softmax, sigmoid_2x
from nmt.models.rnn.gru_cell import gru_cell, gru_cell_backward


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
        keys2 = proj_keys * 2  # the attention's σ(2x) form, see nmt/models/attention.py
        v_sum = v.sum()
        for layer in range(layers):
            states[layer][0] = hidden[layer]
        top_gates = torch.addmm(b_hh[-1], hidden[-1], w_hh[-1].t())
        below = feed
        for t in range(steps):
            for layer in range(layers):
                masks = feed_masks if layer == 0 else layer_masks
                x = inputs[layer][t]
                if masks is None:
                    x.copy_(below)
                else:
                    torch.mul(below, masks[t] if layer == 0 else masks[layer - 1, t], out=x)
                x_gates = torch.addmm(embed_gates[:, t] if layer == 0 else b_in[layer], x, w_in[layer].t())
                h_gates = (top_gates if layer == layers - 1
                           else torch.addmm(b_hh[layer], states[layer][t], w_hh[layer].t()))
                gru_cell(x_gates, h_gates, states[layer][t], (states[layer][t + 1], gates[layer][t],
                                                              cands[layer][t], h_cands[layer][t]))
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
            s = sigmoid_2x(keys2, queries[t], doubled=True)  # recomputed: memory
            d_v.addmv_(s.view(-1, attn).t(), d_score.view(-1))
            d_score_sum += d_score.sum()
            slope = s.addcmul_(s, s, value=-1)  # s (1 - s): σ's slope, (batch, src_len, attn)
            d_top[t + 1, :, :attn] = torch.bmm(d_score.unsqueeze(1), slope).squeeze(1).mul_(v4)
            d_keys.addcmul_(d_score.unsqueeze(2), slope)
            d_h = torch.addmm(d_states[-1], d_top[t + 1], top_w)
            for layer in reversed(range(layers)):
                top = layer == layers - 1
                d_gates_h = d_top[t, :, attn + size:] if top else d_rec[layer][t]
                d_direct = gru_cell_backward(d_h, states[layer][t], gates[layer][t], cands[layer][t],
                                          h_cands[layer][t], d_in[layer][t], d_gates_h)
                d_states[layer] = d_direct if top else torch.addmm(d_direct, d_gates_h, w_hh[layer])
                d_x = d_in[layer][t] @ w_in[layer]
                masks = feed_masks if layer == 0 else layer_masks
                if masks is not None:
                    d_x.mul_(masks[t] if layer == 0 else masks[layer - 1, t])
                if layer:
                    d_h = d_x.add_(d_states[layer - 1])
                else:
                    d_feed = d_x
        return _gradients(d_top, d_in, d_rec, d_states, d_feed, d_keys.mul_(v4), d_memory,
                          d_v.mul_(2).sub_(d_score_sum), top_w, contexts, states, inputs, size, attn)


class Packing(NamedTuple):
    """Where each token of a padded batch goes in the packed, time-major layout of
    :func:`packed_gru`: sentences sorted longest first, step t's rows are the
    ``batch_sizes[t]`` sentences still running.

    index: each packed row's position in the flattened (batch * steps) padded batch, (tokens,)
    rev: the row of the same sentence at the mirrored step len - 1 - t, (tokens,)
    prev: the row of the step before, or ``tokens`` (a zero row) at step 0, (tokens,)
    last: each sentence's last row, in the original batch order, (batch,)
    """

    batch_sizes: list[int]
    index: torch.Tensor
    rev: torch.Tensor
    prev: torch.Tensor
    last: torch.Tensor

    @staticmethod
    def of(lengths: torch.Tensor, steps: int) -> Packing:
        """:param lengths: valid lengths (>= 1), shape (batch,); steps: the padded length"""
        order = torch.argsort(lengths, descending=True, stable=True)
        sorted_lengths = lengths[order]
        running = torch.arange(steps, device=lengths.device).unsqueeze(1) < sorted_lengths  # (steps, batch)
        t, b = running.nonzero(as_tuple=True)  # time-major
        sizes = running.sum(1)
        sizes = sizes[sizes > 0]
        offsets = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)])
        rev = offsets[sorted_lengths[b] - 1 - t] + b
        prev = torch.where(t > 0, offsets[(t - 1).clamp(min=0)] + b, t.numel())
        last = offsets[sorted_lengths - 1] + torch.arange(len(order), device=lengths.device)
        return Packing(sizes.tolist(), order[b] * steps + t, rev, prev,
                       last[torch.argsort(order)])


def packed_gru(x: torch.Tensor, packing: Packing, layer_masks: torch.Tensor | None,
               cells: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]
               ) -> torch.Tensor:
    """A stacked, optionally bidirectional GRU over a packed batch, with the backward by hand.

    :param x: packed inputs (see :class:`Packing`), shape (tokens, embed)
    :param layer_masks: scaled dropout masks of each layer's outputs before the next reads
        them, shape (layers-1, tokens, directions*hidden), or None
    :param cells: per layer ``nn.GRU``'s (W_i, b_i, W_h, b_h) stacked over directions:
        (directions, 3*hidden, in), (directions, 3*hidden), (directions, 3*hidden, hidden),
        (directions, 3*hidden)
    :return: every layer's outputs, shape (layers, directions, tokens, hidden); the reverse
        direction's rows hold the reversed sentence (its row i is the state at ``rev[i]``)
    """
    return _PackedGRU.apply(x, packing.rev, packing.prev, layer_masks, packing.batch_sizes,
                            *(w for cell in cells for w in cell))


class _PackedGRU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, rev, prev, layer_masks, batch_sizes, *cells):
        layers = len(cells) // 4
        directions, size = cells[2].size(0), cells[2].size(2)
        offsets = _offsets(batch_sizes)
        outputs = x.new_empty(layers, directions, x.size(0), size)
        inputs, saved = [], []
        for layer in range(layers):
            w_ih, b_ih, w_hh, b_hh = cells[4 * layer:4 * layer + 4]
            masks = layer_masks[layer - 1] if layer and layer_masks is not None else None
            inp = _layer_input(outputs[layer - 1] if layer else x, rev, masks, directions, layer == 0)
            x_gates = torch.baddbmm(b_ih.unsqueeze(1), inp, w_ih.transpose(1, 2))  # (dirs, tokens, 3h)
            gates = x.new_empty(directions, x.size(0), 2 * size)
            cands, h_cands = (x.new_empty(directions, x.size(0), size) for _ in range(2))
            out = outputs[layer]
            for t, n in enumerate(batch_sizes):
                rows = slice(offsets[t], offsets[t] + n)
                h = out[:, offsets[t - 1]:offsets[t - 1] + n] if t else None
                h_gates = (torch.baddbmm(b_hh.unsqueeze(1), h, w_hh.transpose(1, 2)) if t
                           else b_hh.unsqueeze(1).expand(directions, n, 3 * size))
                gru_cell(x_gates[:, rows], h_gates, h,
                         (out[:, rows], gates[:, rows], cands[:, rows], h_cands[:, rows]))
            inputs.append(inp)
            saved += [gates, cands, h_cands]
        ctx.save_for_backward(rev, prev, layer_masks, outputs, *cells, *inputs, *saved)
        ctx.batch_sizes = batch_sizes
        return outputs

    @staticmethod
    def backward(ctx, d_outputs):
        rev, prev, layer_masks, outputs, *rest = ctx.saved_tensors
        layers, directions, tokens, size = outputs.shape
        cells, inputs, saved = rest[:4 * layers], rest[4 * layers:5 * layers], rest[5 * layers:]
        batch_sizes = ctx.batch_sizes
        offsets = _offsets(batch_sizes)
        d_outputs = d_outputs.clone()  # each layer's gets the layer above's input gradient added
        d_cells: list[torch.Tensor] = []
        for layer in reversed(range(layers)):
            w_ih, _, w_hh, _ = cells[4 * layer:4 * layer + 4]
            gates, cands, h_cands = saved[3 * layer:3 * layer + 3]
            out, d_out = outputs[layer], d_outputs[layer]
            d_x_gates = out.new_empty(directions, tokens, 3 * size)
            d_h_gates = out.new_empty(directions, tokens, 3 * size)
            carry = out.new_zeros(directions, batch_sizes[0], size)  # reaching step t from t+1
            for t in reversed(range(len(batch_sizes))):
                n = batch_sizes[t]
                rows = slice(offsets[t], offsets[t] + n)
                d_h = d_out[:, rows].add_(carry[:, :n])
                h = out[:, offsets[t - 1]:offsets[t - 1] + n] if t else None
                d_direct = gru_cell_backward(d_h, h, gates[:, rows], cands[:, rows], h_cands[:, rows],
                                          d_x_gates[:, rows], d_h_gates[:, rows])
                if t:
                    torch.baddbmm(d_direct, d_h_gates[:, rows], w_hh, out=carry[:, :n])
            h_prev = torch.cat([out, out.new_zeros(directions, 1, size)], 1)[:, prev]  # (dirs, tokens, h)
            d_cells[:0] = [d_x_gates.transpose(1, 2) @ inputs[layer], d_x_gates.sum(1),
                           d_h_gates.transpose(1, 2) @ h_prev, d_h_gates.sum(1)]
            d_in = d_x_gates @ w_ih  # (dirs, tokens, in)
            d_in = d_in[0] + d_in[1][rev] if directions == 2 else d_in[0]  # of the forward-order input
            if not layer:
                return (d_in, None, None, None, None, *d_cells)
            if layer_masks is not None:
                d_in.mul_(layer_masks[layer - 1])
            d_outputs[layer - 1, 0] += d_in[:, :size]
            if directions == 2:
                d_outputs[layer - 1, 1] += d_in[:, size:][rev]


def _offsets(batch_sizes: list[int]) -> list[int]:
    offsets = [0]
    for n in batch_sizes:
        offsets.append(offsets[-1] + n)
    return offsets


def _layer_input(below: torch.Tensor, rev: torch.Tensor, masks: torch.Tensor | None,
                 directions: int, first: bool) -> torch.Tensor:
    """What each direction of a layer reads, shape (directions, tokens, in): the packed
    inputs (first layer) or the layer below's outputs in forward order, [forward; backward]
    and dropped out; the reverse direction reads them reversed."""
    if first:
        forward = below
    elif directions == 2:
        forward = torch.cat([below[0], below[1][rev]], dim=1)
    else:
        forward = below[0]
    if masks is not None:
        forward = forward * masks
    return torch.stack([forward, forward[rev]] if directions == 2 else [forward])  # a copy: saved


def _gradients(d_top, d_in, d_rec, d_states, d_feed, d_keys, d_memory, d_v, top_w,
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
    s = sigmoid_2x(keys2, query, doubled=True)
    return masked_softmax((s @ v).mul_(2).sub_(v_sum), src_mask)
