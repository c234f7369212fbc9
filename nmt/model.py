"""The GRU encoder-decoder: encode once, then decode step by step or teacher-forced.

:class:`Seq2Seq` implements :class:`nmt.interface.TranslationModel`, all that search, the
loss, inspection and quantization use."""
from __future__ import annotations

import torch
from torch import nn

from nmt.config import ModelConfig
from nmt.decoders import DECODERS, DecoderState
from nmt.dropout import Dropout
from nmt.encoders import GRUEncoder
from nmt.loss import masked_cross_entropy
from nmt.masks import lengths_to_mask
from nmt.pieces import PieceMap


class Generator(nn.Module):
    """Projects decoder outputs to logits over the pieces a translation may contain.

    With ``pieces`` (see :mod:`nmt.pieces`) logit position i is piece ``pieces.ids(i)`` and
    any other piece counts as UNK in the loss; without (runs made before that) it scores
    every piece and positions are tokenizer ids.
    """

    def __init__(self, hidden_size: int, vocab_size: int, dropout: float,
                 pieces: PieceMap | None = None) -> None:
        super().__init__()
        self.kernels = "fast"  # see nmt.kernels: the loss fuses the projection when fast
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


class Seq2Seq(nn.Module):
    """GRU encoder + attention GRU decoder + generator: a :class:`nmt.interface.TranslationModel`."""

    def __init__(self, encoder: GRUEncoder, decoder: nn.Module, generator: Generator) -> None:
        super().__init__()
        self.kernels = "fast"  # see nmt.kernels; set on every part by use_kernels
        self.encoder = encoder
        self.decoder = decoder
        self.generator = generator

    def encode(self, src: torch.Tensor, src_len: torch.Tensor) -> DecoderState:
        """:param src: shape (batch, src_len) :param src_len: shape (batch,)
        :return: the decoder's initial state, keys already projected"""
        memory, final = self.encoder(src, src_len)
        return self.decoder.init_state(memory, final, lengths_to_mask(src_len, src.size(1)))

    def forward(self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced pass; logits are left to the caller so it projects only real positions.

        :return: decoder outputs, shape (batch, tgt_len, hidden);
            attention, shape (batch, tgt_len, src_len)
        """
        return self.decoder(tgt_in, self.encode(src, src_len))

    def step(self, prev_tokens: torch.Tensor, state: DecoderState
             ) -> tuple[torch.Tensor, DecoderState, torch.Tensor]:
        """See :meth:`nmt.interface.TranslationModel.step`."""
        return self.decoder.step(prev_tokens, state)

    def logits(self, outputs: torch.Tensor) -> torch.Tensor:
        """:param outputs: shape (..., hidden) :return: shape (..., outputs)"""
        return self.generator(outputs)

    def piece_ids(self, positions: torch.Tensor) -> torch.Tensor:
        return self.generator.piece_ids(positions)

    def loss(self, outputs: torch.Tensor, tgt_out: torch.Tensor, tgt_mask: torch.Tensor,
             label_smoothing: float = 0.0) -> torch.Tensor:
        """See :meth:`nmt.interface.TranslationModel.loss`."""
        return masked_cross_entropy(self.generator, outputs, tgt_out, tgt_mask, label_smoothing)

    @property
    def output_layer(self) -> nn.Module:
        return self.generator.proj


def build_model(cfg: ModelConfig, pad_id: int, source_pieces: list[int] | None = None,
                target_pieces: list[int] | None = None) -> Seq2Seq:
    """Build a model from its config; the caller seeds torch for reproducible initial weights.

    ``source_pieces``/``target_pieces`` are the ids each side has rows for (``cfg.source_pieces``
    and ``cfg.target_pieces`` of them, see :mod:`nmt.pieces`); without them those sides are
    built as placeholders to receive a checkpoint. Counts of 0 give every side every piece.
    """
    def side(count: int, pieces: list[int] | None) -> PieceMap | None:
        if not count:
            return None
        assert pieces is None or len(pieces) == count, "pieces do not match the config"
        return PieceMap(pieces if pieces is not None else count, cfg.vocab)

    encoder = GRUEncoder(cfg.vocab, cfg.embed_size, cfg.hidden_size, cfg.layers,
                         cfg.bidirectional, cfg.dropout, pad_id, side(cfg.source_pieces, source_pieces))
    decoder = DECODERS[cfg.decoder](cfg.vocab, cfg.embed_size, cfg.hidden_size, cfg.layers,
                                    cfg.dropout, pad_id, side(cfg.target_pieces, target_pieces),
                                    cfg.attention)
    # The generator gets its own copy of the target ids: safetensors stores no shared tensors.
    generator = Generator(cfg.hidden_size, cfg.vocab, cfg.dropout, side(cfg.target_pieces, target_pieces))
    model = Seq2Seq(encoder, decoder, generator)
    if cfg.init_range:
        _init_uniform(model, cfg.init_range, pad_id)
    return model


@torch.no_grad()
def _init_uniform(model: Seq2Seq, bound: float, pad_id: int) -> None:
    """OpenNMT-py's default start: every weight uniform in [-bound, bound] (PyTorch's own
    N(0, 1) embeddings start 16x larger in norm at 256 dimensions); padding rows stay zero."""
    for param in model.parameters():
        param.uniform_(-bound, bound)
    for embedding in (model.encoder.embedding, model.decoder.embedding):
        embedding.weight[pad_id].zero_()


def describe(cfg: ModelConfig) -> str:
    """The architecture in words, for model cards."""
    attention = "additive" if cfg.attention == "additive" else "scaled dot-product"
    wiring = "input feeding (Luong)" if cfg.decoder == "input_feeding" else "Bahdanau (d2l)"
    return (f"{cfg.layers}-layer {'bi' if cfg.bidirectional else 'uni'}directional GRU encoder, "
            f"{cfg.layers}-layer GRU decoder with {attention} attention, {wiring}")


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
