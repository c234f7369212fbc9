"""Shared fixtures: a synthetic parallel corpus, a tiny tokenizer and a tiny seeded model.

Sizes are distinct (embed 6, hidden 8, vocabulary from the tokenizer), so a wrong transpose fails.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from nmt.config import ModelConfig
from nmt.model import Seq2Seq, build_model
from nmt.tokenizer import PAD_ID, Tokenizer

EN_FR = {"tom": "tom", "mary": "marie", "sees": "voit", "likes": "aime", "chases": "chasse",
         "the": "le", "cat": "chat", "dog": "chien", "mouse": "souris", "bird": "oiseau",
         "big": "grand", "small": "petit", "red": "rouge", "today": "aujourd'hui", "now": "maintenant"}


def make_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """Synthetic sentence pairs: word-for-word translations, varied lengths, a few repeats."""
    rng = random.Random(seed)
    words = list(EN_FR)
    pairs = []
    for _ in range(n):
        en = [rng.choice(words) for _ in range(rng.randint(1, 7))]
        pairs.append((" ".join(en).capitalize() + ".", " ".join(EN_FR[w] for w in en).capitalize() + "."))
    return pairs


def write_tsv(path: Path, pairs: list[tuple[str, str]]) -> Path:
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tsv(tmp_path_factory.mktemp("corpus") / "toy.tsv", make_pairs(400))


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    texts = [t for pair in make_pairs(400) for t in pair]
    return Tokenizer.train(texts, tmp_path_factory.mktemp("spm") / "spm.model", vocab_size=60)


def tiny_model(vocab: int, bidirectional: bool = True, layers: int = 2, seed: int = 0,
               decoder: str = "input_feeding") -> Seq2Seq:
    torch.manual_seed(seed)
    cfg = ModelConfig(embed_size=6, hidden_size=8, layers=layers, bidirectional=bidirectional,
                      dropout=0.0, decoder=decoder, vocab=vocab)
    return build_model(cfg, PAD_ID).eval()


@pytest.fixture
def model(tokenizer: Tokenizer) -> Seq2Seq:
    return tiny_model(tokenizer.vocab_size)
