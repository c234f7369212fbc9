"""The search settings every front end takes (``nmt translate`` and its siblings, the Python
API, the HTTP service), checked in this one place, so that a value one of them refuses no
other accepts. Errors are :class:`nmt.errors.SettingError`, which each front end names its own
way (``--length-penalty`` on the command line, ``length_penalty`` in Python)."""
from __future__ import annotations

import math
import numbers

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
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise SettingError("length_penalty", None,
                           f"must be a number, got {shown(alpha)} ({type(alpha).__name__})")
    if not (math.isfinite(alpha) and alpha >= 0):
        raise SettingError("length_penalty", alpha, "must be a finite number >= 0")
    return float(alpha)


def check_search(beam: object, length_penalty: object, n: object = 1, n_name: str = "nbest") -> None:
    """A beam size, a length penalty, and how many of the beam's best are wanted (``nbest``,
    or the ``rank`` of one), at most the beam."""
    beam = check_count("beam", beam)
    check_length_penalty(length_penalty)
    if check_count(n_name, n) > beam:
        raise SettingError(n_name, n, f"must be at most {{beam}} ({beam})", ("beam",))
