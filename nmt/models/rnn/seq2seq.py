"""The GRU encoder-decoder: encode once, then decode step by step or teacher-forced.

:class:`Seq2Seq` implements :class:`nmt.models.interface.TranslationModel`, all that search, the
loss, inspection and quantization use."""
from __future__ import annotations

import torch
from torch import nn

from nmt.config import ModelConfig
from nmt.models.generator import Generator, GeneratorOutputs
from nmt.models.masks import lengths_to_mask
from nmt.models.pieces import PieceMap
from nmt.models.rnn.decoders import DECODERS, DecoderState
from nmt.models.rnn.encoder import GRUEncoder


class Seq2Seq(GeneratorOutputs):
    """GRU encoder + attention GRU decoder + generator: a :class:`nmt.models.interface.TranslationModel`."""

    def __init__(self, encoder: GRUEncoder, decoder: nn.Module, generator: Generator) -> None:
        super().__init__()
        self.kernels = "fast"  # see nmt.models.kernels; set on every part by use_kernels
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

    def attention_maps(self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor
                       ) -> dict[str, torch.Tensor]:
        """The one attention there is: "cross", shape (batch, 1 layer, 1 head, tgt_len, src_len)."""
        return {"cross": self(src, src_len, tgt_in)[1][:, None, None]}

    def step(self, prev_tokens: torch.Tensor, state: DecoderState, need_attention: bool = True
             ) -> tuple[torch.Tensor, DecoderState, torch.Tensor]:
        """See :meth:`nmt.models.interface.TranslationModel.step`."""
        return self.decoder.step(prev_tokens, state, need_attention)


def build(cfg: ModelConfig, pad_id: int, source: PieceMap | None, target: PieceMap | None,
          output: PieceMap | None) -> Seq2Seq:
    """The GRU encoder-decoder of ``cfg`` (see :func:`nmt.models.build.build_model`): the
    encoder embeds ``source``'s pieces, the decoder ``target``'s, the generator scores ``output``'s
    (a copy of ``target``: safetensors stores no shared tensors); None: every piece."""
    encoder = GRUEncoder(cfg.vocab, cfg.embed_size, cfg.hidden_size, cfg.layers,
                         cfg.bidirectional, cfg.dropout, pad_id, source)
    decoder = DECODERS[cfg.decoder](cfg.vocab, cfg.embed_size, cfg.hidden_size, cfg.layers,
                                    cfg.dropout, pad_id, target, cfg.attention)
    model = Seq2Seq(encoder, decoder, Generator(cfg.hidden_size, cfg.vocab, cfg.dropout, output))
    if cfg.tie_embeddings:  # the generator reads hidden_size: the config checks embed_size equals it
        model.tie_output_to(decoder.embedding, "decoder.embedding.weight")
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
            f"{cfg.layers}-layer GRU decoder with {attention} attention, {wiring}"
            + (", tied decoder embeddings" if cfg.tie_embeddings else ""))
