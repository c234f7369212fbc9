"""Piece ids stored flat on disk (nmt.data.store): written a chunk at a time, read back
memory-mapped, the narrowest id type, and nothing left half-written."""
import numpy as np
import pytest

from nmt.data.store import StoreWriter, TokenStore, ids_dtype, in_memory
from nmt.errors import NmtError

SEQS = [[1, 2, 3], [4], [], [5, 6], [7, 8, 9, 10]]


def test_chunks_written_read_back_memory_mapped(tmp_path):
    with StoreWriter(tmp_path, "s", 100) as out:
        out.extend(SEQS[:2])
        out.extend([])
        out.extend(SEQS[2:])
    store = TokenStore.open(tmp_path, "s")
    assert list(store) == SEQS and store[-1] == SEQS[-1] and len(store) == 5
    assert isinstance(store.ids, np.memmap) and store.ids.dtype == np.int16
    assert store.lengths().tolist() == [3, 1, 0, 2, 4] and store.distinct(100) == list(range(1, 11))
    assert list(in_memory(SEQS, 100)) == SEQS
    with pytest.raises(IndexError):
        store[5]


def test_ids_take_the_narrowest_type_that_holds_the_vocabulary():
    assert ids_dtype(8000) == np.int16 and ids_dtype(32768) == np.int16 and ids_dtype(32769) == np.int32


def test_a_failed_write_leaves_nothing_and_a_damaged_store_is_refused(tmp_path):
    with pytest.raises(RuntimeError):
        with StoreWriter(tmp_path, "s", 100) as out:
            out.extend(SEQS)
            raise RuntimeError("the disk is full")
    assert list(tmp_path.iterdir()) == []
    with StoreWriter(tmp_path, "s", 100) as out:
        out.extend(SEQS)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["s.ids.npy", "s.lengths.npy", "s.offsets.npy"]
    offsets = np.load(tmp_path / "s.offsets.npy")
    np.save(tmp_path / "s.offsets.npy", offsets[:-1])  # the last sequence's end lost
    with pytest.raises(NmtError, match="damaged"):
        TokenStore.open(tmp_path, "s")
    (tmp_path / "s.ids.npy").write_bytes(b"not numpy")
    with pytest.raises(NmtError, match="cannot read the encoded data s"):
        TokenStore.open(tmp_path, "s")
