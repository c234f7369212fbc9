"""The Transformer encoder-decoder (Vaswani et al. 2017) as a :class:`nmt.models.interface.TranslationModel`.

Encoder layers: self-attention, then feed-forward. Decoder layers: causal self-attention,
encoder-decoder attention, feed-forward. Each sub-layer sits in a residual with layer norm:
post-norm by default, the paper's; pre-norm closes each stack with a final norm. Decoding is
incremental: each decoder layer caches the keys and values of the positions decoded so far,
and the encoder-decoder attention's keys and values are projected once per batch, so a step
costs one position.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn

from nmt.config import ModelConfig
from nmt.models.generator import Generator, GeneratorOutputs
from nmt.models.halfwidth import matmul_input
from nmt.models.interface import join_rows, sentence_rows
from nmt.models.masks import lengths_to_mask
from nmt.models.pieces import PieceEmbedding, PieceMap
from nmt.models.transformer.layers import FeedForward, Residual
from nmt.models.transformer.multihead import MultiHeadAttention, causal_mask
from nmt.models.transformer.positional import PositionalEncoding

KeyValue = tuple[torch.Tensor, torch.Tensor]  # each (batch, heads, len, head_size)
Groups = tuple[KeyValue, ...]  # a layer's self-attention cache, one entry per group of rows


@dataclass(frozen=True)
class TransformerState:
    """What a decoding step needs; sentences or rows are dim 0 of every tensor.

    cross: per decoder layer, the encoder-decoder attention's keys and values of each sentence's
        source, once per sentence however many beams it has
    src_mask: True at real source tokens, shape (sentences, src_len)
    past: per decoder layer, the self-attention keys and values of the positions each row has
        decoded, by group: consecutive rows at the same position, one group unless states were
        joined (:meth:`join`)
    beams: consecutive rows per sentence (beam search's)
    """

    cross: list[KeyValue]
    src_mask: torch.Tensor
    past: list[Groups]
    beams: int = 1

    def positions(self) -> int | torch.Tensor:
        """Positions decoded so far: one number for one group, else per row, shape (rows,)."""
        if not self.past:
            return 0
        groups = self.past[0]
        if len(groups) == 1:
            return groups[0][0].size(2)
        device = self.src_mask.device
        return torch.tensor([keys.size(2) for keys, _ in groups], device=device).repeat_interleave(
            torch.tensor([keys.size(0) for keys, _ in groups], device=device))

    def select(self, index: torch.Tensor) -> TransformerState:
        """Keep the sentences at ``index``, shape (kept,), with all their rows; ascending when
        the state holds more than one group."""
        return TransformerState(_take(self.cross, index), self.src_mask.index_select(0, index),
                                _take_groups(self.past, sentence_rows(index, self.beams)), self.beams)

    def repeat_beams(self, beams: int) -> TransformerState:
        """Each row ``beams`` times, consecutively; the sources stay one per sentence."""
        rows = torch.arange(self.src_mask.size(0) * self.beams, device=self.src_mask.device)
        return replace(self, past=_take_groups(self.past, rows.repeat_interleave(beams)),
                       beams=self.beams * beams)

    def reorder_beams(self, index: torch.Tensor) -> TransformerState:
        """Rows move only among their sentence's beams: the source side stays where it is."""
        return replace(self, past=_take_groups(self.past, index))

    def join(self, other: TransformerState) -> TransformerState:
        """This state's sentences, then ``other``'s, each row going on from its own position:
        the sources are padded to the longer one, and the caches stay apart as groups, so a
        row attends only its own positions."""
        assert self.beams == other.beams, "joined states have as many rows per sentence"
        cross = [(join_rows(k, other_k, 2), join_rows(v, other_v, 2))
                 for (k, v), (other_k, other_v) in zip(self.cross, other.cross)]
        src_mask = join_rows(self.src_mask, other.src_mask, 1)
        past = [mine + theirs for mine, theirs in zip(self._groups(), other._groups())]
        return TransformerState(cross, src_mask, past, self.beams)

    def _groups(self) -> list[Groups]:
        """``past``, or before the first step one group of caches with no positions yet."""
        if self.past:
            return self.past
        assert self.beams == 1, "beams join once seeded"
        return [((keys[:, :, :0],) * 2,) for keys, _ in self.cross]  # (rows, heads, 0, head_size)


def _take(pairs: list[KeyValue], index: torch.Tensor) -> list[KeyValue]:
    return [(k.index_select(0, index), v.index_select(0, index)) for k, v in pairs]


def _take_groups(past: list[Groups], rows: torch.Tensor) -> list[Groups]:
    """The ``rows`` of each layer's caches; with more than one group the rows come group by
    group (a group's own rows in any order, as beams reorder), and groups left with no row
    drop out."""
    parts = [(0, rows)] if not past or len(past[0]) == 1 else _rows_by_group(past[0], rows)
    return [tuple(_take([layer[g]], part)[0] for g, part in parts) for layer in past]


def _rows_by_group(groups: Groups, rows: torch.Tensor) -> list[tuple[int, torch.Tensor]]:
    """Each group's share of ``rows``, which come group by group, as (group, its rows counted
    from its first); groups with none are left out."""
    sizes = torch.tensor([keys.size(0) for keys, _ in groups], device=rows.device)
    ends = sizes.cumsum(0)
    group = torch.bucketize(rows, ends, right=True)  # each row's group
    assert bool((group[1:] >= group[:-1]).all()), "rows of joined groups are taken group by group"
    counts = torch.bincount(group, minlength=len(groups)).tolist()
    starts = (ends - sizes).tolist()
    parts, cut = [], 0
    for g, count in enumerate(counts):
        if count:
            parts.append((g, rows[cut:cut + count] - starts[g]))
        cut += count
    return parts


class EncoderLayer(nn.Module):
    def __init__(self, size: int, heads: int, ff_size: int, dropout: float, pre_norm: bool) -> None:
        super().__init__()
        self.self_attention = MultiHeadAttention(size, heads)
        self.feed_forward = FeedForward(size, ff_size, dropout)
        self.attend, self.transform = (Residual(size, dropout, pre_norm) for _ in range(2))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, need_weights: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:param x: shape (batch, src_len, size) :param mask: shape (batch, 1, 1, src_len)
        :return: outputs, the same shape as ``x``; self-attention, (batch, heads, src_len, src_len),
            if ``need_weights``"""
        weights: list[torch.Tensor | None] = []

        def attend(y: torch.Tensor) -> torch.Tensor:
            y = matmul_input(y)  # one copy for the three projections' backward
            out, w = self.self_attention(y, *self.self_attention.project_keys_values(y), mask, need_weights)
            weights.append(w)
            return out

        x = self.attend(x, attend)
        return self.transform(x, self.feed_forward), weights[0]


class DecoderLayer(nn.Module):
    def __init__(self, size: int, heads: int, ff_size: int, dropout: float, pre_norm: bool) -> None:
        super().__init__()
        self.self_attention = MultiHeadAttention(size, heads)
        self.cross_attention = MultiHeadAttention(size, heads)
        self.feed_forward = FeedForward(size, ff_size, dropout)
        self.attend_self, self.attend_source, self.transform = (
            Residual(size, dropout, pre_norm) for _ in range(3))

    def forward(self, x: torch.Tensor, past: Groups | None, self_mask: torch.Tensor | None,
                cross: KeyValue, cross_mask: torch.Tensor, need_weights: tuple[str, ...] = ("cross",)
                ) -> tuple[torch.Tensor, Groups, dict[str, torch.Tensor]]:
        """Decode ``x`` (batch, len, size), the positions after ``past``'s.

        :param past: the keys and values of earlier positions, by group of rows (see
            :class:`TransformerState`); more than one group only for one new position per row
        :param self_mask: causal mask over the ``len`` new positions, (len, len); None for one
        :param cross: the source's keys and values, once per sentence: ``batch`` is a whole
            number of rows per sentence, consecutive (its beams)
        :param cross_mask: shape (sentences, 1, 1, src_len)
        :return: outputs, shape (batch, len, size); the self-attention's keys and values up to
            and including these positions; the attention weights ``need_weights`` names:
            "decoder", self-attention, (batch, heads, len, past + len); "cross", encoder-decoder,
            (batch, heads, len, src_len)
        """
        keys_values: list[Groups] = []
        weights: dict[str, torch.Tensor] = {}

        def attend_self(y: torch.Tensor) -> torch.Tensor:
            y = matmul_input(y)
            keys, values = self.self_attention.project_keys_values(y)
            groups: Groups = ((keys, values),)
            if past is not None:
                sizes = [k.size(0) for k, _ in past]
                groups = tuple((torch.cat([k, new_k], dim=2), torch.cat([v, new_v], dim=2))
                               for (k, v), new_k, new_v in zip(past, keys.split(sizes), values.split(sizes)))
            keys_values.append(groups)
            if len(groups) > 1:
                assert "decoder" not in need_weights, "joined rows attend apart: no one weight matrix"
                return self.self_attention.attend_groups(y, groups)
            out, weights["decoder"] = self.self_attention(y, *groups[0], self_mask, "decoder" in need_weights)
            return out

        def attend_source(y: torch.Tensor) -> torch.Tensor:
            # A sentence's beams query its source together, as positions of one sequence.
            rows, length, size = y.shape
            sentences = cross[0].size(0)
            out, w = self.cross_attention(y.reshape(sentences, -1, size), *cross, cross_mask,
                                          "cross" in need_weights)
            if "cross" in need_weights:  # (sentences, heads, beams * len, src_len) -> per row
                w = w.view(sentences, w.size(1), -1, length, w.size(3)).transpose(1, 2)
                weights["cross"] = w.reshape(rows, w.size(2), length, w.size(4))
            return out.reshape(rows, length, size)

        x = self.attend_self(x, attend_self)
        x = self.attend_source(x, attend_source)
        return self.transform(x, self.feed_forward), keys_values[0], weights


class Transformer(GeneratorOutputs):
    """Embeddings scaled by sqrt(d) plus sinusoidal positions, encoder and decoder stacks, and
    the shared :class:`~nmt.models.generator.Generator`."""

    def __init__(self, cfg: ModelConfig, pad_id: int, source: PieceMap | None, target: PieceMap | None,
                 output: PieceMap | None) -> None:
        super().__init__()
        size, pre_norm = cfg.hidden_size, cfg.norm == "pre"
        self.kernels = "fast"  # see nmt.models.kernels; the generator's loss reads it
        self.scale = math.sqrt(size)
        self.src_embedding = PieceEmbedding(cfg.vocab, size, pad_id, source)
        self.tgt_embedding = PieceEmbedding(cfg.vocab, size, pad_id, target)
        self.positions = PositionalEncoding(size, cfg.dropout)
        layer_args = (size, cfg.heads, cfg.ff_size, cfg.dropout, pre_norm)
        self.encoder = nn.ModuleList(EncoderLayer(*layer_args) for _ in range(cfg.layers))
        self.decoder = nn.ModuleList(DecoderLayer(*layer_args) for _ in range(cfg.layers))
        # Pre-norm leaves the residual stream unnormalised: a last norm closes each stack.
        self.encoder_norm, self.decoder_norm = (nn.LayerNorm(size) if pre_norm else nn.Identity()
                                                for _ in range(2))
        self.generator = Generator(size, cfg.vocab, cfg.dropout, output)
        if cfg.tie_embeddings:
            self.tie_output_to(self.tgt_embedding, "tgt_embedding.weight")

    def encode(self, src: torch.Tensor, src_len: torch.Tensor) -> TransformerState:
        """:param src: shape (batch, src_len) :param src_len: shape (batch,)"""
        return self._encode(src, src_len)[0]

    def _encode(self, src: torch.Tensor, src_len: torch.Tensor, need_weights: bool = False
                ) -> tuple[TransformerState, list[torch.Tensor | None]]:
        """The state, and each encoder layer's self-attention, (batch, heads, src_len, src_len),
        if ``need_weights``."""
        src_mask = lengths_to_mask(src_len, src.size(1))  # (batch, src_len)
        mask = src_mask[:, None, None, :]
        x = self.positions(self.src_embedding(src) * self.scale)
        weights = []
        for layer in self.encoder:
            x, w = layer(x, mask, need_weights)
            weights.append(w)
        memory = matmul_input(self.encoder_norm(x))  # (batch, src_len, size), one copy for every layer
        cross = [layer.cross_attention.project_keys_values(memory) for layer in self.decoder]
        return TransformerState(cross, src_mask, []), weights

    def _decode(self, tgt: torch.Tensor, state: TransformerState, self_mask: torch.Tensor | None,
                all_weights: bool = False, last_cross: bool = True
                ) -> tuple[torch.Tensor, TransformerState, list[dict[str, torch.Tensor]]]:
        """Decode the ids ``tgt`` (batch, len) at the positions after ``state``'s.

        :return: outputs (batch, len, size); the state; each layer's attention weights (see
            :meth:`DecoderLayer.forward`): the last layer's encoder-decoder ones if
            ``last_cross``, every one if ``all_weights``
        """
        x = self.positions(self.tgt_embedding(tgt) * self.scale, offset=state.positions())
        cross_mask = state.src_mask[:, None, None, :]
        past, weights = [], []
        last = len(self.decoder) - 1
        for k, layer in enumerate(self.decoder):
            need = ("decoder", "cross") if all_weights else ("cross",) if k == last and last_cross else ()
            x, kv, w = layer(x, state.past[k] if state.past else None, self_mask,
                             state.cross[k], cross_mask, need)
            past.append(kv)
            weights.append(w)
        return self.decoder_norm(x), replace(state, past=past), weights

    def forward(self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced pass. :return: outputs, shape (batch, tgt_len, size); attention,
        shape (batch, tgt_len, src_len)"""
        outputs, _, weights = self._decode(tgt_in, self.encode(src, src_len),
                                           causal_mask(tgt_in.size(1), tgt_in.device))
        return outputs, _heads_mean(weights)

    def step(self, prev_tokens: torch.Tensor, state: TransformerState, need_attention: bool = True
             ) -> tuple[torch.Tensor, TransformerState, torch.Tensor | None]:
        """One position: :return: outputs (batch, size); the state; the last layer's
        encoder-decoder attention, its heads averaged, (batch, src_len), if ``need_attention``
        (else None: that attention too then runs in the fused kernel where there is one)"""
        outputs, state, weights = self._decode(prev_tokens.unsqueeze(1), state, None,
                                               last_cross=need_attention)
        return outputs.squeeze(1), state, _heads_mean(weights).squeeze(1) if need_attention else None

    def attention_maps(self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor
                       ) -> dict[str, torch.Tensor]:
        """Every layer's and head's weights in the teacher-forced pass over ``tgt_in``: "encoder"
        (batch, layers, heads, src_len, src_len), "decoder" (batch, layers, heads, tgt_len,
        tgt_len) and "cross" (batch, layers, heads, tgt_len, src_len)."""
        state, encoder = self._encode(src, src_len, need_weights=True)
        _, _, decoder = self._decode(tgt_in, state, causal_mask(tgt_in.size(1), tgt_in.device), all_weights=True)
        return {"encoder": torch.stack(encoder, 1), "decoder": torch.stack([w["decoder"] for w in decoder], 1),
                "cross": torch.stack([w["cross"] for w in decoder], 1)}


def _heads_mean(weights: list[dict[str, torch.Tensor]]) -> torch.Tensor:
    """The last layer's encoder-decoder attention, averaged over heads: (batch, len, src_len)."""
    return weights[-1]["cross"].mean(dim=1)


def build(cfg: ModelConfig, pad_id: int, source: PieceMap | None, target: PieceMap | None,
          output: PieceMap | None) -> Transformer:
    """The Transformer of ``cfg``; matrices start Xavier-uniform, as in the reference
    implementations; padding rows zero."""
    model = Transformer(cfg, pad_id, source, target, output)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() > 1:
                nn.init.xavier_uniform_(param)
        for embedding in (model.src_embedding, model.tgt_embedding):
            embedding.weight[pad_id].zero_()
    return model


def describe(cfg: ModelConfig) -> str:
    return (f"Transformer: {cfg.layers} encoder and {cfg.layers} decoder layers, d_model "
            f"{cfg.hidden_size}, {cfg.heads} heads, feed-forward {cfg.ff_size}, {cfg.norm}-norm"
            + (", tied decoder embeddings" if cfg.tie_embeddings else ""))
