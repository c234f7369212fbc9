import pytest
from sacrebleu.metrics import BLEU

from nmt.inference.metrics import bleu, corpus_score


def test_identical_hypotheses_score_100_with_a_signature():
    refs = ["Le chat dort.", "Tom chasse Jerry."]
    score = bleu(refs, refs)
    assert score.score == pytest.approx(100.0)
    assert score.signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a")


def test_multi_reference_scoring_agrees_with_sacrebleu():
    hyps = ["the cat sat on the mat", "a dog barks", "hello there"]
    refs = [["the cat is on the mat", "dogs bark", "hello there"],
            ["there is a cat on the mat", None, "hi there"]]
    ours = corpus_score("bleu", hyps, refs)
    theirs = BLEU().corpus_score(hyps, refs)
    assert ours.score == theirs.score
    assert "nrefs:var" in ours.signature


def test_none_differs_from_an_empty_reference():
    """An empty string is a real (length 0) reference and changes the brevity penalty; None is none."""
    hyps = ["a b c d e f", "x"]
    with_none = corpus_score("bleu", hyps, [["a b c d e f", "x y z"], ["a b c", None]])
    with_empty = corpus_score("bleu", hyps, [["a b c d e f", "x y z"], ["a b c", ""]])
    assert with_none.score == BLEU().corpus_score(hyps, [["a b c d e f", "x y z"], ["a b c", None]]).score
    assert "ref_len = 9" in with_none.text and "ref_len = 6" in with_empty.text
    assert with_none.score < with_empty.score


def test_chrf_and_ter_run():
    assert corpus_score("chrf", ["abc"], [["abc"]]).score == 100.0
    assert corpus_score("ter", ["abc"], [["abc"]]).score == 0.0


def test_a_bootstrap_gives_sacrebleus_confidence_interval() -> None:
    hyps = ["le chat est noir", "un chien", "il pleut", "la maison est grande"] * 10
    refs = [["le chat est noir", "le chien", "il pleut fort", "la maison"] * 10]
    plain = corpus_score("bleu", hyps, refs)
    assert plain.ci is None and plain.mean is None
    score = corpus_score("bleu", hyps, refs, bootstrap=200)
    theirs = BLEU().corpus_score(hyps, refs, n_bootstrap=200)  # the same seed: SACREBLEU_SEED's default
    assert score.score == plain.score and (score.mean, score.ci) == (theirs._mean, theirs._ci)
    assert score.ci > 0 and score.mean - score.ci <= score.score <= score.mean + score.ci
    assert "bs:200" in score.signature and f"± {score.ci:.2f}" in score.text
