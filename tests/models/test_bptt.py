"""The hand-written backward passes through time against autograd: the unrolled decoder,
nn.GRU for the encoder, and numerical gradients."""
from __future__ import annotations

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from nmt.config import ModelConfig
from nmt.data.batching import make_batch
from nmt.data.tokenizer import PAD_ID
from nmt.models.build import build_model
from nmt.models.rnn.bptt import Packing, packed_gru
from nmt.models.rnn.encoder import GRUEncoder


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


def _encoder_pass(encoder, src, lengths, by_hand: bool):
    """Outputs, final states and every weight's gradient of the packed GRU, by hand or by nn.GRU."""
    encoder.zero_grad()
    embedded = encoder.embedding(src)
    if by_hand:
        outputs, final = encoder._by_hand(embedded, lengths)
    else:
        packed = pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
        packed_out, final = encoder.rnn(packed)
        outputs, _ = pad_packed_sequence(packed_out, batch_first=True, total_length=src.size(1))
        if encoder.bidirectional:
            final = torch.cat(final.view(encoder.layers, 2, *final.shape[1:]).unbind(1), dim=-1)
    out_weights = torch.linspace(-1, 2, outputs.numel(), dtype=outputs.dtype).view_as(outputs)
    final_weights = torch.linspace(2, -1, final.numel(), dtype=final.dtype).view_as(final)
    ((outputs * out_weights).sum() + (final * final_weights).sum()).backward()
    return outputs.detach(), final.detach(), {n: p.grad.clone() for n, p in encoder.named_parameters()}


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("layers", [1, 2, 3])
def test_packed_gru_by_hand_equals_nn_gru(bidirectional, layers):
    torch.manual_seed(0)
    encoder = GRUEncoder(30, 6, 8, layers, bidirectional, 0.0, PAD_ID).double().train()
    src = torch.tensor([[5, 6, 7, 8, 9], [8, 9, 0, 0, 0], [10, 11, 12, 0, 0], [4, 0, 0, 0, 0]])
    lengths = torch.tensor([5, 2, 3, 1])
    out, final, grads = _encoder_pass(encoder, src, lengths, by_hand=True)
    ref_out, ref_final, ref_grads = _encoder_pass(encoder, src, lengths, by_hand=False)
    torch.testing.assert_close(out, ref_out)
    assert torch.all(out[1, 2:] == 0)
    torch.testing.assert_close(final, ref_final)
    for name, grad in ref_grads.items():
        torch.testing.assert_close(grads[name], grad, msg=name)


def test_packed_gru_gradients_with_dropout_masks_pass_gradcheck():
    torch.manual_seed(1)
    lengths = torch.tensor([2, 4, 3])
    packing = Packing.of(lengths, 4)
    tokens, size, layers = len(packing.index), 3, 2
    x = torch.randn(tokens, 4, dtype=torch.float64, requires_grad=True)
    masks = (torch.rand(layers - 1, tokens, 2 * size, dtype=torch.float64) > 0.3).double() / 0.7

    def weights(inputs):
        shapes = [(2, 3 * size, inputs), (2, 3 * size), (2, 3 * size, size), (2, 3 * size)]
        return tuple(torch.randn(s, dtype=torch.float64, requires_grad=True) for s in shapes)
    cells = [weights(4), weights(2 * size)]
    flat = [w for cell in cells for w in cell]

    def run(x, *flat):
        return packed_gru(x, packing, masks, [flat[i:i + 4] for i in range(0, len(flat), 4)])
    assert torch.autograd.gradcheck(run, (x, *flat))


def test_packing_layout():
    packing = Packing.of(torch.tensor([2, 4, 1]), 4)  # sorted: sentence 1 (4), 0 (2), 2 (1)
    assert packing.batch_sizes == [3, 2, 1, 1]
    # time-major rows: (t0: s1, s0, s2), (t1: s1, s0), (t2: s1), (t3: s1)
    assert packing.index.tolist() == [4, 0, 8, 5, 1, 6, 7]
    assert packing.rev.tolist() == [6, 4, 2, 5, 1, 3, 0]
    assert packing.prev.tolist() == [7, 7, 7, 0, 1, 3, 5]
    assert packing.last.tolist() == [4, 6, 2]
