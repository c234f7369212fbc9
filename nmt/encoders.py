"""The recurrent encoder: embeddings and a multi-layer (optionally bidirectional) GRU."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from nmt.dropout import Dropout
from nmt.pieces import PieceEmbedding, PieceMap


class GRUEncoder(nn.Module):
    """Embeds the source and runs a packed GRU over it, so padding never reaches a state."""

    def __init__(self, vocab_size: int, embed_size: int, hidden_size: int, layers: int,
                 bidirectional: bool, dropout: float, pad_id: int, pieces: PieceMap | None = None) -> None:
        """``pieces``: the source pieces with embedding rows; every piece if None."""
        super().__init__()
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
        packed = pack_padded_sequence(embedded, src_len.cpu(), batch_first=True,
                                      enforce_sorted=False)
        packed_out, final = self.rnn(packed)
        outputs, _ = pad_packed_sequence(packed_out, batch_first=True,
                                         total_length=src.size(1))  # (batch, src_len, hidden)
        if self.bidirectional:  # (layers*2, batch, h/2) -> (layers, batch, h): [forward; backward]
            final = final.view(self.layers, 2, *final.shape[1:])
            final = torch.cat([final[:, 0], final[:, 1]], dim=-1)
        return outputs, final
