"""The hand-written backward through time against autograd on the unrolled decoder."""
from __future__ import annotations

import pytest
import torch

from nmt.batching import make_batch
from nmt.config import ModelConfig
from nmt.model import build_model
from nmt.tokenizer import PAD_ID


def _model(layers: int, dropout: float):
    torch.manual_seed(0)
    cfg = ModelConfig(embed_size=6, hidden_size=8, layers=layers, dropout=dropout, vocab=30)
    return build_model(cfg, PAD_ID).double().train()


def _run(model, batch, unrolled: bool, seed: int):
    """Outputs, attention and every parameter's gradient of one teacher-forced pass."""
    model.zero_grad()
    torch.manual_seed(seed)  # the same dropout masks for both paths
    decoder = model.decoder
    state = model.encode(batch.src, batch.src_len)
    if unrolled:
        gates = decoder._embed_gates(batch.tgt_in, slice(None, decoder.embedding.embedding_dim))
        outputs, attn = decoder._unrolled(gates, state, *decoder._dropout_masks(gates))
    else:
        outputs, attn = decoder(batch.tgt_in, state)
    # weigh each position differently so that every output's gradient is checked
    weights = torch.linspace(-1, 2, outputs.numel(), dtype=outputs.dtype).view_as(outputs)
    (outputs * weights).sum().backward()
    return outputs.detach(), attn.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                               if not n.startswith("generator")}


@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_outputs_and_gradients_equal_autograds(layers, dropout):
    model = _model(layers, dropout)
    batch = make_batch([[5, 6, 7, 8, 9], [8, 9], [10]], [[10, 11, 12, 13], [14, 15], [4, 5, 6, 7, 8]])
    out, attn, grads = _run(model, batch, unrolled=False, seed=7)
    ref_out, ref_attn, ref_grads = _run(model, batch, unrolled=True, seed=7)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(attn, ref_attn)
    assert grads.keys() == ref_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], msg=name)
    assert all(g.abs().sum() > 0 for n, g in grads.items() if "decoder" in n and "embedding" not in n)


def test_masked_source_positions_get_no_attention_and_no_key_gradient():
    model = _model(2, 0.0)
    batch = make_batch([[5, 6, 7, 8, 9], [8]], [[10, 11], [14, 15, 16]])
    state = model.encode(batch.src, batch.src_len)
    memory = state.memory.detach().requires_grad_()
    keys = state.proj_keys.detach().requires_grad_()
    outputs, attn = model.decoder(batch.tgt_in, state._replace(memory=memory, proj_keys=keys))
    outputs.sum().backward()
    assert torch.all(attn[1, :, 2:] == 0)
    assert torch.all(memory.grad[1, 2:] == 0) and torch.all(keys.grad[1, 2:] == 0)
    assert memory.grad[1, :2].abs().sum() > 0 and keys.grad[1, :2].abs().sum() > 0
