import pytest

from nmt.data.sequences import Sequences


def test_sequences_give_back_each_list_its_length_and_the_ids_seen():
    lists = [[5, 6, 7], [], [1_000_000], [8, 5]]
    seqs = Sequences(lists[:2])
    seqs.extend(lists[2:])
    assert len(seqs) == 4 and list(seqs) == lists
    assert seqs[-1] == [8, 5] and seqs[2] == [1_000_000]
    assert seqs.lengths() == [3, 0, 1, 2]
    assert seqs.distinct() == {5, 6, 7, 8, 1_000_000}
    seqs[0].append(9)  # a copy: the stored ids do not change
    assert seqs[0] == [5, 6, 7]


@pytest.mark.parametrize("index", [4, -5])
def test_sequences_index_past_either_end_raises(index):
    with pytest.raises(IndexError):
        Sequences([[1], [2], [3], [4]])[index]
