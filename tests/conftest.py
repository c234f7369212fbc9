"""Shared fixtures: a synthetic parallel corpus, a tiny tokenizer and a tiny seeded model.

Sizes are distinct (embed 6, hidden 8, vocabulary from the tokenizer), so a wrong transpose fails.
"""
from __future__ import annotations

import os
import random
import subprocess
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from nmt.config import ModelConfig, RunConfig, build_config
from nmt.data.tokenizer import PAD_ID, Tokenizer
from nmt.models.build import build_model
from nmt.models.rnn.seq2seq import Seq2Seq

ROOT = Path(__file__).resolve().parents[1]
# A tiny model for CLI tests: fast to train, a real run directory all the same; float32, so
# that figures do not depend on whether the CPU has native bfloat16 (test_precision.py).
TINY = ["--vocab-size", "60", "--embed-size", "8", "--hidden-size", "12", "--layers", "1",
        "--batch-size", "4", "--device", "cpu", "--valid-size", "5", "--test-size", "5",
        "--valid-bleu-size", "10", "--precision", "fp32"]



def tiny_config(corpus: Path, **extra: object) -> RunConfig:
    """A tiny GRU run's config on ``corpus`` for training in-process (``train_new_run``): 12
    steps, validated every 6; ``extra`` replaces any setting."""
    options = {"corpus": str(corpus), "embed_size": 8, "hidden_size": 12, "layers": 1,
               "vocab_size": 60, "batch_size": 16, "max_steps": 12, "valid_every": 6,
               "valid_bleu_size": 20, "valid_size": 10, "test_size": 10, "device": "cpu",
               "precision": "fp32"}
    return build_config({}, {**options, **extra})


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
               decoder: str = "input_feeding", attention: str = "additive", tie_embeddings: bool = False) -> Seq2Seq:
    torch.manual_seed(seed)
    cfg = ModelConfig(embed_size=8 if tie_embeddings else 6, hidden_size=8, layers=layers, bidirectional=bidirectional,
                      dropout=0.0, decoder=decoder, attention=attention, vocab=vocab, tie_embeddings=tie_embeddings)
    return build_model(cfg, PAD_ID).eval()


@pytest.fixture
def model(tokenizer: Tokenizer) -> Seq2Seq:
    return tiny_model(tokenizer.vocab_size)


def nmt(*args: str | bytes, stdin: str | None = None, cwd: Path | None = None, process: bool = False,
        **kwargs) -> subprocess.CompletedProcess:
    """Run the command line as a user runs it, from argument parsing to exit code.

    In a subprocess with ``process`` (or ``subprocess.run`` options, or bytes arguments): for
    what only a process shows (signals, exit paths, its environment). Otherwise in this
    process through Click's runner: the same code without two seconds of interpreter and
    torch start-up a call, which made up most of the suite's time. An exception that escapes
    the CLI is appended to stderr as the process would print it.
    """
    if process or kwargs or any(isinstance(a, bytes) for a in args):
        return subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], input=stdin,
                              capture_output=True, text=True, cwd=cwd or ROOT, timeout=600, **kwargs)
    from typer.testing import CliRunner

    from nmt.cli import app
    before = os.getcwd()
    os.chdir(cwd or ROOT)
    try:
        result = CliRunner().invoke(app, [str(a) for a in args], input=stdin)
    finally:
        os.chdir(before)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, stderr)


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` read-only even for root: a read-only bind mount (chmod where not root)."""
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield
        finally:
            path.chmod(0o755)
        return
    if subprocess.run(["mount", "--bind", "-o", "ro", str(path), str(path)], capture_output=True).returncode:
        pytest.skip("cannot make a read-only mount here")
    try:
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True)


def clean_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    """A user's mistake: one error line first, no traceback, exit code 1, and each of
    ``needles`` in what it says (however the terminal wrapped it)."""
    text = " ".join(result.stderr.split())
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error:") and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in text, text


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tsv(tmp_path_factory.mktemp("rel") / "toy.tsv", make_pairs(300, seed=9))


@pytest.fixture(scope="session")
def tiny_run(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trained run shared by the CLI tests; tests that damage a run damage a copy."""
    run = tmp_path_factory.mktemp("runs") / "tiny"
    result = nmt("train", "--corpus", str(corpus), "--run-dir", str(run), "--max-steps", "4", *TINY)
    assert result.returncode == 0, result.stderr
    return run


@pytest.fixture(scope="session")
def transformer_run(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small trained Transformer run (2 layers, 2 heads), shared like ``tiny_run``."""
    run = tmp_path_factory.mktemp("runs") / "transformer"
    sizes = [a if a not in ("8", "12") else "16" for a in TINY]
    sizes[sizes.index("--layers") + 1] = "2"
    result = nmt("train", "--corpus", corpus, "--run-dir", run, "--max-steps", "30", "--arch", "transformer",
                 "--heads", "2", "--ff-size", "16", *sizes)
    assert result.returncode == 0, result.stderr
    return run
