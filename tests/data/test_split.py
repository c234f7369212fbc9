"""The held-out split (nmt.data.split): grouped by source, capped at a tenth, a pure function of
the text, chosen in one pass; the same split as sorting every distinct source by its hash."""
import hashlib
import random

from nmt.data.split import HeldOut, split_by_source

def test_split_groups_by_source_and_caps_held_out_parts():
    pairs = [(f"s{i % 50}", f"t{i}") for i in range(200)]  # 50 sources, 4 translations each
    split = split_by_source(pairs, valid_size=100, test_size=100)
    assert len({s for s, _ in split.test}) == 5 and len({s for s, _ in split.valid}) == 5
    train_src = {s for s, _ in split.train}
    assert not train_src & {s for s, _ in split.test + split.valid}
    assert sorted(split.train + split.valid + split.test) == sorted(pairs)


def test_split_is_independent_of_line_order():
    pairs = [(f"s{i}", f"t{i}") for i in range(100)]
    a = split_by_source(pairs, 5, 5)
    b = split_by_source(list(reversed(pairs)), 5, 5)
    assert sorted(a.test) == sorted(b.test) and sorted(a.valid) == sorted(b.valid)


def _sorted_reference(pairs, valid_size, test_size):
    """The split as it was first written: every distinct source sorted by SHA-1, in memory."""
    sources = sorted({s for s, _ in pairs}, key=lambda s: hashlib.sha1(s.encode()).digest())
    cap = len(sources) // 10
    n_test, n_valid = min(test_size, cap), min(valid_size, cap)
    test, valid = set(sources[:n_test]), set(sources[n_test:n_test + n_valid])
    return ([p for p in pairs if p[0] not in test and p[0] not in valid], [p for p in pairs if p[0] in valid],
            [p for p in pairs if p[0] in test])


def test_one_pass_gives_the_split_of_sorting_every_source():
    rng = random.Random(1)
    for _ in range(200):
        n = rng.randint(0, 2000)
        pairs = [(f"s{rng.randint(0, max(1, n // rng.randint(1, 4)))}", f"t{i}") for i in range(n)]
        valid_size, test_size = rng.randint(0, 300), rng.randint(0, 300)
        split = split_by_source(pairs, valid_size, test_size)
        assert (split.train, split.valid, split.test) == _sorted_reference(pairs, valid_size, test_size)


def test_the_sources_are_read_once_from_a_stream():
    sources = (f"s{i}" for i in range(1000))  # a generator: a second pass would see nothing
    held_out = HeldOut.choose(sources, 10, 20)
    assert len(held_out.valid) == 10 and len(held_out.test) == 20
    assert sum(held_out.part(f"s{i}") == "test" for i in range(1000)) == 20
