"""Paired significance tests and 95% confidence intervals, from sacreBLEU's own
(``sacrebleu.significance.PairedTest``): paired bootstrap resampling (Koehn 2004, the Moses
script's test) or approximate randomisation (Riezler and Maxwell 2005, as MultEval).

Two of sacreBLEU's ways are mended here: a system identical to the baseline gets p = 1 (its
tests give the smallest p they can, 1 / (n + 1), since no resample differs by more than the
real difference of 0), and the seed is passed in, not read from ``SACREBLEU_SEED``.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.significance import PairedTest

from nmt.errors import SettingError

METRICS = {"bleu": BLEU, "chrf": CHRF, "ter": TER}
LOWER_IS_BETTER = {"ter"}
TESTS = ("bs", "ar")  # paired bootstrap resampling, approximate randomisation
DEFAULT_SAMPLES = {"bs": 1000, "ar": 10000}  # sacreBLEU's own
BOOTSTRAP_CI = 1000  # resamples for the confidence intervals of an ar test, as bs draws
DEFAULT_SEED = 12345  # sacreBLEU's
LEVEL = 0.05  # what "significant" means here


@dataclass(frozen=True)
class Estimate:
    """One system's score on one metric: the corpus score, the mean of its bootstrap
    resamples and the half-width of their 95% interval (mean ± ci, as sacreBLEU prints it);
    against the baseline, the difference and its p-value (None for the baseline itself)."""

    metric: str
    score: float
    mean: float
    ci: float
    delta: float | None = None
    p: float | None = None
    identical: bool = False

    @property
    def significant(self) -> bool:
        return self.p is not None and self.p < LEVEL

    @property
    def better(self) -> bool:
        """Better than the baseline (TER: lower)."""
        return self.delta is not None and (self.delta < 0 if self.metric in LOWER_IS_BETTER else self.delta > 0)


def check_metrics(names: list[str]) -> list[str]:
    """``names`` if each is a metric here, once each, in the given order."""
    for name in names:
        if name not in METRICS:
            raise SettingError("metrics", ",".join(names), f"{name!r} is not one of {', '.join(METRICS)}")
    if len(set(names)) != len(names) or not names:
        raise SettingError("metrics", ",".join(names), "name each metric once")
    return names


MOST_SAMPLES = 10_000


def check_test(test: str, samples: int | None, seed: int) -> int:
    """The number of samples the test draws (``samples`` or sacreBLEU's default), checked."""
    if test not in TESTS:
        raise SettingError("test", test, "must be bs (paired bootstrap resampling) or ar (approximate randomisation)")
    if samples is not None and samples < 100:
        raise SettingError("n", samples, "must be at least 100: a p-value's resolution is 1 / (n + 1)")
    if samples is not None and samples > MOST_SAMPLES:  # bs holds every resample's statistics at once
        raise SettingError("n", samples, f"must be at most {MOST_SAMPLES:,} (bs: about 0.25 GB of memory a "
                           "1,000 resamples of 3,000 sentences in chrF)")
    if seed < 1:  # sacreBLEU reads a seed of 0 as "not seeded"
        raise SettingError("seed", seed, "must be at least 1")
    return samples or DEFAULT_SAMPLES[test]


@contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """sacreBLEU takes its seed from the environment only; this sets it for one test, and
    keeps its progress messages (a line per system and metric) out of the log."""
    before, logger = os.environ.get("SACREBLEU_SEED"), logging.getLogger("sacrebleu")
    level = logger.level
    os.environ["SACREBLEU_SEED"] = str(seed)
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)
        if before is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = before


def paired_test(systems: list[tuple[str, list[str]]], refs: list[list[str | None]], metrics: list[str],
                test: str = "bs", samples: int | None = None, seed: int = DEFAULT_SEED
                ) -> tuple[dict[str, str], dict[str, list[Estimate]]]:
    """Each system's scores against the first's, the baseline.

    :param systems: (name, hypotheses) pairs, each as long as the references; at least two
    :param refs: reference streams, one list per stream (None: no such reference for a line)
    :return: each metric's sacreBLEU signature, and its estimates in the systems' order
    """
    n = check_test(test, samples, seed)
    with _seeded(seed):
        tester = PairedTest(systems, {m: METRICS[m]() for m in metrics}, refs, test_type=test, n_samples=n,
                            n_ar_confidence=BOOTSTRAP_CI if test == "ar" else -1)
        signatures, results = tester()
    baseline = systems[0][1]
    out: dict[str, list[Estimate]] = {}
    for metric, key in zip(metrics, signatures):  # sacreBLEU's names (BLEU, chrF2, TER), in our order
        first = results[key][0]
        base = float(first.score)
        rows = [Estimate(metric, base, float(first.mean), float(first.ci))]
        for (_, hyps), r in zip(systems[1:], results[key][1:]):  # numpy numbers made Python's
            same = hyps == baseline
            # no difference is no evidence of one: with every sentence's statistics equal
            # (outputs that differ only in spaces), sacreBLEU counts no resample and gives 1/(n+1)
            delta = float(r.score) - base
            rows.append(Estimate(metric, float(r.score), float(r.mean), float(r.ci), delta,
                                 1.0 if same or delta == 0 else float(r.p_value), same))
        out[metric] = rows
    return {m: str(signatures[k]) for m, k in zip(metrics, signatures)}, out
