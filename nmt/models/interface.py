"""What the rest of nmt may ask of a model: one interface every model family implements.

Search, the loss, inspection, plotting and quantization use only this, so a second family
(the Transformer) plugs in beside the GRU seq2seq (:class:`nmt.models.rnn.seq2seq.Seq2Seq`) without them
changing. ``tests/inference/test_search.py`` runs greedy and beam search over a fake model that
implements nothing else.

Positions and ids: a model scores ``outputs`` logit positions, which need not be the
tokenizer's ids (a model may score only the pieces its training targets hold);
:meth:`TranslationModel.piece_ids` maps positions to ids.
"""
from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn


class DecoderState(Protocol):
    """Whatever one decoding step needs (encoder memory, masks, recurrent state, key/value
    caches); opaque to search, which only keeps, repeats or reorders its sentences' rows, or
    joins two states' sentences.

    A state holds one row per sentence, or after :meth:`repeat_beams` ``beams`` consecutive
    rows per sentence (its beams), which may share the sentence's source side."""

    def select(self, index: torch.Tensor) -> DecoderState:
        """Keep the sentences at ``index``, shape (kept,), each with all its rows: finished
        sentences leave."""

    def repeat_beams(self, beams: int) -> DecoderState:
        """Each row becomes ``beams`` consecutive rows: beam search's first step, one row per
        sentence, seeds the beams."""

    def reorder_beams(self, index: torch.Tensor) -> DecoderState:
        """The rows at ``index``, shape (rows,), each taken from its own sentence's rows: what
        is equal across those rows (the source) may stay put."""

    def join(self, other: DecoderState) -> DecoderState:
        """This state's sentences, then ``other``'s, each going on from where it is: search
        joins a new batch to the last sentences of one still decoding, so its steps keep their
        rows. Sources of different lengths are padded, and a joined row's steps give what they
        would have given in its own state (within float rounding). Both states have the same
        rows per sentence."""


def sentence_rows(sentences: torch.Tensor, beams: int) -> torch.Tensor:
    """The rows of ``sentences``, shape (n,), in a batch of ``beams`` consecutive rows per
    sentence: shape (n * beams,)."""
    if beams == 1:
        return sentences
    return (sentences.unsqueeze(1) * beams + torch.arange(beams, device=sentences.device)).view(-1)


def join_rows(first: torch.Tensor, second: torch.Tensor, *pad_dims: int, row_dim: int = 0) -> torch.Tensor:
    """``first``'s rows, then ``second``'s, along ``row_dim``; in each of ``pad_dims`` (a
    source length, a step count) the shorter padded at the end to the longer with zeros (False
    in a mask): one tensor of two states' :meth:`DecoderState.join`."""
    for dim in pad_dims:
        length = max(first.size(dim), second.size(dim))
        first, second = (F.pad(t, (0, 0) * (t.dim() - 1 - dim) + (0, length - t.size(dim)))
                         for t in (first, second))
    return torch.cat([first, second], dim=row_dim)


class TranslationModel(Protocol):
    """An encoder-decoder, as search and training use it."""

    kernels: str  # "fast" or "reference" (nmt.models.kernels); search reads it for its top-k
    training: bool

    def encode(self, src: torch.Tensor, src_len: torch.Tensor) -> DecoderState:
        """Encode once. :param src: shape (batch, src_len) :param src_len: shape (batch,)
        :return: the initial decoder state"""

    def step(self, prev_tokens: torch.Tensor, state: DecoderState, need_attention: bool = True
             ) -> tuple[torch.Tensor, DecoderState, torch.Tensor | None]:
        """One decoding step from the previous pieces' ids, shape (batch,).

        :param need_attention: False: the caller will not read the attention, so a model whose
            outputs do not depend on it may skip it and return None
        :return: outputs for :meth:`logits`, shape (batch, hidden); the new state;
            attention over the source, shape (batch, src_len), for plots
        """

    def forward(self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """The teacher-forced pass over BOS-prefixed targets ``tgt_in``, shape (batch, tgt_len).

        :return: outputs, shape (batch, tgt_len, hidden); attention, shape (batch, tgt_len, src_len)
        """

    def attention_maps(self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor
                       ) -> dict[str, torch.Tensor]:
        """Every attention's weights in the teacher-forced pass, for plots: by kind ("cross",
        encoder-decoder, which every model has; "encoder" and "decoder" self-attention where
        it has them), each shape (batch, layers, heads, queries, keys)."""

    def logits(self, outputs: torch.Tensor) -> torch.Tensor:
        """:param outputs: shape (..., hidden) :return: shape (..., outputs)"""

    def piece_ids(self, positions: torch.Tensor) -> torch.Tensor:
        """The tokenizer ids of logit positions (same shape)."""

    def loss(self, outputs: torch.Tensor, tgt_out: torch.Tensor, tgt_mask: torch.Tensor,
             label_smoothing: float = 0.0, rdrop_alpha: float = 0.0) -> torch.Tensor:
        """Summed label-smoothed cross-entropy of :meth:`forward`'s outputs over real targets.

        :param tgt_out: gold next ids, shape (batch, tgt_len)
        :param tgt_mask: True at real target positions, shape (batch, tgt_len)
        :param rdrop_alpha: > 0: the batch holds each sentence twice (its second half repeats
            its first) and the loss is R-Drop's (:func:`nmt.models.loss.rdrop_cross_entropy`)
        """

    @property
    def output_layer(self) -> nn.Module:
        """The layer :meth:`logits` applies last (an ``nn.Linear`` in float32, or its int8
        copy): what greedy search's certified argmax reads (:mod:`nmt.inference.argmax`)."""
