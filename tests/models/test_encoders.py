import pytest
import torch

from nmt.models.rnn.encoder import GRUEncoder


@pytest.mark.parametrize("bidirectional", [True, False])
def test_encoder_output_ignores_padding_and_batch_neighbours(bidirectional):
    torch.manual_seed(0)
    enc = GRUEncoder(vocab_size=20, embed_size=6, hidden_size=8, layers=2,
                     bidirectional=bidirectional, dropout=0.0, pad_id=0).eval()
    sentence = torch.tensor([[5, 6, 7]])
    alone_out, alone_final = enc(sentence, torch.tensor([3]))
    batch = torch.tensor([[5, 6, 7, 0, 0, 0], [9, 8, 7, 6, 5, 4]])
    out, final = enc(batch, torch.tensor([3, 6]))
    assert out.shape == (2, 6, 8) and final.shape == (2, 2, 8)
    torch.testing.assert_close(out[0, :3], alone_out[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(final[:, 0], alone_final[:, 0], rtol=1e-5, atol=1e-6)
    assert torch.all(out[0, 3:] == 0)
