"""Reservoir sampling (nmt.data.sampling): everything in order while it fits, then a uniform,
seeded sample of a fixed size."""
from collections import Counter

from nmt.data.sampling import Reservoir


def test_everything_is_kept_in_order_while_it_fits():
    sample = Reservoir(10)
    for k in range(10):
        sample.offer(k)
    assert sample.items == list(range(10)) and sample.offered == 10


def test_a_larger_stream_gives_a_uniform_seeded_sample():
    def draw(seed):
        sample = Reservoir(100, seed)
        for k in range(1000):
            sample.offer(k)
        return sample.items

    assert draw(0) == draw(0) != draw(1) and len(set(draw(0))) == 100
    counts = Counter(k // 100 for seed in range(200) for k in draw(seed))  # tenths of the stream
    assert all(1600 < n < 2400 for n in counts.values()), counts  # 2,000 each if uniform
