"""The Transformer's building blocks, each against its definition or PyTorch's own."""
import math

import pytest
import torch
import torch.nn.functional as F

from nmt.models.attention import Float32ScaledDotProduct, scaled_dot_product
from nmt.models.masks import lengths_to_mask
from nmt.models.transformer.layers import FeedForward, Residual
from nmt.models.transformer.multihead import MultiHeadAttention, causal_mask
from nmt.models.transformer.positional import PositionalEncoding, sinusoids


def test_sinusoids_follow_the_formula_and_positions_can_start_anywhere():
    table = sinusoids(50, 8)
    for i, j in ((0, 0), (7, 1), (49, 3)):
        angle = i / 10000 ** (2 * j / 8)
        assert table[i, 2 * j].item() == pytest.approx(math.sin(angle), abs=1e-6)
        assert table[i, 2 * j + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    encode = PositionalEncoding(8, dropout=0.0, length=4)  # grows past its first table
    x = torch.randn(2, 10, 8)
    whole = encode(x)
    torch.testing.assert_close(whole, x + sinusoids(10, 8))
    torch.testing.assert_close(encode(x[:, 6:7], offset=6), whole[:, 6:7])  # one decoding step
    rows = encode(x[:, 3:4], offset=torch.tensor([3, 3]))  # each row's own position
    torch.testing.assert_close(rows, whole[:, 3:4])
    mixed = encode(torch.stack([x[0, 2:3], x[1, 9:10]]), offset=torch.tensor([2, 9]))
    torch.testing.assert_close(mixed, torch.stack([whole[0, 2:3], whole[1, 9:10]]))
    assert "table" not in encode.state_dict()  # computed, never saved in a checkpoint


def test_scaled_dot_product_matches_pytorchs_and_gives_masked_keys_zero_weight():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 7, 4), torch.randn(2, 3, 7, 6)
    mask = lengths_to_mask(torch.tensor([7, 4]), 7)[:, None, None, :]  # (batch, 1, 1, k_len)
    context, weights = scaled_dot_product(q, k, v, mask)
    torch.testing.assert_close(context, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert torch.all(weights[1, :, :, 4:] == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5))


def test_multi_head_attention_equals_torchs_with_the_same_weights():
    torch.manual_seed(1)
    ours = MultiHeadAttention(12, heads=3)
    theirs = torch.nn.MultiheadAttention(12, 3, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.query_proj.weight, ours.key_proj.weight,
                                               ours.value_proj.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.query_proj.bias, ours.key_proj.bias, ours.value_proj.bias]))
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)
    queries, memory = torch.randn(2, 5, 12), torch.randn(2, 6, 12)
    real = lengths_to_mask(torch.tensor([6, 3]), 6)  # (batch, k_len)
    out, weights = ours(queries, *ours.project_keys_values(memory), real[:, None, None, :])
    want, want_weights = theirs(queries, memory, memory, key_padding_mask=~real, average_attn_weights=False)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(weights, want_weights)
    assert torch.all(weights[1, :, :, 3:] == 0)  # padded keys: exactly zero in every head


def test_self_attention_is_padding_invariant_and_causal():
    torch.manual_seed(2)
    attend = MultiHeadAttention(8, heads=2)
    def self_attention(x, lengths):
        mask = lengths_to_mask(lengths, x.size(1))[:, None, None, :] & causal_mask(x.size(1))
        return attend(x, *attend.project_keys_values(x), mask)[0]
    sentence = torch.randn(1, 4, 8)
    alone = self_attention(sentence, torch.tensor([4]))
    batched = self_attention(torch.cat([torch.cat([sentence, torch.randn(1, 3, 8)], 1), torch.randn(1, 7, 8)]),
                             torch.tensor([4, 7]))
    torch.testing.assert_close(batched[:1, :4], alone)  # padding after it changes nothing
    changed = sentence.clone()
    changed[0, 3] += 1.0  # a later position changes ...
    after = self_attention(changed, torch.tensor([4]))
    torch.testing.assert_close(after[:, :3], alone[:, :3])  # ... no earlier output
    assert not torch.allclose(after[:, 3], alone[:, 3])


@pytest.mark.parametrize("pre_norm", [True, False])
def test_residual_sublayer_norms_where_it_says(pre_norm):
    torch.manual_seed(3)
    block, ffn = Residual(6, dropout=0.0, pre_norm=pre_norm), FeedForward(6, 24, dropout=0.0)
    x = torch.randn(2, 3, 6) * 5 + 2
    out = block(x, ffn)
    if pre_norm:
        torch.testing.assert_close(out, x + ffn(F.layer_norm(x, (6,))))
    else:
        torch.testing.assert_close(out, F.layer_norm(x + ffn(x), (6,)))
        assert out.mean(-1).abs().max() < 1e-5  # normalised at the output


def test_training_under_cpu_autocast_runs_attention_products_in_float32():
    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 2)
    x = torch.randn(3, 5, 16)
    mask = lengths_to_mask(torch.tensor([5, 3, 1]), 5)[:, None, None, :]
    with torch.no_grad():
        reference, reference_weights = attention(x, *attention.project_keys_values(x), mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, trained = attention(x, *attention.project_keys_values(x), mask)
        with torch.no_grad():  # search too, since a step's key length is a new shape each step
            _, searched = attention(x, *attention.project_keys_values(x), mask)
    assert trained.dtype == searched.dtype == torch.float32
    assert (trained[1, :, :, 3:] == 0).all()
    torch.testing.assert_close(trained, reference_weights, atol=0.02, rtol=0)


def test_float32_attention_gradients_match_autograds():
    torch.manual_seed(0)
    mask = lengths_to_mask(torch.tensor([4, 2]), 4)[:, None, None, :] & causal_mask(4)
    inputs = [torch.randn(2, 3, 4, 8).bfloat16() for _ in range(3)]
    grads = []
    for attend, dtype in ((Float32ScaledDotProduct.apply, torch.bfloat16), (scaled_dot_product, torch.float32)):
        leaves = [t.detach().to(dtype).requires_grad_() for t in inputs]
        context, weights = attend(*leaves, mask)
        (context.sum() + (weights * torch.arange(4.0)).sum()).backward()
        grads.append([t.grad for t in leaves])
    for fused, reference in zip(*grads):
        assert fused.dtype == torch.bfloat16
        torch.testing.assert_close(fused.float(), reference, atol=0.02, rtol=0.01)
