"""Ensembles: the mean of the members' log-probabilities at every step. A model with itself
gives its own outputs and scores; a GRU with a Transformer decodes; members with another
tokenizer are refused."""
from __future__ import annotations

import shutil
from pathlib import Path

from conftest import clean_error, make_pairs, nmt
from nmt.api import Model, load
from nmt.data.tokenizer import Tokenizer
from nmt.inference.settings import SearchOptions

SOURCES = list(dict.fromkeys(src for src, _ in make_pairs(80, seed=5)))


def test_an_ensemble_of_a_model_with_itself_is_that_model(transformer_run: Path) -> None:
    for beam in (1, 3):
        options = SearchOptions(beam, 2 if beam > 1 else 1)
        alone = load(transformer_run, "cpu", "fp32").translator(options).nbest(SOURCES)
        twice = Model.ensemble([load(transformer_run, "cpu", "fp32")] * 2, options).nbest(SOURCES)
        for mine, ours in zip(alone, twice):
            assert [h.tokens for h in mine] == [h.tokens for h in ours]
            for a, b in zip(mine, ours):
                assert abs(a.score - b.score) <= 1e-4 * (len(a.tokens) + 1)


def test_a_gru_and_a_transformer_decode_together(tiny_run: Path, transformer_run: Path) -> None:
    """The two shared fixtures were trained on one corpus, so they share one spm.model."""
    result = nmt("translate", "--checkpoint", tiny_run, "--checkpoint", transformer_run, "--beam", "2",
                 "--nbest", "2", "Tom sees the cat.", "", "Mary likes the dog.")
    assert result.returncode == 0, result.stderr
    assert [line.split("\t")[0] for line in result.stdout.splitlines()] == ["0", "0", "1", "2", "2"]
    result = nmt("eval", "--checkpoint", tiny_run, "--checkpoint", transformer_run, "--json")
    assert result.returncode == 0 and str(tiny_run) in result.stdout, result.stderr


def test_members_with_another_tokenizer_are_refused(tiny_run: Path, transformer_run: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(transformer_run, other)
    Tokenizer.train([s for pair in make_pairs(60, seed=4) for s in pair], other / "spm2.model", vocab_size=40)
    (other / "spm.model").write_bytes((other / "spm2.model").read_bytes())
    result = nmt("translate", "--checkpoint", tiny_run, "--checkpoint", other, "x")
    clean_error(result, "spm.model")
    clean_error(nmt("translate", "--engine", "ctranslate2", "--checkpoint", tiny_run, "--checkpoint", other, "x"),
                "--engine ctranslate2")
