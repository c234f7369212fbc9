"""The GRU decoder with Bahdanau attention (d2l.ai's ``Seq2SeqAttentionDecoder``, state explicit)."""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from nmt.attention import AdditiveAttention


class DecoderState(NamedTuple):
    """What one decoding step needs; batch is dim 0 except for ``hidden`` (dim 1).

    hidden: GRU states, shape (layers, batch, hidden)
    memory: encoder outputs (attention values), shape (batch, src_len, hidden)
    proj_keys: attention keys projected once, shape (batch, src_len, hidden)
    src_mask: True at real source tokens, shape (batch, src_len)
    """

    hidden: torch.Tensor
    memory: torch.Tensor
    proj_keys: torch.Tensor
    src_mask: torch.Tensor

    def select(self, index: torch.Tensor) -> DecoderState:
        """Keep (or repeat) the sentences at ``index`` (shape (new_batch,)), e.g. for beams."""
        return DecoderState(self.hidden.index_select(1, index), self.memory.index_select(0, index),
                            self.proj_keys.index_select(0, index), self.src_mask.index_select(0, index))


class AttentionGRUDecoder(nn.Module):
    """At step i: attend with s_{i-1} (top layer), feed [context_i; embed(y_{i-1})] to the GRU."""

    def __init__(self, vocab_size: int, embed_size: int, hidden_size: int, layers: int,
                 dropout: float, pad_id: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_size, padding_idx=pad_id)
        self.attention = AdditiveAttention(hidden_size, hidden_size, hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.rnn = nn.GRU(hidden_size + embed_size, hidden_size, num_layers=layers,
                          batch_first=True, dropout=dropout if layers > 1 else 0.0)

    def init_state(self, memory: torch.Tensor, final: torch.Tensor,
                   src_mask: torch.Tensor) -> DecoderState:
        """:param memory: encoder outputs, shape (batch, src_len, hidden)
        :param final: encoder final states, shape (layers, batch, hidden)
        :param src_mask: shape (batch, src_len)"""
        return DecoderState(final.contiguous(), memory, self.attention.project_keys(memory), src_mask)

    def _step(self, embedded: torch.Tensor, state: DecoderState
              ) -> tuple[torch.Tensor, DecoderState, torch.Tensor]:
        context, weights = self.attention(state.hidden[-1], state.proj_keys, state.memory,
                                          state.src_mask)  # (batch, hidden), (batch, src_len)
        rnn_in = torch.cat([context, embedded], dim=-1).unsqueeze(1)  # (batch, 1, hidden+embed)
        output, hidden = self.rnn(rnn_in, state.hidden)
        return output.squeeze(1), state._replace(hidden=hidden), weights

    def step(self, prev_tokens: torch.Tensor, state: DecoderState
             ) -> tuple[torch.Tensor, DecoderState, torch.Tensor]:
        """One decoding step.

        :param prev_tokens: y_{i-1}, shape (batch,)
        :return: output s_i, shape (batch, hidden); the new state; attention, shape (batch, src_len)
        """
        return self._step(self.dropout(self.embedding(prev_tokens)), state)

    def forward(self, tgt_in: torch.Tensor, state: DecoderState
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced decoding of a whole target batch.

        :param tgt_in: BOS-prefixed target ids, shape (batch, tgt_len)
        :return: outputs, shape (batch, tgt_len, hidden); attention, shape (batch, tgt_len, src_len)
        """
        embedded = self.dropout(self.embedding(tgt_in))  # (batch, tgt_len, embed), once for all steps
        outputs, weights = [], []
        for i in range(tgt_in.size(1)):
            output, state, w = self._step(embedded[:, i], state)
            outputs.append(output)
            weights.append(w)
        return torch.stack(outputs, dim=1), torch.stack(weights, dim=1)
