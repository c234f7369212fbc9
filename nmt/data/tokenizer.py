"""SentencePiece subwords: one joint model for both languages, special ids fixed here."""
from __future__ import annotations

import hashlib
import io
import logging
import os
import re
from pathlib import Path

import sentencepiece as spm

from nmt.errors import NmtError, SettingMessage
from nmt.runtime.fileio import atomic_path

log = logging.getLogger(__name__)

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPECIALS = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)


_TOO_SMALL = re.compile(r"Vocabulary size is smaller than required_chars\. \d+ vs (\d+)")


def _train_proto(texts: list[str], vocab_size: int, symbols: tuple[str, ...] = ()) -> bytes:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=model, vocab_size=vocab_size,
        model_type="unigram", character_coverage=0.9999, hard_vocab_limit=False,
        pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
        num_threads=os.cpu_count() or 1, minloglevel=2, **({"user_defined_symbols": list(symbols)} if symbols else {}))
    return model.getvalue()


def _reason(error: Exception) -> str:
    """SentencePiece's message without its source location."""
    return re.sub(r"^.*?\] ", "", str(error).splitlines()[0])


class Tokenizer:
    """Encodes text to piece ids and decodes ids back to detokenised text."""

    def __init__(self, model_path: Path) -> None:
        self.model_path = Path(model_path)
        try:
            proto = self.model_path.read_bytes()
            self.sp = spm.SentencePieceProcessor(model_proto=proto)
        except (OSError, RuntimeError) as e:
            raise NmtError(f"{model_path}: not a readable SentencePiece model ({e})") from None
        if (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id()) != (
                PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise NmtError(f"{model_path}: SentencePiece model has other special ids than nmt's")
        self.sha256 = hashlib.sha256(proto).hexdigest()  # the run's fingerprint of it

    @staticmethod
    def train(texts: list[str], model_path: Path, vocab_size: int, symbols: tuple[str, ...] = ()) -> Tokenizer:
        """Train a unigram model on ``texts`` and write it atomically to ``model_path``;
        ``symbols`` (corpus tags) are pieces of their own, never cut.

        The vocabulary size is a soft limit, so small corpora get a smaller vocabulary; below
        the pieces that the corpus's characters need, it is raised to that with a warning.
        """
        try:
            proto = _train_proto(texts, vocab_size, symbols)
        except RuntimeError as e:
            needed = _TOO_SMALL.search(str(e))
            if needed is None:
                raise NmtError(f"SentencePiece could not train a vocabulary: {_reason(e)}") from None
            log.warning(SettingMessage("vocab_size", vocab_size, f"below the {needed[1]} pieces that this "
                                       f"corpus's characters need; using {needed[1]}"))
            proto = _train_proto(texts, int(needed[1]), symbols)
        with atomic_path(model_path) as tmp:
            tmp.write_bytes(proto)
        tokenizer = Tokenizer(model_path)
        log.info("trained a SentencePiece model of %d pieces", tokenizer.vocab_size)
        return tokenizer

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, lines: list[str]) -> list[list[int]]:
        """Piece ids of each line, without BOS/EOS."""
        return self.sp.encode(lines) if lines else []

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Detokenised text of each id sequence (specials dropped)."""
        return [self.sp.decode([i for i in seq if i > EOS_ID]) for seq in ids]

    def pieces(self, ids: list[int]) -> list[str]:
        """Readable piece strings, e.g. for attention plots."""
        return [self.sp.id_to_piece(i) for i in ids]
