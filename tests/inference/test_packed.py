"""Linear layers packed for oneDNN (nmt.inference.packed) decode as the layers they replace."""
import pytest
import torch
from test_transformer import _model

from nmt.data.batching import make_batch
from nmt.inference.packed import PackedFeedForward, PackedLinear, pack_linears, packing_available
from nmt.inference.greedy import greedy_search
from nmt.inference.search import max_output_lengths

DTYPES = [torch.float32, pytest.param(torch.bfloat16, marks=pytest.mark.skipif(
    not packing_available(torch.bfloat16), reason="needs a CPU with native bf16"))]


@pytest.mark.skipif(not packing_available(torch.float32), reason="needs oneDNN")
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_packed_transformer_decodes_as_the_unpacked_one(dtype):
    model = _model(tie_embeddings=True).to(dtype)
    batch = make_batch([[5, 9, 11, 6], [7, 8], [12, 13, 14, 15, 16]])
    budget = max_output_lengths(batch.src_len, 2.0, 5, cap=20)
    with torch.inference_mode():
        state = model.encode(batch.src, batch.src_len)
        first = model.step(torch.tensor([1, 1, 1]), state)[0]
        hyps = greedy_search(model, batch.src, batch.src_len, budget)
        packed = pack_linears(model)
        packed_first = packed.step(torch.tensor([1, 1, 1]), packed.encode(batch.src, batch.src_len))[0]
        packed_hyps = greedy_search(packed, batch.src, batch.src_len, budget)
    assert not any(type(m) is torch.nn.Linear for m in packed.modules())
    assert sum(isinstance(m, PackedFeedForward) for m in packed.modules()) == 4  # 2 + 2 layers
    assert isinstance(packed.generator.proj, PackedLinear)
    assert packed.generator.proj.weight is packed.tgt_embedding.weight  # still tied
    torch.testing.assert_close(packed_first, first)
    assert [h.tokens for h in packed_hyps] == [h.tokens for h in hyps]
    # oneDNN's packed kernels sum in another order than MKL's: float32 rounding, not float64's
    torch.testing.assert_close([h.score for h in packed_hyps], [h.score for h in hyps], rtol=1e-5, atol=1e-5)


def test_only_a_model_in_eval_mode_is_packed():
    with pytest.raises(AssertionError, match="decoding only"):
        pack_linears(_model().train())
