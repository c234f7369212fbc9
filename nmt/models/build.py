"""Building a model from its config: the one place that knows the model families."""
from __future__ import annotations

from torch import nn

from nmt.config import ModelConfig
from nmt.models.interface import TranslationModel
from nmt.models.pieces import PieceMap
from nmt.models.rnn import seq2seq
from nmt.models.transformer import model as transformer


def build_model(cfg: ModelConfig, pad_id: int, source_pieces: list[int] | None = None,
                target_pieces: list[int] | None = None) -> TranslationModel:
    """Build a model from its config; the caller seeds torch for reproducible initial weights.

    ``source_pieces``/``target_pieces`` are the ids each side has rows for (``cfg.source_pieces``
    and ``cfg.target_pieces`` of them, see :mod:`nmt.models.pieces`); without them those sides are
    built as placeholders to receive a checkpoint. Counts of 0 give every side every piece.
    """
    def side(count: int, pieces: list[int] | None) -> PieceMap | None:
        if not count:
            return None
        assert pieces is None or len(pieces) == count, "pieces do not match the config"
        return PieceMap(pieces if pieces is not None else count, cfg.vocab)

    family = transformer if cfg.arch == "transformer" else seq2seq
    return family.build(cfg, pad_id, side(cfg.source_pieces, source_pieces),
                        side(cfg.target_pieces, target_pieces), side(cfg.target_pieces, target_pieces))


def describe(cfg: ModelConfig) -> str:
    """The architecture in words, for model cards."""
    return (transformer if cfg.arch == "transformer" else seq2seq).describe(cfg)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def parameters_per_block(model: nn.Module) -> dict[str, str]:
    """Parameters of each top-level block, in build order; a tensor shared by two blocks counts
    in the first. A stack of layers is given as its total and its count per layer."""
    seen: set[int] = set()
    blocks = {}
    for name, block in model.named_children():
        fresh = [p for p in block.parameters() if id(p) not in seen]
        seen.update(id(p) for p in fresh)
        if not fresh:
            continue
        total = sum(p.numel() for p in fresh)
        shared = " + a weight counted above" if len(fresh) < len(list(block.parameters())) else ""
        if isinstance(block, nn.ModuleList) and len(block) > 1:
            blocks[name] = f"{total:,} ({len(block)} layers of {total // len(block):,})"
        else:
            blocks[name] = f"{total:,}{shared}"
    return blocks
