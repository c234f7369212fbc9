"""The sentences where systems differ most: by the spread of their sentence chrF, most first;
sentences where every system agrees are left out."""
from sacrebleu.metrics import CHRF

from nmt.comparison.differences import differing_most


def test_the_widest_spread_comes_first_and_agreement_is_left_out() -> None:
    sources = ["a", "b", "c", "d"]
    refs = [["le chat noir", "un chien", "la maison", "il pleut"], [None, "le chien", None, None]]
    hyps = [["le chat noir", "un chien", "la maison", "il pleut"],
            ["le chat blanc", "xyz", "la maison", "il neige"]]
    found = differing_most(sources, refs, hyps, 10)
    assert [e.index for e in found] == [1, 3, 0]  # "c" agrees
    first = found[0]
    assert first.refs == ("un chien", "le chien") and first.hyps == ("un chien", "xyz")
    assert first.chrf[1] == round(CHRF().sentence_score("xyz", ["un chien", "le chien"]).score, 2)
    assert first.spread == max(first.chrf) - min(first.chrf)
    assert [e.spread for e in found] == sorted((e.spread for e in found), reverse=True)
    assert [e.index for e in differing_most(sources, refs, hyps, 1)] == [1]
    assert differing_most(sources, refs, hyps, 0) == []
