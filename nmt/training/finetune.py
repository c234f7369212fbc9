"""Fine-tuning (``nmt train --init-from RUN``): a new run that starts from another run's weights,
tokenizer and model, with a fresh optimiser and schedule, on new data, budget and learning
rate (OpenNMT-py's ``-train_from`` with ``-reset_optim all``, fairseq's
``--finetune-from-model``).

The new data is cut into pieces with the parent's spm.model, whose SHA-256 is checked against
the parent's config first. The model keeps the parent's rows: a piece of the new data that the
parent has no row for reads as ``<unk>`` (and cannot be output), and the run says how many
tokens that touched.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nmt.config import ModelConfig, RunConfig, read_run_config
from nmt.data.prepare import RunData
from nmt.data.tokenizer import Tokenizer
from nmt.errors import NmtError, SettingError
from nmt.inference.loading import check_tokenizer, load_run
from nmt.models.interface import TranslationModel
from nmt.models.pieces import PieceEmbedding

log = logging.getLogger(__name__)

MODEL_KEYS = frozenset(f.name for f in fields(ModelConfig))
TOKENIZER_KEYS = frozenset({"vocab_size", "spm_sample"})  # what trains a SentencePiece model: the parent's is used


def parent_config(init_from: Path) -> RunConfig:
    """The config of the run to start from, and a check that it is one."""
    if not (init_from / "config.yaml").is_file():
        raise SettingError("init_from", init_from, "not a run directory (no config.yaml)")
    return read_run_config(init_from / "config.yaml")


def check_model_not_given(given: dict[str, Any], init_from: Path) -> None:
    """A fine-tuned run has its parent's model and vocabulary: a setting of either is refused."""
    for key in sorted(given.keys() & (MODEL_KEYS | TOKENIZER_KEYS)):
        raise SettingError(key, given[key], "a run that starts from {init_from} keeps its model and vocabulary; "
                           f"leave it out (the parent's is in {init_from / 'config.yaml'})", ("init_from",))


def fine_tuned(config: RunConfig, parent: RunConfig, init_from: Path) -> RunConfig:
    """``config`` with the parent's model (sizes, pieces, tokenizer hash) and its path."""
    train = dataclasses.replace(config.train, init_from=str(init_from.resolve()))
    return dataclasses.replace(config, model=parent.model, train=train)


def parent_tokenizer(init_from: Path, parent: RunConfig) -> Tokenizer:
    """The parent's spm.model, checked against the SHA-256 in its config."""
    tokenizer = Tokenizer(init_from / "spm.model")
    check_tokenizer(tokenizer, parent.model)
    return tokenizer


def parent_model(init_from: Path, device: torch.device) -> TranslationModel:
    """The parent's default weights (best or its average; last, if it never validated), in training mode."""
    _, model, _ = load_run(init_from, device)
    return model.train()


def report_unknown(data: RunData, model: TranslationModel) -> dict[str, int]:
    """How many tokens of the new training data each side has no row for; logged, and
    returned for run.json."""
    counts = {side: _unknown_tokens(store.ids, _known(ids, data.tokenizer.vocab_size))
              for side, store, ids in (("source", data.train_src, _source_rows(model)),
                                       ("target", data.train_tgt, _target_rows(model)))}
    total = len(data.train_src.ids) + len(data.train_tgt.ids)
    if counts["source"] or counts["target"]:
        log.warning("%d source and %d target tokens of the new data (%.2f%% of %d) are pieces the parent "
                    "model has no row for: they read as <unk>", counts["source"], counts["target"],
                    100 * (counts["source"] + counts["target"]) / max(total, 1), total)
    return counts


def _source_rows(model: TranslationModel) -> torch.Tensor | None:
    """The ids the encoder has rows for (None: every piece); both families register the
    encoder's embedding first."""
    embedding = next(m for m in model.modules() if isinstance(m, PieceEmbedding))
    return embedding.pieces.pieces if embedding.pieces is not None else None


def _target_rows(model: TranslationModel) -> torch.Tensor:
    """The ids the decoder outputs, as the model interface gives them."""
    device = next(model.parameters()).device
    return model.piece_ids(torch.arange(model.output_layer.out_features, device=device))


def _known(ids: torch.Tensor | None, vocab_size: int) -> np.ndarray:
    known = np.zeros(vocab_size, dtype=bool)
    known[ids.cpu().numpy() if ids is not None else slice(None)] = True
    return known


def _unknown_tokens(ids: np.ndarray, known: np.ndarray, chunk: int = 1 << 24) -> int:
    return int(sum(np.count_nonzero(~known[np.asarray(ids[start:start + chunk])])
                   for start in range(0, len(ids), chunk)))


def check_prepared_tokenizer(data_tokenizer: Tokenizer, parent: RunConfig, data: Path) -> None:
    """Prepared data (--data) must have been cut with the parent's tokenizer."""
    if data_tokenizer.sha256 != parent.model.tokenizer_sha256:
        raise NmtError(f"{data}: prepared with another tokenizer than the run to start from "
                       f"(sha256 {data_tokenizer.sha256[:12]}… against {parent.model.tokenizer_sha256[:12]}…); "
                       "give its corpus with --corpus instead, to be cut with the parent's spm.model")
