import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nmt.models.attention import AdditiveAttention, masked_softmax
from nmt.models.masks import lengths_to_mask


def test_masked_softmax_gives_padding_exactly_zero_and_rows_sum_to_one():
    scores = torch.randn(3, 5) * 10
    mask = lengths_to_mask(torch.tensor([5, 2, 1]), 5)
    weights = masked_softmax(scores, mask)
    assert torch.all(weights[~mask] == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=6), st.integers(0, 2**31 - 1))
def test_masked_softmax_property(lengths, seed):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(len(lengths), 9, generator=gen) * 30
    mask = lengths_to_mask(torch.tensor(lengths), 9)
    weights = masked_softmax(scores, mask)
    assert torch.all(weights[~mask] == 0)
    assert torch.all(weights[mask] >= 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(len(lengths)))


def test_masked_softmax_ignores_padded_scores():
    mask = lengths_to_mask(torch.tensor([2]), 4)
    a = masked_softmax(torch.tensor([[1.0, 2.0, 3.0, 4.0]]), mask)
    b = masked_softmax(torch.tensor([[1.0, 2.0, -50.0, 1e4]]), mask)
    torch.testing.assert_close(a, b)


def test_masked_softmax_under_half_precision_has_no_overflow():
    scores = torch.randn(2, 4).to(torch.bfloat16)
    weights = masked_softmax(scores, lengths_to_mask(torch.tensor([4, 2]), 4))
    assert weights.dtype == torch.bfloat16 and torch.isfinite(weights).all()
    assert torch.all(weights[1, 2:] == 0)


def test_additive_attention_matches_naive_loop():
    torch.manual_seed(0)
    attn = AdditiveAttention(key_size=3, query_size=5, attn_size=7)
    keys, query = torch.randn(2, 4, 3), torch.randn(2, 5)
    mask = lengths_to_mask(torch.tensor([4, 3]), 4)
    context, weights = attn(query, attn.project_keys(keys), keys, mask)
    for b in range(2):
        n = int(mask[b].sum())
        scores = torch.stack([attn.score(torch.tanh(attn.query_proj(query[b]) + attn.key_proj(keys[b, j])))
                              .squeeze() for j in range(n)])
        alpha = torch.softmax(scores, 0)
        torch.testing.assert_close(weights[b, :n], alpha, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(context[b], (alpha[:, None] * keys[b, :n]).sum(0), rtol=1e-5, atol=1e-6)
        assert torch.all(weights[b, n:] == 0)


def test_additive_scores_values_and_gradients_match_the_plain_tanh_formula():
    from nmt.models.attention import _AdditiveScores

    torch.manual_seed(4)
    query, keys, v = (torch.randn(2, 7, dtype=torch.float64), torch.randn(2, 4, 7, dtype=torch.float64),
                      torch.randn(7, dtype=torch.float64))
    upstream = torch.randn(2, 4, dtype=torch.float64)

    def grads(scores_of):
        inputs = [t.clone().requires_grad_(True) for t in (query, keys, v)]
        (scores_of(*inputs) * upstream).sum().backward()
        return [t.grad for t in inputs]

    torch.testing.assert_close(_AdditiveScores.apply(query, keys, v), torch.tanh(keys + query.unsqueeze(1)) @ v)
    fused = grads(_AdditiveScores.apply)
    plain = grads(lambda q, k, w: torch.tanh(k + q.unsqueeze(1)) @ w)
    for got, want in zip(fused, plain):
        torch.testing.assert_close(got, want)
