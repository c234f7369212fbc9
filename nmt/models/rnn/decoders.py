"""GRU decoders with attention, stepped one piece at a time (state explicit).

Two wirings of the same parts (embeddings, attention (additive or scaled dot-product, see
:mod:`nmt.models.attention`), a stacked GRU):

- :class:`BahdanauDecoder` is d2l.ai's ``Seq2SeqAttentionDecoder``: attend with s_{i-1},
  feed [c_i; embed(y_{i-1})] to the GRU, and the generator reads s_i.
- :class:`InputFeedingDecoder` is Luong et al. (2015)'s input feeding, OpenNMT-py's RNN
  decoder: the GRU reads [embed(y_{i-1}); h~_{i-1}], attends with its new state s_i, and the
  generator reads h~_i = tanh(W_c [c_i; s_i]). The query knows y_{i-1}, and the output sees
  the context directly.

With ``kernels`` ``fast`` (:mod:`nmt.models.kernels`) teacher forcing runs the GRU cell by cell
(:func:`nmt.models.rnn.gru_cell.gru_cell`) on ``self.rnn``'s own weights, so that the embedding part of
layer 1's input projection, which does not depend on earlier steps, is one matmul for all
steps rather than one per step; on CPU the input-feeding decoder with additive attention runs
that with a hand-written backward (:mod:`nmt.models.rnn.bptt`). With ``reference`` it is :meth:`step`
once per target position, as decoding runs, under autograd.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from nmt.models.attention import AdditiveAttention, make_attention
from nmt.models.dropout import Dropout, dropout, dropout_mask
from nmt.models.interface import join_rows, sentence_rows
from nmt.models.kernels import bptt_runs
from nmt.models.pieces import PieceEmbedding, PieceMap
from nmt.models.rnn.bptt import teacher_forced
from nmt.models.rnn.gru_cell import gru_cell


class DecoderState(NamedTuple):
    """What one decoding step needs; batch (rows) is dim 0 except for ``hidden`` (dim 1).

    hidden: GRU states, shape (layers, batch, hidden)
    memory: encoder outputs (attention values), shape (batch, src_len, hidden)
    proj_keys: attention keys projected once, shape (batch, src_len, hidden)
    src_mask: True at real source tokens, shape (batch, src_len)
    feed: the last attentional output h~_{i-1}, shape (batch, hidden); zeros at the start
        (unused by :class:`BahdanauDecoder`)
    beams: consecutive rows per sentence (beam search's); each row holds its source's copy
    """

    hidden: torch.Tensor
    memory: torch.Tensor
    proj_keys: torch.Tensor
    src_mask: torch.Tensor
    feed: torch.Tensor
    beams: int = 1

    def select(self, index: torch.Tensor) -> DecoderState:
        """Keep the sentences at ``index`` (shape (kept,)) with all their rows."""
        return self._rows(sentence_rows(index, self.beams), self.beams)

    def repeat_beams(self, beams: int) -> DecoderState:
        """Each row ``beams`` times, consecutively."""
        rows = torch.arange(self.feed.size(0), device=self.feed.device).repeat_interleave(beams)
        return self._rows(rows, self.beams * beams)

    def reorder_beams(self, index: torch.Tensor) -> DecoderState:
        """The rows at ``index``, each from its own sentence's rows: memory, keys and mask are
        equal across those rows, so they stay where they are."""
        return self._replace(hidden=self.hidden.index_select(1, index),
                             feed=self.feed.index_select(0, index))

    def join(self, other: DecoderState) -> DecoderState:
        """This state's sentences, then ``other``'s, the sources padded to the longer one."""
        assert self.beams == other.beams, "joined states have as many rows per sentence"
        return DecoderState(join_rows(self.hidden, other.hidden, row_dim=1),
                            join_rows(self.memory, other.memory, 1),
                            join_rows(self.proj_keys, other.proj_keys, 1),
                            join_rows(self.src_mask, other.src_mask, 1), join_rows(self.feed, other.feed),
                            self.beams)

    def _rows(self, rows: torch.Tensor, beams: int) -> DecoderState:
        return DecoderState(self.hidden.index_select(1, rows), self.memory.index_select(0, rows),
                            self.proj_keys.index_select(0, rows), self.src_mask.index_select(0, rows),
                            self.feed.index_select(0, rows), beams)


class _AttentionGRUDecoder(nn.Module):
    """The shared parts; subclasses wire them in :meth:`_step` and :meth:`forward`."""

    def __init__(self, vocab_size: int, embed_size: int, hidden_size: int, layers: int,
                 dropout: float, pad_id: int, pieces: PieceMap | None = None,
                 attention: str = "additive") -> None:
        """``pieces``: the target pieces with embedding rows; every piece if None.
        ``attention``: the scoring, ``additive`` or ``dot``."""
        super().__init__()
        self.kernels = "fast"  # see nmt.models.kernels
        self.embedding = PieceEmbedding(vocab_size, embed_size, pad_id, pieces)
        self.attention = make_attention(attention, hidden_size)
        self.dropout = Dropout(dropout)
        self.rnn = nn.GRU(hidden_size + embed_size, hidden_size, num_layers=layers,
                          batch_first=True, dropout=dropout if layers > 1 else 0.0)

    def init_state(self, memory: torch.Tensor, final: torch.Tensor,
                   src_mask: torch.Tensor) -> DecoderState:
        """:param memory: encoder outputs, shape (batch, src_len, hidden)
        :param final: encoder final states, shape (layers, batch, hidden)
        :param src_mask: shape (batch, src_len)"""
        return DecoderState(final.contiguous(), memory, self.attention.project_keys(memory), src_mask,
                            memory.new_zeros(memory.size(0), self.rnn.hidden_size))

    def step(self, prev_tokens: torch.Tensor, state: DecoderState, need_attention: bool = True
             ) -> tuple[torch.Tensor, DecoderState, torch.Tensor]:
        """One decoding step.

        :param prev_tokens: y_{i-1}, shape (batch,)
        :param need_attention: unused: the attention's context feeds the step, so it is always computed
        :return: what the generator reads, shape (batch, hidden); the new state;
            attention, shape (batch, src_len)
        """
        return self._step(self.dropout(self.embedding(prev_tokens)), state)

    def _step(self, embedded: torch.Tensor, state: DecoderState
              ) -> tuple[torch.Tensor, DecoderState, torch.Tensor]:
        raise NotImplementedError

    def forward(self, tgt_in: torch.Tensor, state: DecoderState
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced decoding of a whole target batch.

        :param tgt_in: BOS-prefixed target ids, shape (batch, tgt_len)
        :return: what the generator reads, shape (batch, tgt_len, hidden);
            attention, shape (batch, tgt_len, src_len)
        """
        if self.kernels == "reference":
            return self._stepped(tgt_in, state)
        return self._teacher_forced(tgt_in, state)

    def _teacher_forced(self, tgt_in: torch.Tensor, state: DecoderState
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def _stepped(self, tgt_in: torch.Tensor, state: DecoderState
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward` as :meth:`step` once per position: the reference path."""
        outputs, weights = [], []
        for prev in tgt_in.unbind(1):
            out, state, w = self.step(prev, state)
            outputs.append(out)
            weights.append(w)
        return torch.stack(outputs, dim=1), torch.stack(weights, dim=1)

    def _attend(self, query: torch.Tensor, state: DecoderState) -> tuple[torch.Tensor, torch.Tensor]:
        """:return: context, shape (batch, hidden); weights, shape (batch, src_len)"""
        return self.attention(query, state.proj_keys, state.memory, state.src_mask)

    def _embed_gates(self, tgt_in: torch.Tensor, columns: slice) -> torch.Tensor:
        """Layer 1's input projection of the embeddings (at ``columns`` of its input) for all
        steps, bias included: shape (batch, tgt_len, 3*hidden)."""
        embedded = self.dropout(self.embedding(tgt_in))  # (batch, tgt_len, embed)
        return F.linear(embedded, self.rnn.weight_ih_l0[:, columns], self.rnn.bias_ih_l0)

    def _cells(self, gates: torch.Tensor, hidden: list[torch.Tensor],
               masks: torch.Tensor | None = None) -> torch.Tensor:
        """Advance every GRU layer one step, updating ``hidden`` (per layer (batch, hidden)).

        :param gates: layer 1's input projection W_i x + b_i, shape (batch, 3*hidden)
        :param masks: dropout masks between layers, shape (layers-1, batch, hidden); drawn
            here if None
        :return: the top layer's new state, shape (batch, hidden)
        """
        rnn = self.rnn
        for layer in range(rnn.num_layers):
            if layer:  # nn.GRU's dropout between layers
                below = (dropout(hidden[layer - 1], rnn.dropout, self.training) if masks is None
                         else hidden[layer - 1] * masks[layer - 1])
                gates = F.linear(below, getattr(rnn, f"weight_ih_l{layer}"),
                                 getattr(rnn, f"bias_ih_l{layer}"))
            h_gates = F.linear(hidden[layer], getattr(rnn, f"weight_hh_l{layer}"),
                               getattr(rnn, f"bias_hh_l{layer}"))
            hidden[layer] = gru_cell(gates, h_gates, hidden[layer])
        return hidden[-1]


class BahdanauDecoder(_AttentionGRUDecoder):
    """At step i: attend with s_{i-1} (top layer), feed [c_i; embed(y_{i-1})] to the GRU;
    the generator reads s_i."""

    def _step(self, embedded: torch.Tensor, state: DecoderState
              ) -> tuple[torch.Tensor, DecoderState, torch.Tensor]:
        context, weights = self._attend(state.hidden[-1], state)
        rnn_in = torch.cat([context, embedded], dim=-1).unsqueeze(1)  # (batch, 1, hidden+embed)
        output, hidden = self.rnn(rnn_in, state.hidden)
        return output.squeeze(1), state._replace(hidden=hidden), weights

    def _teacher_forced(self, tgt_in: torch.Tensor, state: DecoderState
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        size = self.rnn.hidden_size
        embed_gates = self._embed_gates(tgt_in, slice(size, None))
        w_context = self.rnn.weight_ih_l0[:, :size]
        hidden = list(state.hidden.unbind(0))
        outputs, weights = [], []
        for gates in embed_gates.unbind(1):  # one gradient buffer for all steps, not one per step
            context, w = self._attend(hidden[-1], state)
            outputs.append(self._cells(gates + F.linear(context, w_context), hidden))
            weights.append(w)
        return torch.stack(outputs, dim=1), torch.stack(weights, dim=1)


class InputFeedingDecoder(_AttentionGRUDecoder):
    """At step i: s_i = GRU([embed(y_{i-1}); h~_{i-1}]), attend with s_i,
    h~_i = tanh(W_c [c_i; s_i]); the generator reads h~_i and the next step is fed it."""

    def __init__(self, vocab_size: int, embed_size: int, hidden_size: int, layers: int,
                 dropout: float, pad_id: int, pieces: PieceMap | None = None,
                 attention: str = "additive") -> None:
        super().__init__(vocab_size, embed_size, hidden_size, layers, dropout, pad_id, pieces, attention)
        self.output_layer = nn.Linear(2 * hidden_size, hidden_size)  # W_c, Luong et al. eq. (5)

    def _attentional(self, top: torch.Tensor, state: DecoderState
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """:return: h~_i, shape (batch, hidden); attention weights, shape (batch, src_len)"""
        context, weights = self._attend(top, state)
        return torch.tanh(self.output_layer(torch.cat([context, top], dim=-1))), weights

    def _step(self, embedded: torch.Tensor, state: DecoderState
              ) -> tuple[torch.Tensor, DecoderState, torch.Tensor]:
        rnn_in = torch.cat([embedded, self.dropout(state.feed)], dim=-1).unsqueeze(1)
        output, hidden = self.rnn(rnn_in, state.hidden)
        state = state._replace(hidden=hidden)
        out, weights = self._attentional(output.squeeze(1), state)
        return out, state._replace(feed=out), weights

    def _teacher_forced(self, tgt_in: torch.Tensor, state: DecoderState
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """By :mod:`nmt.models.rnn.bptt`'s hand-written backward, or unrolled for autograd (off CPU,
        under autocast, with dot-product attention)."""
        embed_size = self.embedding.embedding_dim
        embed_gates = self._embed_gates(tgt_in, slice(None, embed_size))
        feed_masks, layer_masks = self._dropout_masks(embed_gates)
        if not (bptt_runs(self.kernels, embed_gates) and isinstance(self.attention, AdditiveAttention)):
            return self._unrolled(embed_gates, state, feed_masks, layer_masks)
        rnn = self.rnn
        cells = [(rnn.weight_ih_l0[:, embed_size:], None, rnn.weight_hh_l0, rnn.bias_hh_l0)]
        cells += [tuple(getattr(rnn, f"{name}_l{layer}") for name in
                        ("weight_ih", "bias_ih", "weight_hh", "bias_hh")) for layer in range(1, rnn.num_layers)]
        attention = self.attention
        return teacher_forced(embed_gates, state.hidden, state.feed, state.memory, state.proj_keys,
                              state.src_mask, feed_masks, layer_masks, attention.query_proj.weight,
                              attention.score.weight.squeeze(0), self.output_layer.weight,
                              self.output_layer.bias, cells)

    def _dropout_masks(self, embed_gates: torch.Tensor
                       ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Every step's dropout masks, drawn at once: the fed h~'s, shape (steps, batch, hidden),
        and those between GRU layers, shape (layers-1, steps, batch, hidden); None when off."""
        batch, steps, _ = embed_gates.shape
        size, layers = self.rnn.hidden_size, self.rnn.num_layers
        p_feed, p_layers = self.dropout.p, self.rnn.dropout
        feed = (dropout_mask((steps, batch, size), p_feed, embed_gates)
                if self.training and p_feed else None)
        between = (dropout_mask((layers - 1, steps, batch, size), p_layers, embed_gates)
                   if self.training and p_layers and layers > 1 else None)
        return feed, between

    def _unrolled(self, embed_gates: torch.Tensor, state: DecoderState,
                  feed_masks: torch.Tensor | None, layer_masks: torch.Tensor | None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward` one step at a time, for autograd."""
        w_feed = self.rnn.weight_ih_l0[:, self.embedding.embedding_dim:]
        hidden, feed = list(state.hidden.unbind(0)), state.feed
        outputs, weights = [], []
        for t, gates in enumerate(embed_gates.unbind(1)):  # one gradient buffer for all steps
            fed = feed * feed_masks[t] if feed_masks is not None else feed
            top = self._cells(gates + F.linear(fed, w_feed), hidden,
                              layer_masks[:, t] if layer_masks is not None else None)
            feed, w = self._attentional(top, state)
            outputs.append(feed)
            weights.append(w)
        return torch.stack(outputs, dim=1), torch.stack(weights, dim=1)


DECODERS = {"input_feeding": InputFeedingDecoder, "bahdanau": BahdanauDecoder}

