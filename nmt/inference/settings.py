"""The search settings every front end takes (``nmt translate`` and its siblings, the Python
API, the HTTP service): one :class:`SearchOptions`, checked in this one place when it is made,
so that a value one of them refuses no other accepts, and handed as it is to the search.
Errors are :class:`nmt.errors.SettingError`, which each front end names its own way
(``--length-penalty`` on the command line, ``length_penalty`` in Python)."""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from nmt.errors import SettingError, shown


def check_count(name: str, value: object, minimum: int = 1) -> int:
    """``value`` if it is an integer (not a bool, not a float or a string of one) of at least
    ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise SettingError(name, None, f"must be a whole number, got {shown(value)} ({type(value).__name__})")
    if value < minimum:
        raise SettingError(name, value, f"must be >= {minimum}")
    return int(value)


def check_length_penalty(alpha: object) -> float:
    """``alpha`` if it is a finite real number >= 0 (GNMT's length penalty; 0: none)."""
    return check_real("length_penalty", alpha, 0.0)


def check_search(beam: object, length_penalty: object, n: object = 1, n_name: str = "nbest") -> None:
    """A beam size, a length penalty, and how many of the beam's best are wanted (``nbest``,
    or the ``rank`` of one), at most the beam."""
    beam = check_count("beam", beam)
    check_length_penalty(length_penalty)
    if check_count(n_name, n) > beam:
        raise SettingError(n_name, n, f"must be at most {{beam}} ({beam})", ("beam",))


def check_real(name: str, value: object, low: float, high: float = math.inf, low_open: bool = False) -> float:
    """``value`` if it is a finite real number (not a bool) in [low, high], or (low, high]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise SettingError(name, None, f"must be a number, got {shown(value)} ({type(value).__name__})")
    if not math.isfinite(value) or value < low or (low_open and value == low) or value > high:
        bounds = f"{'(' if low_open else '['}{low:g}, {high:g}]" if math.isfinite(high) else \
            f"{'>' if low_open else '>='} {low:g}"
        raise SettingError(name, value, f"must be a finite number {'in ' if math.isfinite(high) else ''}{bounds}")
    return float(value)


DEFAULT_LENGTH_PENALTY = 1.0
MAX_SAMPLES = 1000  # per source: far more than back-translation draws, and a bound on the work


@dataclass(frozen=True)
class Sampling:
    """Draw each piece from the model's distribution instead of taking the most likely one:
    its logits divided by ``temperature``, cut to the ``top_k`` most likely pieces (0: all)
    and to the smallest set whose probability reaches ``top_p`` (1: all). A sentence's draws
    follow from ``seed``, its line and sample number and the step alone, so the same input
    and seed give the same output however it is batched (:mod:`nmt.inference.sampling`)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        check_real("temperature", self.temperature, 0.0, low_open=True)
        check_count("top_k", self.top_k, 0)
        check_real("top_p", self.top_p, 0.0, 1.0, low_open=True)
        check_count("seed", self.seed, 0)


@dataclass(frozen=True)
class SearchOptions:
    """How a search decodes: greedy (``beam`` 1), beam search, or ``sampling``; the ``nbest``
    outputs kept per source (the beam's best, or as many samples), the GNMT length penalty of
    beam search, and each output's most pieces, ``len_ratio`` * its source's pieces +
    ``len_extra`` (EOS included)."""

    beam: int = 1
    nbest: int = 1
    length_penalty: float = DEFAULT_LENGTH_PENALTY
    sampling: Sampling | None = None
    len_ratio: float = 2.0
    len_extra: int = 10

    def __post_init__(self) -> None:
        check_search(self.beam, self.length_penalty, 1)
        check_count("nbest", self.nbest)
        if self.sampling is not None and self.beam > 1:
            raise SettingError("beam", self.beam, "and sampling do not go together: a sampled output draws one "
                               "piece at a time; give beam 1 (nbest draws several samples)")
        if self.sampling is None and self.nbest > self.beam:
            raise SettingError("nbest", self.nbest, f"must be at most {{beam}} ({self.beam})", ("beam",))
        if self.nbest > MAX_SAMPLES:
            raise SettingError("nbest", self.nbest, f"must be at most {MAX_SAMPLES:,} samples per source")
        check_real("len_ratio", self.len_ratio, 0.0)
        check_count("len_extra", self.len_extra)

    @property
    def strategy(self) -> str:
        """greedy, beam or sample."""
        return "sample" if self.sampling is not None else "beam" if self.beam > 1 else "greedy"
