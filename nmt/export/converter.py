"""An nmt Transformer as a CTranslate2 ``TransformerSpec``: every weight mapped by name, the
vocabularies by each side's rows.

nmt keeps rows only for the pieces each side meets (:mod:`nmt.models.pieces`), so the
source vocabulary is the source rows' pieces in row order and the target vocabulary the
target rows'; a piece without a row maps to ``<unk>`` on both engines. The sinusoidal table
is exported, not left to CTranslate2: its own interleaves nothing (sines, then cosines) and
starts at position 1. Layer norms keep PyTorch's epsilon, 1e-5.
"""
from __future__ import annotations

import importlib
from types import ModuleType

import numpy as np
import torch
from torch import nn

from nmt.config import ModelConfig
from nmt.data.tokenizer import Tokenizer
from nmt.errors import NmtError
from nmt.models.transformer.model import DecoderLayer, EncoderLayer, Transformer
from nmt.models.transformer.multihead import MultiHeadAttention
from nmt.models.transformer.positional import sinusoids

# Positions the exported table covers: CTranslate2's own default input limit, and more than
# nmt's engine asks (256 source pieces + EOS; 2 * 257 + 10 output pieces).
MAX_POSITIONS = 1024
LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16",
                 "float16", "bfloat16")
INSTALL = 'pip install -e ".[export]" (or pip install ctranslate2)'


def require_ctranslate2() -> ModuleType:
    """The ctranslate2 module, or an error that says how to install it."""
    try:
        return importlib.import_module("ctranslate2")
    except ImportError:
        raise NmtError(f"CTranslate2 is not installed: {INSTALL}") from None


def transformer_spec(model: Transformer, cfg: ModelConfig, tokenizer: Tokenizer) -> object:
    """The ``ctranslate2.specs.TransformerSpec`` of ``model`` (a float32 Transformer on CPU),
    its vocabularies and its config registered, ready for ``validate`` and ``save``."""
    specs = require_ctranslate2().specs
    spec = specs.TransformerSpec.from_config(cfg.layers, cfg.heads, pre_norm=cfg.norm == "pre",
                                             alignment_heads=cfg.heads)
    _encoder(spec.encoder, model)
    _decoder(spec.decoder, model)
    spec.register_source_vocabulary(_pieces(model.src_embedding, tokenizer))
    spec.register_target_vocabulary(_pieces(model.tgt_embedding, tokenizer))
    spec.config.add_source_eos = True  # nmt's sources end with EOS; its targets start with BOS
    spec.config.layer_norm_epsilon = LAYER_NORM_EPSILON
    return spec


def spec_converter(spec: object) -> object:
    """A ``ctranslate2.converters.Converter`` of a spec already built: its ``convert``
    validates, quantizes and saves it (a subclass made here: ctranslate2 is optional)."""
    base = require_ctranslate2().converters.Converter

    class SpecConverter(base):
        def _load(self) -> object:
            return spec

    return SpecConverter()


def _pieces(embedding: nn.Embedding, tokenizer: Tokenizer) -> list[str]:
    """The piece of each embedding row, in row order."""
    rows = embedding.pieces
    ids = rows.pieces.tolist() if rows is not None else range(embedding.num_embeddings)
    return [tokenizer.sp.id_to_piece(i) for i in ids]


def _array(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().float().cpu().numpy()


def _inputs(embeddings: object, positions: object, embedding: nn.Embedding) -> None:
    embeddings.weight = _array(embedding.weight)  # CTranslate2 scales by sqrt(d), as nmt does
    positions.encodings = _array(sinusoids(MAX_POSITIONS, embedding.embedding_dim))


def _encoder(spec: object, model: Transformer) -> None:
    _inputs(spec.embeddings[0], spec.position_encodings, model.src_embedding)  # one source factor
    for layer_spec, layer in zip(spec.layer, model.encoder):
        _encoder_layer(layer_spec, layer)
    if isinstance(model.encoder_norm, nn.LayerNorm):
        _norm(spec.layer_norm, model.encoder_norm)


def _decoder(spec: object, model: Transformer) -> None:
    _inputs(spec.embeddings, spec.position_encodings, model.tgt_embedding)
    for layer_spec, layer in zip(spec.layer, model.decoder):
        _decoder_layer(layer_spec, layer)
    if isinstance(model.decoder_norm, nn.LayerNorm):
        _norm(spec.layer_norm, model.decoder_norm)
    _linear(spec.projection, model.generator.proj)


def _encoder_layer(spec: object, layer: EncoderLayer) -> None:
    _self_attention(spec.self_attention, layer.self_attention)
    _norm(spec.self_attention.layer_norm, layer.attend.norm)
    _feed_forward(spec.ffn, layer)


def _decoder_layer(spec: object, layer: DecoderLayer) -> None:
    _self_attention(spec.self_attention, layer.self_attention)
    _norm(spec.self_attention.layer_norm, layer.attend_self.norm)
    attention = layer.cross_attention
    _linear(spec.attention.linear[0], attention.query_proj)
    _fused(spec.attention.linear[1], [attention.key_proj, attention.value_proj])
    _linear(spec.attention.linear[2], attention.out_proj)
    _norm(spec.attention.layer_norm, layer.attend_source.norm)
    _feed_forward(spec.ffn, layer)


def _self_attention(spec: object, attention: MultiHeadAttention) -> None:
    """Queries, keys and values in one matrix, as CTranslate2 runs self-attention."""
    _fused(spec.linear[0], [attention.query_proj, attention.key_proj, attention.value_proj])
    _linear(spec.linear[1], attention.out_proj)


def _feed_forward(spec: object, layer: EncoderLayer | DecoderLayer) -> None:
    _norm(spec.layer_norm, layer.transform.norm)
    _linear(spec.linear_0, layer.feed_forward.inner)
    _linear(spec.linear_1, layer.feed_forward.outer)


def _linear(spec: object, linear: nn.Linear) -> None:
    spec.weight = _array(linear.weight)  # (out, in), as CTranslate2 stores it
    if linear.bias is not None:
        spec.bias = _array(linear.bias)


def _fused(spec: object, linears: list[nn.Linear]) -> None:
    """Several projections of one input stacked into one: their outputs concatenated."""
    spec.weight = np.concatenate([_array(linear.weight) for linear in linears])
    if all(linear.bias is not None for linear in linears):
        spec.bias = np.concatenate([_array(linear.bias) for linear in linears])


def _norm(spec: object, norm: nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)
