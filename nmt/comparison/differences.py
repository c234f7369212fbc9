"""Where systems differ most: the test sentences whose sentence-level chrF varies most from
one system to another, for a person to read (the terminal's and the page's examples)."""
from __future__ import annotations

from dataclasses import dataclass

from sacrebleu.metrics import CHRF


@dataclass(frozen=True)
class Example:
    """One test sentence: its index (0-based), source, references, each system's hypothesis
    and its sentence chrF, and the spread (the highest chrF less the lowest)."""

    index: int
    source: str
    refs: tuple[str, ...]
    hyps: tuple[str, ...]
    chrf: tuple[float, ...]

    @property
    def spread(self) -> float:
        return max(self.chrf) - min(self.chrf)


def differing_most(sources: list[str], refs: list[list[str | None]], hyps: list[list[str]], k: int) -> list[Example]:
    """The ``k`` sentences where the systems' sentence chrF spreads most, most first (ties:
    in test order); sentences where all systems agree are never listed.

    :param refs: reference streams (None: no such reference for a line)
    :param hyps: one list per system, each as long as ``sources``
    """
    chrf = CHRF()
    examples = []
    for i, source in enumerate(sources):
        outputs = tuple(h[i] for h in hyps)
        if len(set(outputs)) == 1:
            continue
        line_refs = tuple(stream[i] for stream in refs if stream[i] is not None)
        scores = tuple(round(chrf.sentence_score(h, list(line_refs)).score, 2) for h in outputs)
        examples.append(Example(i, source, line_refs, outputs, scores))
    examples.sort(key=lambda e: (-e.spread, e.index))
    return examples[:k]
