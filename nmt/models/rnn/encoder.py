"""The recurrent encoder: embeddings and a multi-layer (optionally bidirectional) GRU.

In CPU training with ``kernels`` ``fast`` (:mod:`nmt.models.kernels`) the GRU runs as
:func:`nmt.models.rnn.bptt.packed_gru` on ``nn.GRU``'s own weights (a hand-written backward); elsewhere
as ``nn.GRU`` itself (cuDNN on CUDA).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from nmt.models.dropout import Dropout, dropout_mask
from nmt.models.kernels import bptt_runs
from nmt.models.pieces import PieceEmbedding, PieceMap
from nmt.models.rnn.bptt import Packing, packed_gru


class GRUEncoder(nn.Module):
    """Embeds the source and runs a packed GRU over it, so padding never reaches a state."""

    def __init__(self, vocab_size: int, embed_size: int, hidden_size: int, layers: int,
                 bidirectional: bool, dropout: float, pad_id: int, pieces: PieceMap | None = None) -> None:
        """``pieces``: the source pieces with embedding rows; every piece if None."""
        super().__init__()
        self.kernels = "fast"  # see nmt.models.kernels
        self.layers = layers
        self.bidirectional = bidirectional
        self.embedding = PieceEmbedding(vocab_size, embed_size, pad_id, pieces)
        self.dropout = Dropout(dropout)
        directions = 2 if bidirectional else 1
        self.rnn = nn.GRU(embed_size, hidden_size // directions, num_layers=layers,
                          batch_first=True, bidirectional=bidirectional,
                          dropout=dropout if layers > 1 else 0.0)

    def forward(self, src: torch.Tensor, src_len: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode a padded source batch.

        :param src: token ids, shape (batch, src_len)
        :param src_len: valid lengths (>= 1), shape (batch,)
        :return: outputs, shape (batch, src_len, hidden), zero at padding;
            final states per layer, shape (layers, batch, hidden)
        """
        assert src.dim() == 2 and src_len.shape == src.shape[:1]
        embedded = self.dropout(self.embedding(src))  # (batch, src_len, embed)
        if bptt_runs(self.kernels, embedded) and torch.is_grad_enabled():
            return self._by_hand(embedded, src_len)
        packed = pack_padded_sequence(embedded, src_len.cpu(), batch_first=True,
                                      enforce_sorted=False)
        packed_out, final = self.rnn(packed)
        outputs, _ = pad_packed_sequence(packed_out, batch_first=True,
                                         total_length=src.size(1))  # (batch, src_len, hidden)
        if self.bidirectional:  # (layers*2, batch, h/2) -> (layers, batch, h): [forward; backward]
            final = final.view(self.layers, 2, *final.shape[1:])
            final = torch.cat([final[:, 0], final[:, 1]], dim=-1)
        return outputs, final

    def _by_hand(self, embedded: torch.Tensor, src_len: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward`'s GRU on ``self.rnn``'s weights with :func:`nmt.models.rnn.bptt.packed_gru`'s
        hand-written backward (CPU training, where autograd's per-step nodes cost more than
        the arithmetic)."""
        batch, steps, _ = embedded.shape
        packing = Packing.of(src_len.to(embedded.device), steps)
        rnn, suffixes = self.rnn, ["", "_reverse"] if self.bidirectional else [""]
        cells = [tuple(torch.stack([getattr(rnn, f"{name}_l{layer}{suffix}") for suffix in suffixes])
                       for name in ("weight_ih", "bias_ih", "weight_hh", "bias_hh"))
                 for layer in range(self.layers)]
        tokens, width = len(packing.index), rnn.hidden_size * len(suffixes)
        masks = (dropout_mask((self.layers - 1, tokens, width), rnn.dropout, embedded)
                 if self.training and rnn.dropout and self.layers > 1 else None)
        x = embedded.reshape(batch * steps, -1)[packing.index]  # (tokens, embed)
        layer_outputs = packed_gru(x, packing, masks, cells)  # (layers, dirs, tokens, h/dirs)
        top = layer_outputs[-1]
        packed = torch.cat([top[0], top[1][packing.rev]], dim=1) if self.bidirectional else top[0]
        outputs = packed.new_zeros(batch * steps, width).index_copy(0, packing.index, packed)
        final = layer_outputs[:, :, packing.last]  # (layers, dirs, batch, h/dirs)
        return outputs.view(batch, steps, width), torch.cat(final.unbind(1), dim=-1)
