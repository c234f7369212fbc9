import torch

from nmt.batching import make_batch
from nmt.search import greedy_search, max_output_lengths
from nmt.tokenizer import BOS_ID, EOS_ID

from conftest import tiny_model


def test_greedy_matches_a_manual_step_by_step_argmax():
    model = tiny_model(vocab=30, seed=3)
    batch = make_batch([[5, 6, 7, 8]])
    hyp = greedy_search(model, batch.src, batch.src_len, torch.tensor([10]))[0]
    state = model.encode(batch.src, batch.src_len)
    prev, tokens = torch.tensor([BOS_ID]), []
    for _ in range(10):
        out, state, _ = model.decoder.step(prev, state)
        prev = model.generator(out).argmax(-1)
        if int(prev) == EOS_ID:
            break
        tokens.append(int(prev))
    assert hyp.tokens == tokens
    assert hyp.attention.shape == (min(len(tokens) + 1, 10), 5)


def test_length_budget_is_respected_per_sentence():
    model = tiny_model(vocab=30, seed=4)
    batch = make_batch([[5, 6], [7, 8, 9, 10]])
    hyps = greedy_search(model, batch.src, batch.src_len, torch.tensor([2, 5]))
    assert len(hyps[0].tokens) <= 2 and len(hyps[1].tokens) <= 5


def test_max_output_lengths():
    assert max_output_lengths(torch.tensor([1, 10, 100]), 2.0, 5, cap=50).tolist() == [7, 25, 50]
