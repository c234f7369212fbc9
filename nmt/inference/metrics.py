"""Corpus-level scores from sacrebleu, each with its signature, so numbers compare with published ones."""
from __future__ import annotations

from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF, TER

BOOTSTRAP = 1000  # resamples for a confidence interval, sacreBLEU's default


@dataclass
class Score:
    """A corpus score; with a bootstrap, ``mean`` ± ``ci`` is its 95% confidence interval
    (the mean of the resamples and half the interval's width, as sacreBLEU prints it)."""

    name: str
    score: float
    signature: str
    text: str  # sacrebleu's formatted score line
    mean: float | None = None
    ci: float | None = None


_METRICS = {"bleu": BLEU, "chrf": CHRF, "ter": TER}


def corpus_score(metric: str, hyps: list[str], refs: list[list[str | None]], bootstrap: int = 0) -> Score:
    """Score detokenised hypotheses against raw references.

    :param refs: one list per reference stream, each as long as ``hyps``; ``None`` marks a
        sentence that has fewer references (sacrebleu skips None, not empty strings)
    :param bootstrap: resamples for the 95% confidence interval (sacreBLEU's, seeded by
        ``SACREBLEU_SEED``, 12345 unless set); 0: none
    """
    scorer = _METRICS[metric]()
    result = scorer.corpus_score(hyps, refs, n_bootstrap=max(bootstrap, 1))
    if bootstrap > 1:
        return Score(metric, float(result.score), str(scorer.get_signature()), str(result),
                     float(result._mean), float(result._ci))
    return Score(metric, float(result.score), str(scorer.get_signature()), str(result))


def bleu(hyps: list[str], refs: list[str]) -> Score:
    """Single-reference corpus BLEU (13a tokenisation, case-sensitive)."""
    return corpus_score("bleu", hyps, [refs])
