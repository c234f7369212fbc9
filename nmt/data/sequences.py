"""Many variable-length piece-id sequences, stored flat.

As Python lists of ints the training corpus costs about 40 bytes a piece (an int object and
a pointer to it): 125 MB of a training run's resident memory for fra-eng's 3.1 M pieces.
Here every sequence's ids sit in one array of 4-byte ints, with each sequence's offset in a
second array; a sequence is read back as a list when a batch is made.
"""
from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence


class Sequences(Sequence):
    """An append-only list of int sequences: ``seqs[i]`` (an int index) is a new ``list[int]``."""

    def __init__(self, sequences: Iterable[list[int]] = ()) -> None:
        self._ids = array("i")
        self._offsets = array("q", [0])
        self.extend(sequences)

    def extend(self, sequences: Iterable[list[int]]) -> None:
        for seq in sequences:
            self._ids.extend(seq)
            self._offsets.append(len(self._ids))

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, index: int) -> list[int]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"sequence {index} of {len(self)}")
        index %= len(self)
        return self._ids[self._offsets[index]:self._offsets[index + 1]].tolist()

    def __iter__(self) -> Iterator[list[int]]:
        return (self[i] for i in range(len(self)))

    def lengths(self) -> list[int]:
        """Each sequence's length, in order."""
        offsets = self._offsets
        return [offsets[i + 1] - offsets[i] for i in range(len(self))]

    def distinct(self) -> set[int]:
        """Every id that occurs in any sequence."""
        return set(self._ids)

    def __repr__(self) -> str:
        return f"Sequences({len(self)} sequences, {len(self._ids)} ids)"
