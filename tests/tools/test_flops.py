import pytest
import torch
from conftest import tiny_model

from nmt.data.batching import make_batch
from nmt.tools.flops import matmul_peak_flops, training_flops


def test_a_batchs_flops_are_its_sentences_flops_when_nothing_is_padded():
    model = tiny_model(vocab=30).train()
    src, tgt = [[5, 6, 7], [8, 9, 10]], [[11, 12], [13, 14]]
    both = training_flops(model, [make_batch(src, tgt)], 0.1)
    alone = [training_flops(model, [make_batch([s], [t])], 0.1) for s, t in zip(src, tgt)]
    assert both == sum(alone) > 0
    assert all(p.grad is None for p in model.parameters())  # no gradients left behind


def test_the_generator_counts_forward_and_both_backward_products():
    batch = make_batch([[5, 6, 7], [8, 9]], [[11, 12, 13], [14]])
    n_tokens, hidden = int(batch.tgt_mask.sum()), 8  # tiny_model's hidden size
    small, large = (training_flops(tiny_model(vocab=v), [batch], 0.0) for v in (30, 40))
    # logits x W^T, then x's gradient (n, V) @ W and W's gradient (V, n) @ x: 2·n·H·V each
    assert large - small == 3 * 2 * n_tokens * hidden * (40 - 30)


def test_counting_a_longer_source_counts_more_encoder_work():
    model = tiny_model(vocab=30)
    short = training_flops(model, [make_batch([[5, 6]], [[11, 12]])], 0.0)
    long = training_flops(model, [make_batch([[5, 6, 7, 8]], [[11, 12]])], 0.0)
    assert long > short


def test_matmul_peak_is_a_rate_and_names_its_dtype():
    flops, dtype = matmul_peak_flops(torch.device("cpu"), size=128, repeats=2)
    assert flops > 1e6 and dtype == "float32"


def test_counting_refuses_a_model_off_the_cpu():
    model = tiny_model(vocab=30).to("meta")
    with pytest.raises(ValueError, match="CPU"):
        training_flops(model, [], 0.0)
