import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nmt.data.batching import bucket_batches, length_sorted_chunks, make_batch, padded_pieces, split_passes
from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID


def test_make_batch_shifts_targets_and_pads():
    batch = make_batch([[5, 6], [7]], [[8], [9, 10, 11]])
    assert batch.src.tolist() == [[5, 6, EOS_ID], [7, EOS_ID, PAD_ID]]
    assert batch.src_len.tolist() == [3, 2]
    assert batch.tgt_in.tolist() == [[BOS_ID, 8, PAD_ID, PAD_ID], [BOS_ID, 9, 10, 11]]
    assert batch.tgt_out.tolist() == [[8, EOS_ID, PAD_ID, PAD_ID], [9, 10, 11, EOS_ID]]
    assert batch.n_tokens == 6


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(1, 40)), min_size=1, max_size=300),
       st.integers(1, 50), st.one_of(st.none(), st.integers(1, 400)), st.integers(0, 10**6), st.integers(1, 400))
def test_bucket_batches_yield_every_pair_exactly_once(lengths, batch_size, batch_tokens, seed, pool):
    src, tgt = [a for a, _ in lengths], [b for _, b in lengths]
    batches = bucket_batches(src, tgt, batch_size, batch_tokens, np.random.default_rng(seed), pool=pool)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))
    assert all(batches)
    for b in batches:
        if batch_tokens is None:
            assert len(b) <= batch_size
        elif len(b) > 1:
            assert len(b) * max(tgt[i] + 1 for i in b) <= batch_tokens


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(1, 40)), min_size=1, max_size=130),
       st.integers(0, 3000))
def test_split_passes_cover_the_batch_in_order_within_the_limit(lengths, max_pieces):
    src, tgt = [a for a, _ in lengths], [b for _, b in lengths]
    index = list(range(len(lengths)))
    parts = split_passes(index, src, tgt, max_pieces)
    assert [i for part in parts for i in part] == index and all(parts)
    if not max_pieces or padded_pieces(index, src, tgt) <= max_pieces:
        assert parts == [index]
    for part in parts:
        assert len(part) == 1 or not max_pieces or padded_pieces(part, src, tgt) <= max_pieces
    sizes = {len(part) for part in parts}
    assert max(sizes) - min(sizes) <= len(parts)  # near-equal, so no pass is needlessly large


def test_padded_pieces_count_both_sides_with_their_specials():
    assert padded_pieces([0, 1], [3, 5], [4, 2]) == 2 * (5 + 1 + 4 + 1)


def test_bucketing_keeps_similar_lengths_together_and_reshuffles():
    rng = random.Random(0)
    src = [rng.randint(1, 50) for _ in range(1000)]
    tgt = [s + rng.randint(0, 3) for s in src]
    a = bucket_batches(src, tgt, 32, None, np.random.default_rng(1))
    b = bucket_batches(src, tgt, 32, None, np.random.default_rng(2))
    assert a[:] != b[:] and a[:] == bucket_batches(src, tgt, 32, None, np.random.default_rng(1))[:]

    def padding(lens):
        return sum(len(x) * max(lens[i] for i in x) - sum(lens[i] for i in x) for x in a[:]) / sum(lens)

    assert padding(tgt) < 0.05  # random batches would pad ~50%
    assert padding(tgt) < padding(src)  # the unpacked decoder's side is the tight one


def test_length_sorted_chunks_cover_all():
    chunks = length_sorted_chunks([5, 1, 3, 2], 3)
    assert chunks == [[1, 3, 2], [0]]


def test_pools_bound_the_sort_and_every_rank_takes_its_share_once():
    rng = random.Random(0)
    src = np.array([rng.randint(1, 60) for _ in range(5000)])
    tgt = np.array([s + rng.randint(0, 3) for s in src])
    plan = bucket_batches(src, tgt, 32, None, np.random.default_rng(3), pool=1000)
    assert sorted(i for batch in plan for i in batch) == list(range(5000))
    padding = sum(len(b) * tgt[b].max() - tgt[b].sum() for b in plan) / tgt.sum()
    assert padding < 0.1  # sorted within pools of 1,000: still tight
    from nmt.training.distributed import Processes
    for world in (2, 3):  # what each rank of a several-process step reads
        seen = [i for batch in plan for rank in range(world) for i in Processes(rank, world).shard(batch)]
        assert sorted(seen) == list(range(5000))
