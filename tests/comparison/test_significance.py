"""Paired tests and confidence intervals: a real difference is significant, a system against
itself is identical with p = 1, the seed decides the resamples, and each estimate is
sacreBLEU's own."""
import random

import pytest
from sacrebleu.metrics import BLEU

from nmt.comparison.significance import LEVEL, check_metrics, check_test, paired_test
from nmt.errors import SettingError

WORDS = "le la les un une chat chien maison est grand petit rouge voit aime chasse".split()


def _corpus(n: int = 300, seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    """References, a good system (80% of words kept) and a poor one (50%)."""
    rng = random.Random(seed)
    refs = [" ".join(rng.choices(WORDS, k=rng.randint(4, 9))) for _ in range(n)]

    def noisy(keep: float) -> list[str]:
        return [" ".join(w if rng.random() < keep else rng.choice(WORDS) for w in r.split()) for r in refs]
    return refs, noisy(0.8), noisy(0.5)


@pytest.mark.parametrize("test", ["bs", "ar"])
def test_a_real_difference_is_significant_and_a_system_against_itself_identical(test: str) -> None:
    refs, good, poor = _corpus()
    signatures, estimates = paired_test([("poor", poor), ("good", good), ("poor again", list(poor))], [refs],
                                        ["bleu", "chrf", "ter"], test, 200 if test == "bs" else 500, seed=7)
    assert set(estimates) == {"bleu", "chrf", "ter"} and "seed:7" in signatures["bleu"]
    for metric, (baseline, better, same) in estimates.items():
        assert baseline.p is None and baseline.delta is None
        assert better.significant and better.p < LEVEL and better.better, metric
        assert (better.delta < 0) == (metric == "ter")  # TER: lower is better
        assert same.identical and same.p == 1.0 and same.delta == 0 and not same.significant
    bleu = estimates["bleu"]
    assert bleu[1].score == pytest.approx(BLEU().corpus_score(good, [refs]).score)
    assert bleu[1].mean - bleu[1].ci < bleu[1].score < bleu[1].mean + bleu[1].ci


def test_two_near_systems_are_not_significant() -> None:
    refs, good, _ = _corpus()
    rng = random.Random(3)
    near = [h if rng.random() < 0.98 else refs[i] for i, h in enumerate(good)]  # a handful of lines differ
    _, estimates = paired_test([("a", good), ("b", near)], [refs], ["bleu"], "bs", 300, seed=1)
    assert not estimates["bleu"][1].identical and estimates["bleu"][1].p > LEVEL


def test_a_difference_of_nothing_is_never_significant() -> None:
    """Outputs that differ in spaces only have the same statistics in every sentence: sacreBLEU
    counts no resample as extreme and would give 1 / (n + 1); no difference gives p = 1."""
    refs, good, _ = _corpus()
    spaced = [h.replace(" ", "  ") for h in good]
    _, estimates = paired_test([("a", good), ("b", spaced)], [refs], ["bleu", "chrf", "ter"], "bs", 200, seed=1)
    for metric, (_, other) in estimates.items():
        assert not other.identical and other.delta == 0 and other.p == 1.0 and not other.significant, metric


def test_the_seed_decides_the_resamples() -> None:
    refs, good, poor = _corpus(120)
    runs = [paired_test([("a", poor), ("b", good)], [refs], ["chrf"], "bs", 200, seed)[1]["chrf"][1]
            for seed in (5, 5, 6)]
    assert runs[0] == runs[1]
    assert (runs[0].mean, runs[0].ci) != (runs[2].mean, runs[2].ci)


def test_settings_are_checked() -> None:
    assert check_metrics(["ter", "bleu"]) == ["ter", "bleu"]
    for bad in (["bleu", "bleu"], ["meteor"], []):
        with pytest.raises(SettingError, match="metrics"):
            check_metrics(bad)
    assert check_test("bs", None, 1) == 1000 and check_test("ar", None, 1) == 10000
    with pytest.raises(SettingError, match="test xx"):
        check_test("xx", None, 1)
    with pytest.raises(SettingError, match="at least 100"):
        check_test("bs", 10, 1)
    with pytest.raises(SettingError, match="at most 10,000"):
        check_test("bs", 10_001, 1)
    with pytest.raises(SettingError, match="seed 0"):
        check_test("bs", None, 0)
