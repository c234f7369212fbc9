"""A bounded, uniform random sample of a stream (reservoir sampling, Vitter's algorithm R):
what SentencePiece trains on, and ``nmt bench``'s corpus, in memory that does not grow with the
corpus."""
from __future__ import annotations

import random
from typing import Generic, TypeVar

T = TypeVar("T")


class Reservoir(Generic[T]):
    """At most ``size`` of the items offered, each with the same chance; all of them, in order,
    while no more than ``size`` were offered. Seeded: the same stream gives the same sample."""

    def __init__(self, size: int, seed: int = 0) -> None:
        self.size, self.items, self.offered = size, [], 0
        self._rng = random.Random(seed)

    def offer(self, item: T) -> None:
        self.offered += 1
        if len(self.items) < self.size:
            self.items.append(item)
            return
        k = self._rng.randrange(self.offered)
        if k < self.size:
            self.items[k] = item
