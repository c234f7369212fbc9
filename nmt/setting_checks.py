"""Checks of one setting's value, each raising a :class:`~nmt.errors.ConfigError` that names
the setting (the CLI shows it as the flag), for :meth:`nmt.config.RunConfig.validate`."""
from __future__ import annotations

import math
from typing import Any

from nmt.errors import ConfigError, shown

RESERVED_PIECES = ("<pad>", "<unk>", "<s>", "</s>")  # SentencePiece's control pieces in nmt's tokenizer
_TYPES = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,), "list": (list,)}


def check_corpora(corpus: Any) -> None:
    """A list of corpora: each a path, or a mapping of ``path``, a positive ``weight`` and a
    ``tag`` (one token, no spaces)."""
    if not isinstance(corpus, list):
        return
    check(bool(corpus), "corpus", None, "an empty list names no corpus")
    for k, entry in enumerate(corpus, start=1):
        if isinstance(entry, str):
            continue
        weight = entry.get("weight") if isinstance(entry, dict) else None
        check(not isinstance(weight, str), "corpus", None,
              f"entry {k}'s weight must be a number, got the string {weight!r} (YAML reads 5e-1 as a string: "
              "write 0.5 or 5.0e-1)")
        ok = (isinstance(entry, dict) and set(entry) <= {"path", "weight", "tag"} and isinstance(entry.get("path"), str)
              and isinstance(entry.get("weight", 1), (int, float)) and not isinstance(entry.get("weight"), bool))
        check(ok, "corpus", None, f"entry {k} must be a path, or a mapping of path, weight and tag, got {shown(entry)}")
        tag = entry.get("tag", "<bt>")
        check(isinstance(tag, str) and 0 < len(tag) <= 32 and not any(c.isspace() for c in tag), "corpus", None,
              f"entry {k}'s tag must be one token of 1 to 32 characters without spaces, e.g. <bt>; got {shown(tag)}")
        check(tag not in RESERVED_PIECES, "corpus", None,
              f"entry {k}'s tag {tag} is one of the tokenizer's own pieces ({', '.join(RESERVED_PIECES)}); "
              "choose another, e.g. <bt>")
        weight = entry.get("weight", 1)
        check(math.isfinite(weight) and weight > 0, "corpus", None,
               f"entry {k}'s weight must be a finite number > 0, got {weight}")


def check_type(name: str, value: Any, annotation: str) -> None:
    """Check ``value`` against a field annotation such as ``int`` or ``float | None``."""
    options = [a.strip() for a in str(annotation).split("|")]
    if value is None and "None" in options:
        return
    allowed = tuple(t for o in options for t in _TYPES.get(o, ()))
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        raise ConfigError(name, None, f"must be {' or '.join(o for o in options if o != 'None')}, "
                                      f"got {shown(value)}")


def check(ok: bool, setting: str | None, value: Any, reason: str, mentions: tuple[str, ...] = ()) -> None:
    if not ok:
        raise ConfigError(setting, value, reason, mentions)


def at_least(section: Any, name: str, minimum: int) -> None:
    value = getattr(section, name)
    check(value is None or value >= minimum, name, value, f"must be >= {minimum}")


def choice(section: Any, name: str, choices: tuple[str, ...]) -> None:
    value = getattr(section, name)
    spelled = [spelling(c) for c in choices]
    check(value in choices, name, shown(value), f"must be {', '.join(spelled[:-1])} or {spelled[-1]}")


def spelling(value: Any) -> Any:
    """A choice as the CLI spells it (input-feeding); configs take either spelling."""
    return value.replace("_", "-") if isinstance(value, str) else value
