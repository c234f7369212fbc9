"""Corpus-level scores from sacrebleu, each with its signature, so numbers compare with published ones."""
from __future__ import annotations

from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF, TER


@dataclass
class Score:
    name: str
    score: float
    signature: str
    text: str  # sacrebleu's formatted score line


_METRICS = {"bleu": BLEU, "chrf": CHRF, "ter": TER}


def corpus_score(metric: str, hyps: list[str], refs: list[list[str | None]]) -> Score:
    """Score detokenised hypotheses against raw references.

    :param refs: one list per reference stream, each as long as ``hyps``; ``None`` marks a
        sentence that has fewer references (sacrebleu skips None, not empty strings)
    """
    scorer = _METRICS[metric]()
    result = scorer.corpus_score(hyps, refs)
    return Score(metric, float(result.score), str(scorer.get_signature()), str(result))


def bleu(hyps: list[str], refs: list[str]) -> Score:
    """Single-reference corpus BLEU (13a tokenisation, case-sensitive)."""
    return corpus_score("bleu", hyps, [refs])
