"""Which pieces of the joint SentencePiece vocabulary one side of the model has rows for.

One joint vocabulary keeps subwords shared between the languages, but a side needs rows only
for the pieces it meets: on fra-eng at 8,000 pieces, English sources use 4,314 and French
targets 5,648 (specials included). Embedding and output rows for the rest are never trained
(or never correct), and the output layer's share is 29% of its work. A :class:`PieceMap`
translates tokenizer ids to row positions and back; unknown pieces map to UNK's row.
"""
from __future__ import annotations

import torch
from torch import nn

from nmt.data.tokenizer import UNK_ID


class PieceMap(nn.Module):
    """Rows for ``pieces`` (sorted tokenizer ids, specials included) of a ``vocab_size`` vocabulary.

    The ids are buffers, so they travel in the checkpoint; built from a count alone (to
    receive a checkpoint) they are placeholders until loaded.
    """

    def __init__(self, pieces: list[int] | int, vocab_size: int) -> None:
        super().__init__()
        ids = torch.tensor(pieces) if isinstance(pieces, list) else torch.arange(pieces)
        position = torch.full((vocab_size,), -1, dtype=torch.long)
        position[ids] = torch.arange(len(ids))
        position[position < 0] = position[UNK_ID]
        self.register_buffer("pieces", ids)  # (rows,)
        self.register_buffer("position", position)  # (vocab,)

    def __len__(self) -> int:
        return len(self.pieces)

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Row positions of tokenizer ids, any shape (UNK's row for pieces without one)."""
        return self.position[ids]

    def ids(self, rows: torch.Tensor) -> torch.Tensor:
        """Tokenizer ids of row positions, any shape."""
        return self.pieces[rows]


class PieceEmbedding(nn.Embedding):
    """An embedding with rows for ``pieces`` only (every piece when None), read by tokenizer id.

    PAD is ``pieces``' first id, so its row is ``pad_id`` either way.
    """

    def __init__(self, vocab_size: int, embed_size: int, pad_id: int,
                 pieces: PieceMap | None = None) -> None:
        super().__init__(len(pieces) if pieces is not None else vocab_size, embed_size,
                         padding_idx=pad_id)
        self.pieces = pieces

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """:param ids: tokenizer ids, any shape :return: shape (*ids.shape, embed_size)"""
        return super().forward(self.pieces.rows(ids) if self.pieces is not None else ids)
