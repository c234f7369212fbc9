"""The held-out split: which source sentences are validation and test, a pure function of the
text, chosen in one streaming pass with memory bounded by the held-out sizes.

Distinct source sentences are ordered by the SHA-1 of their text; the first ``test_size`` are
the test set's and the next ``valid_size`` the validation set's, each at most a tenth of them.
So the split depends on nothing but the text (not on line order, seed or corpus size beyond
the cap), and every pair whose source is held out goes with it: the same source never lands
on both sides. One pass keeps only the smallest hashes seen so far.
"""
from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass


def source_key(src: str) -> bytes:
    """What orders source sentences for the split."""
    return hashlib.sha1(src.encode("utf-8")).digest()


@dataclass(frozen=True)
class HeldOut:
    """The keys (:func:`source_key`) of the test and the validation sources."""

    test: frozenset[bytes]
    valid: frozenset[bytes]

    def part(self, src: str) -> str:
        """"test", "valid" or "train": where a pair with source ``src`` belongs."""
        if not (self.test or self.valid):
            return "train"
        key = source_key(src)
        return "test" if key in self.test else "valid" if key in self.valid else "train"

    @staticmethod
    def choose(sources: Iterable[str], valid_size: int, test_size: int) -> HeldOut:
        """The held-out sources among ``sources`` (read once; repeats count once)."""
        wanted = valid_size + test_size
        smallest: list[bytes] = []  # sorted, at most ``wanted`` distinct keys
        # Distinct sources are counted only while the tenth cap could bind
        seen: set[bytes] | None = set() if wanted else None
        limit = 10 * (max(valid_size, test_size) + 1)
        for src in sources:
            key = source_key(src)
            if seen is not None:
                seen.add(key)
                if len(seen) > limit:
                    seen = None
            if wanted and (len(smallest) < wanted or key < smallest[-1]):
                at = bisect.bisect_left(smallest, key)
                if at == len(smallest) or smallest[at] != key:
                    smallest.insert(at, key)
                    del smallest[wanted:]
        cap = len(seen) // 10 if seen is not None else limit
        n_test, n_valid = min(test_size, cap), min(valid_size, cap)
        return HeldOut(frozenset(smallest[:n_test]), frozenset(smallest[n_test:n_test + n_valid]))


@dataclass
class Split:
    train: list[tuple[str, str]]
    valid: list[tuple[str, str]]
    test: list[tuple[str, str]]


def split_by_source(pairs: list[tuple[str, str]], valid_size: int, test_size: int) -> Split:
    """Hold out whole groups of pairs that share a source sentence (:class:`HeldOut`), in memory."""
    held_out = HeldOut.choose((src for src, _ in pairs), valid_size, test_size)
    split = Split([], [], [])
    for pair in pairs:
        getattr(split, held_out.part(pair[0])).append(pair)
    return split
