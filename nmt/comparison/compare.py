"""A comparison: every system decoded on one test set (once: see :mod:`nmt.comparison.cache`),
scored with each metric, and tested against the first system, the baseline; and what that
says, in words."""
from __future__ import annotations

from dataclasses import dataclass

from nmt.comparison.significance import DEFAULT_SEED, LEVEL, Estimate, check_test, paired_test
from nmt.comparison.systems import Loader, System, hypotheses
from nmt.errors import NmtError
from nmt.inference.evaluate import TestSet
from nmt.inference.search import DEFAULT_BATCH


@dataclass
class Comparison:
    """The systems (the first is the baseline), their hypotheses, whether each came from the
    cache, and each metric's estimates (in the systems' order) and sacreBLEU signature."""

    systems: list[System]
    test: TestSet
    hyps: list[list[str]]
    cached: list[bool]
    estimates: dict[str, list[Estimate]]
    signatures: dict[str, str]
    test_type: str
    samples: int
    seed: int


def compare(systems: list[System], test: TestSet, load: Loader, metrics: list[str], test_type: str = "bs",
            samples: int | None = None, seed: int = DEFAULT_SEED, batch_size: int = DEFAULT_BATCH) -> Comparison:
    """Decode (or read) every system's hypotheses on ``test`` and test each against the first."""
    if len(systems) < 2:
        raise NmtError("a comparison needs two systems or more: the first is the baseline")
    # files first: a wrong line count is said before minutes of decoding
    order = sorted(range(len(systems)), key=lambda k: systems[k].kind != "file")
    found = {k: hypotheses(systems[k], test, load, batch_size) for k in order}
    hyps, cached = [found[k][0] for k in range(len(systems))], [found[k][1] for k in range(len(systems))]
    names = [s.name for s in systems]
    signatures, estimates = paired_test(list(zip(names, hyps)), test.refs, metrics, test_type, samples, seed)
    return Comparison(systems, test, hyps, cached, estimates, signatures, test_type,
                      check_test(test_type, samples, seed), seed)


def verdicts(comparison: Comparison) -> list[str]:
    """One sentence per system and metric against the baseline: which differences are
    significant at p < 0.05, and which could be chance."""
    baseline = comparison.systems[0].name
    lines = []
    for metric, rows in comparison.estimates.items():
        for system, e in zip(comparison.systems[1:], rows[1:]):
            name = metric.upper() if metric != "chrf" else "chrF"
            if e.identical:
                lines.append(f"{system.name} is identical to {baseline} (the same output for every sentence): "
                             f"no difference in {name}, p = 1.")
            elif e.significant:
                way = "better" if e.better else "worse"
                lines.append(f"{system.name} is {way} than {baseline} in {name} ({e.delta:+.2f}, p = {e.p:.4f}): "
                             f"significant at p < {LEVEL}.")
            else:
                lines.append(f"{system.name} differs from {baseline} in {name} by {e.delta:+.2f} (p = {e.p:.4f}): "
                             f"not significant at p < {LEVEL}; it could be chance.")
    return lines
