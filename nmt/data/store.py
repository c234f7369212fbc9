"""Piece-id sequences stored flat on disk and read memory-mapped, so that a corpus of millions
of pairs costs a run no memory of its own: the operating system pages in what batches read.

A store named NAME is three NumPy files: ``NAME.ids.npy``, every sequence's ids end to end
(int16 where the vocabulary fits in it, else int32; a :class:`TextStore`'s, the UTF-8 bytes of
each text, uint8), ``NAME.offsets.npy`` (int64), where
sequence i is ``ids[offsets[i]:offsets[i + 1]]``, and ``NAME.lengths.npy`` (int32), each
sequence's length, which batching reads for every pair (a third of what the offsets would
cost to read and difference each epoch). They are written a chunk at a time, under temporary
names renamed into place once complete, and opened read-only: several runs, and every rank
of one, may share them.
"""
from __future__ import annotations

import itertools
import os
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from nmt.errors import NmtError

_HEADER = 128  # bytes: room for any shape, a multiple of 64 as the format asks


def ids_dtype(vocab_size: int) -> np.dtype:
    """The narrowest signed type that holds every piece id of a ``vocab_size`` vocabulary."""
    return np.dtype(np.int16 if vocab_size <= np.iinfo(np.int16).max + 1 else np.int32)


def _npy_header(dtype: np.dtype, length: int) -> bytes:
    """The header of a one-dimensional .npy file (format 1.0), padded to :data:`_HEADER` bytes."""
    text = f"{{'descr': '{dtype.str}', 'fortran_order': False, 'shape': ({length},), }}"
    text = text.ljust(_HEADER - 10 - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin-1")


class _FlatWriter:
    """One .npy file of ``dtype``, appended to a chunk at a time; its header, written last,
    says how long it became."""

    def __init__(self, path: Path, dtype: np.dtype) -> None:
        self.path, self.dtype, self.length = path, dtype, 0
        self.tmp = path.with_name(path.name + ".tmp")
        self.file = open(self.tmp, "wb")
        self.file.write(_npy_header(dtype, 0))

    def append(self, values: np.ndarray) -> None:
        values.astype(self.dtype, copy=False).tofile(self.file)
        self.length += len(values)

    def close(self, keep: bool) -> None:
        if keep:
            self.file.seek(0)
            self.file.write(_npy_header(self.dtype, self.length))
        self.file.close()
        if keep:
            self.tmp.replace(self.path)
        else:
            self.tmp.unlink(missing_ok=True)


class StoreWriter:
    """Writes the store ``name`` in ``directory``: ``with StoreWriter(...) as w: w.extend(seqs)``.
    Nothing of it is in place until the block ends without an error."""

    def __init__(self, directory: Path, name: str, vocab_size: int, dtype: np.dtype | None = None) -> None:
        self.ids = _FlatWriter(directory / f"{name}.ids.npy", dtype or ids_dtype(vocab_size))
        self.offsets = _FlatWriter(directory / f"{name}.offsets.npy", np.dtype(np.int64))
        self.lengths = _FlatWriter(directory / f"{name}.lengths.npy", np.dtype(np.int32))
        self.offsets.append(np.zeros(1, dtype=np.int64))
        self.count = 0

    def extend(self, sequences: list[list[int]] | list[bytes]) -> None:
        lengths = np.fromiter(map(len, sequences), dtype=np.int64, count=len(sequences))
        total = int(lengths.sum())
        self.ids.append(np.fromiter(itertools.chain.from_iterable(sequences), dtype=self.ids.dtype, count=total))
        self.offsets.append(np.cumsum(lengths) + self.ids.length - total)
        self.lengths.append(lengths)
        self.count += len(sequences)

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, error_type: type | None, *_: object) -> None:
        for writer in (self.ids, self.offsets, self.lengths):
            writer.close(keep=error_type is None)


