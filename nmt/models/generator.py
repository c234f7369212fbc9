"""The output layer shared by model families: decoder outputs to logits over the pieces a
translation may contain, and the loss over them."""
from __future__ import annotations

import torch
from torch import nn

from nmt.models.dropout import Dropout
from nmt.models.loss import masked_cross_entropy, rdrop_cross_entropy
from nmt.models.pieces import PieceMap


class Generator(nn.Module):
    """Projects decoder outputs to logits over the pieces a translation may contain.

    With ``pieces`` (see :mod:`nmt.models.pieces`) logit position i is piece ``pieces.ids(i)`` and
    any other piece counts as UNK in the loss; without (runs made before that) it scores
    every piece and positions are tokenizer ids.
    """

    def __init__(self, hidden_size: int, vocab_size: int, dropout: float,
                 pieces: PieceMap | None = None) -> None:
        super().__init__()
        self.kernels = "fast"  # see nmt.models.kernels: the loss fuses the projection when fast
        self.dropout = Dropout(dropout)
        self.pieces = pieces
        self.proj = nn.Linear(hidden_size, len(pieces) if pieces is not None else vocab_size)

    def forward(self, outputs: torch.Tensor) -> torch.Tensor:
        """:param outputs: shape (..., hidden) :return: logits, shape (..., outputs)"""
        return self.proj(self.dropout(outputs))

    def positions(self, ids: torch.Tensor) -> torch.Tensor:
        """Logit positions of tokenizer ids (UNK's for pieces it does not score)."""
        return self.pieces.rows(ids) if self.pieces is not None else ids

    def piece_ids(self, positions: torch.Tensor) -> torch.Tensor:
        """Tokenizer ids of logit positions."""
        return self.pieces.ids(positions) if self.pieces is not None else positions


class GeneratorOutputs(nn.Module):
    """The interface's output half (:class:`nmt.models.interface.TranslationModel`) for a
    model whose last layer is ``self.generator``, a :class:`Generator`."""

    generator: Generator

    def logits(self, outputs: torch.Tensor) -> torch.Tensor:
        """:param outputs: shape (..., hidden) :return: shape (..., outputs)"""
        return self.generator(outputs)

    def piece_ids(self, positions: torch.Tensor) -> torch.Tensor:
        return self.generator.piece_ids(positions)

    def loss(self, outputs: torch.Tensor, tgt_out: torch.Tensor, tgt_mask: torch.Tensor,
             label_smoothing: float = 0.0, rdrop_alpha: float = 0.0) -> torch.Tensor:
        """See :meth:`nmt.models.interface.TranslationModel.loss`."""
        if rdrop_alpha:
            return rdrop_cross_entropy(self.generator, outputs, tgt_out, tgt_mask, label_smoothing, rdrop_alpha)
        return masked_cross_entropy(self.generator, outputs, tgt_out, tgt_mask, label_smoothing)

    @property
    def output_layer(self) -> nn.Module:
        return self.generator.proj

    def tie_output_to(self, embedding: nn.Embedding, key: str) -> None:
        """One (target pieces, size) matrix embeds the decoder's input and scores its output
        (Press & Wolf 2017). Checkpoints store it once, under ``key``, the embedding's weight
        (safetensors keeps no aliases): the output layer's key is left out on saving and filled
        in on loading."""
        assert len(self.generator.pieces or []) == len(getattr(embedding, "pieces", None) or []), "sides differ"
        self.generator.proj.weight = embedding.weight
        alias = "generator.proj.weight"

        def drop_alias(module: nn.Module, state: dict, prefix: str, metadata: object) -> None:
            state.pop(prefix + alias, None)

        def fill_alias(module: nn.Module, state: dict, prefix: str, *args: object) -> None:
            if prefix + key in state:
                state[prefix + alias] = state[prefix + key]

        self.register_state_dict_post_hook(drop_alias)
        self.register_load_state_dict_pre_hook(fill_alias)
