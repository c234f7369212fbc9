"""The output layer padded to a multiple of 16 (nmt.inference.padded) decodes as the layer it
replaces: the same logits up to float32 rounding, so the same translations."""
import pytest
import torch
from conftest import tiny_model
from test_transformer import _model

from nmt.data.batching import make_batch
from nmt.inference.argmax import LinearArgmax
from nmt.inference.beam import beam_search
from nmt.inference.greedy import greedy_search
from nmt.inference.padded import MULTIPLE, PaddedLinear, pad_output_layer
from nmt.inference.quantize import load_for_decoding
from nmt.inference.search import max_output_lengths


@pytest.mark.parametrize("rows", [1, 37, 640])
@pytest.mark.parametrize("width", [9, 4153, 5649])
def test_a_padded_layer_gives_the_same_logits(rows, width):
    torch.manual_seed(0)
    linear = torch.nn.Linear(256, width)
    padded = PaddedLinear(linear)
    x = torch.randn(rows, 256)
    with torch.inference_mode():
        logits = padded(x)
        assert logits.shape == (rows, width)
        # MKL sums some shapes in another order (one row, the last columns of an odd width)
        torch.testing.assert_close(logits, linear(x), rtol=1e-6, atol=1e-6)
    assert padded.padded_weight.size(0) % MULTIPLE == 0 and padded.padded_weight.size(0) - width < MULTIPLE
    assert padded.weight is linear.weight and padded.bias is linear.bias


@pytest.mark.parametrize("family", ["transformer", "gru"])
def test_a_padded_model_decodes_as_the_plain_one(family):
    model = _model(tie_embeddings=True) if family == "transformer" else tiny_model(41, tie_embeddings=True)
    plain_keys = set(model.state_dict())
    batch = make_batch([[5, 9, 11, 6], [7, 8], [12, 13, 14, 15, 16]])
    budget = max_output_lengths(batch.src_len, 2.0, 5, cap=20)

    def searches(m):
        return (greedy_search(m, batch.src, batch.src_len, budget),
                [h for hyps in beam_search(m, batch.src, batch.src_len, budget, 3, nbest=3) for h in hyps])

    with torch.inference_mode():
        greedy, beam = searches(model)
        padded = pad_output_layer(model)
        padded_greedy, padded_beam = searches(padded)
    assert isinstance(padded.generator.proj, PaddedLinear)
    assert not any(module.training for module in padded.modules())  # in eval mode, as the model
    embedding = padded.tgt_embedding if family == "transformer" else padded.decoder.embedding
    assert padded.generator.proj.weight is embedding.weight  # still tied
    assert set(padded.state_dict()) == plain_keys  # the copy is never saved
    assert LinearArgmax.available(padded.generator.proj)
    for found, padded_found in ((greedy, padded_greedy), (beam, padded_beam)):
        assert [h.tokens for h in padded_found] == [h.tokens for h in found]
        torch.testing.assert_close([h.score for h in padded_found], [h.score for h in found], rtol=1e-5, atol=1e-5)


def test_only_an_odd_width_in_eval_mode_is_padded():
    with pytest.raises(AssertionError, match="decoding only"):
        pad_output_layer(_model().train())
    model = _model()
    model.generator.proj = torch.nn.Linear(16, 48)
    assert type(pad_output_layer(model).generator.proj) is torch.nn.Linear


def test_float32_decoding_on_cpu_pads_and_int8_does_not(transformer_run):
    fp32 = load_for_decoding(transformer_run, "fp32", torch.device("cpu"))[0]
    int8 = load_for_decoding(transformer_run, "int8", torch.device("cpu"))[0]
    width = fp32.generator.proj.out_features
    assert isinstance(fp32.generator.proj, PaddedLinear) == bool(width % MULTIPLE)
    assert not isinstance(int8.generator.proj, PaddedLinear)