class _Reader:
    """Reads spans of a one-dimensional .npy file with ``pread``: the pages read are the page
    cache's, not mapped into the process, so that a long run's random reads over a corpus of
    millions of pairs do not count in its resident memory, as a memory map's would."""

    def __init__(self, path: Path, mapped: np.memmap) -> None:
        self.fd, self.dtype, self.base = os.open(path, os.O_RDONLY), mapped.dtype, mapped.offset

    def read(self, start: int, count: int) -> np.ndarray:
        size = self.dtype.itemsize
        return np.frombuffer(os.pread(self.fd, count * size, self.base + start * size), dtype=self.dtype)

    def __del__(self) -> None:
        os.close(self.fd)


class TokenStore(Sequence):
    """The sequences of a store: ``store[i]`` is a new ``list[int]``. ``ids``, ``offsets`` and
    the lengths as the module says; memory-mapped when :meth:`open` read them, a sequence
    then read from its files (:class:`_Reader`)."""

    KIND = "i"  # what the ids are: signed integers

    def __init__(self, ids: np.ndarray, offsets: np.ndarray, lengths: np.ndarray,
                 readers: tuple[_Reader, _Reader] | None = None) -> None:
        self.ids, self.offsets, self._lengths, self._readers = ids, offsets, lengths, readers

    @classmethod
    def open(cls, directory: Path, name: str) -> TokenStore:
        """The store ``name`` in ``directory``, read-only and memory-mapped, its shape checked."""
        paths = [directory / f"{name}.{part}.npy" for part in ("ids", "offsets", "lengths")]
        try:
            ids, offsets, lengths = (np.load(path, mmap_mode="r", allow_pickle=False) for path in paths)
        except (OSError, ValueError) as e:
            raise NmtError(f"{directory}: cannot read the encoded data {name} ({e})") from None
        if (ids.ndim != 1 or offsets.ndim != 1 or len(offsets) < 1 or offsets[0] != 0
                or offsets[-1] != len(ids) or ids.dtype.kind != cls.KIND or offsets.dtype != np.int64
                or lengths.shape != (len(offsets) - 1,) or lengths.dtype != np.int32):
            raise NmtError(f"{directory}: the encoded data {name} is damaged; prepare the data again")
        return cls(ids, offsets, lengths, (_Reader(paths[0], ids), _Reader(paths[1], offsets)))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> list[int]:
        return self.span(index).tolist()

    def span(self, index: int) -> np.ndarray:
        """Sequence ``index``'s ids as they are stored."""
        if not -len(self) <= index < len(self):
            raise IndexError(f"sequence {index} of {len(self)}")
        index %= len(self)
        if self._readers is None:
            return self.ids[self.offsets[index]:self.offsets[index + 1]]
        ids, offsets = self._readers
        start, end = offsets.read(index, 2).tolist()
        return ids.read(start, end - start)

    def __iter__(self) -> Iterator[list[int]]:
        return (self[i] for i in range(len(self)))

    def lengths(self) -> np.ndarray:
        """Each sequence's length, in order, shape (sequences,), int32."""
        return self._lengths

    def distinct(self, vocab_size: int, chunk: int = 1 << 24) -> list[int]:
        """Every id that occurs in some sequence, sorted; read a chunk at a time."""
        seen = np.zeros(vocab_size, dtype=bool)
        for start in range(0, len(self.ids), chunk):
            seen[np.asarray(self.ids[start:start + chunk])] = True
        return np.flatnonzero(seen).tolist()

    def __repr__(self) -> str:
        return f"TokenStore({len(self)} sequences, {len(self.ids)} ids, {self.ids.dtype})"


class TextStore(TokenStore):
    """Texts stored as a store's sequences of UTF-8 bytes: ``store[i]`` is text ``i``."""

    KIND = "u"

    def __getitem__(self, index: int) -> str:  # type: ignore[override]
        return self.span(index).tobytes().decode("utf-8")


TEXT = np.dtype(np.uint8)  # a TextStore's ids


def in_memory(sequences: Sequence[list[int]], vocab_size: int) -> TokenStore:
    """A store of ``sequences`` held in memory, for tests and small data."""
    lengths = np.fromiter(map(len, sequences), dtype=np.int64, count=len(sequences))
    ids = np.fromiter(itertools.chain.from_iterable(sequences), dtype=ids_dtype(vocab_size), count=int(lengths.sum()))
    return TokenStore(ids, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), lengths.astype(np.int32))
