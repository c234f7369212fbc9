"""nmt train --init-from RUN: a new run from another's weights, tokenizer and model, on new
data. Fine-tuning on a small in-domain set raises BLEU on that set's test split; new-data
pieces the parent has no row for are counted; model flags are refused."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from conftest import EN_FR, clean_error, make_pairs, nmt, write_tsv

pytestmark = pytest.mark.slow  # end to end: see setup.cfg's markers

RUN = ["--device", "cpu", "--precision", "fp32", "--batch-size", "16", "--valid-size", "20", "--test-size", "40",
       "--valid-bleu-size", "20", "--valid-every", "100", "--lr", "0.005"]
MODEL = ["--embed-size", "32", "--hidden-size", "48", "--layers", "1", "--vocab-size", "80"]
COLLOQUIAL = {**EN_FR, "cat": "minou", "dog": "toutou", "likes": "kiffe"}  # the new domain's words


def in_domain(n: int, seed: int) -> list[tuple[str, str]]:
    """Another domain: colloquial words for three of the parent's, and an unseen word."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        en = [rng.choice(list(EN_FR)) for _ in range(rng.randint(2, 5))]
        fr = [COLLOQUIAL[w] for w in en]
        if rng.random() < 0.2:
            en, fr = en + ["xylophone"], fr + ["xylophone"]
        pairs.append((" ".join(en) + " .", " ".join(fr) + " ."))
    return pairs


@pytest.fixture(scope="module")
def parent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("finetune")
    corpus = write_tsv(root / "base.tsv", [(s.lower()[:-1] + " .", t.lower()[:-1] + " .")
                                           for s, t in make_pairs(600, seed=1)])
    result = nmt("train", "--corpus", corpus, "--run-dir", root / "parent", "--max-steps", "300", *RUN, *MODEL)
    assert result.returncode == 0, result.stderr
    return root / "parent"


def _bleu(run: Path, test: Path) -> float:
    src, ref = test.parent / "test.src", test.parent / "test.ref"
    pairs = [line.split("\t") for line in test.read_text(encoding="utf-8").splitlines()]
    src.write_text("".join(p[0] + "\n" for p in pairs), encoding="utf-8")
    ref.write_text("".join(p[1] + "\n" for p in pairs), encoding="utf-8")
    result = nmt("eval", "--checkpoint", run, "--src", src, "--ref", ref, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["scores"]["bleu"]["score"]


def test_fine_tuning_raises_bleu_in_domain(parent: Path, tmp_path: Path) -> None:
    corpus = write_tsv(tmp_path / "domain.tsv", in_domain(300, seed=2))
    child = tmp_path / "child"
    result = nmt("train", "--init-from", parent, "--corpus", corpus, "--run-dir", child, "--max-steps", "150", *RUN)
    assert result.returncode == 0, result.stderr
    assert (child / "spm.model").read_bytes() == (parent / "spm.model").read_bytes()
    before, after = _bleu(parent, child / "test.tsv"), _bleu(child, child / "test.tsv")
    original_before = _bleu(parent, parent / "test.tsv")
    original_after = _bleu(child, parent / "test.tsv")
    print(f"in-domain BLEU {before:.1f} -> {after:.1f}; original test {original_before:.1f} -> {original_after:.1f}")
    assert after > before + 10
    summary = json.loads((child / "run.json").read_text())
    assert summary["init_from"]["run"] == str(parent.resolve())
    assert summary["init_from"]["unknown_tokens"]["source"] > 0  # "xylophone"'s pieces
    info = nmt("info", "--checkpoint", child)
    assert "fine-tuned from" in info.stdout and str(parent.resolve()) in " ".join(info.stdout.split()), info.stdout


def test_model_and_vocabulary_flags_and_a_resume_are_refused(parent: Path, corpus: Path, tmp_path: Path) -> None:
    base = ["train", "--init-from", parent, "--corpus", corpus, "--run-dir", tmp_path / "c", "--max-steps", "1"]
    clean_error(nmt(*base, "--hidden-size", "16"), "--hidden-size 16", "--init-from")
    clean_error(nmt(*base, "--arch", "transformer"), "--arch transformer", "keeps its model")
    clean_error(nmt(*base, "--vocab-size", "300"), "--vocab-size 300", "keeps its model and vocabulary")
    clean_error(nmt("train", "--init-from", parent, "--resume", parent), "--init-from", "--resume")
    clean_error(nmt("train", "--init-from", tmp_path, "--corpus", corpus), "--init-from", "not a run directory")
    assert not (tmp_path / "c").exists()
